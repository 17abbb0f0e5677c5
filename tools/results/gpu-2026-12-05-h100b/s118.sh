#!/bin/sh
# GPT training through the hook: bench_torch.py train, 2 rounds: the default, PyTorch's cudaMallocAsync backend, the same behind the pluggable interface (libmbtorchpass.so), MoonBright
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s112; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 --target moonbrightd mbclient mbtorchpass 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d); $NEW/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/train.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 220 python3 tools/bench_torch.py --json --mb-lib $NEW/client/libmbclient.so --child-timeout 40 --pass-lib $NEW/tools/libmbtorchpass.so --configs torch-default,torch-cudaMallocAsync,torch-pluggable-cudaMallocAsync,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -12
kill $DP; wait $DP
cd $OUT && tar czf s118.tgz s112 && rm -rf s112
date -u
