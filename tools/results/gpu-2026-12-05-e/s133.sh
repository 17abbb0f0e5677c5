#!/bin/sh
# GPT training through the hook on the machine of s132: de72c81 (s127's code, .gpu/basesrc) and the final code,
# each against the default allocator, 2 rounds each, one after the other
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s133; mkdir -p $O
NEW=$PWD/build-gpu; BASE=$PWD/build-base
cmake -S .gpu/basesrc -B $BASE -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BASE -j16 --target moonbrightd mbclient 2>&1 | grep -E "error|warning: " &
cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 --target moonbrightd mbclient 2>&1 | grep -E "error|warning: "
wait
for v in base new; do
  B=$NEW; [ $v = base ] && B=$BASE
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$v.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train-$v.json 2>$O/train-$v.err
  echo "$v rc=$?"; grep -E "^torch-" $O/train-$v.err | tail -2
  kill $DP; wait $DP
done
cd $OUT && tar czf s133.tgz s133 && rm -rf s133
date -u
