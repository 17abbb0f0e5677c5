#!/bin/sh
# the final code: ctest -L gpu; GPT training through the hook, 2 rounds (default, MoonBright)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s126; mkdir -p $O
NEW=$PWD/build-gpu
cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
(cd $NEW && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|exported|descriptors" $O/ctest.log | head -8)
RT=$(mktemp -d); $NEW/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/train.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 python3 tools/bench_torch.py --json --mb-lib $NEW/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -8
kill $DP; wait $DP
cd $OUT && tar czf s126.tgz s126 && rm -rf s126
date -u
