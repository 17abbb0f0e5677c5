#!/bin/sh
# torch train in 7 alternating rounds; mbbench threads 1,16 with 9 repeats
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 330 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 60 --configs torch-default,torch-moonbright train --rounds 7 --steps 200 > $OUT/train-rounds.json 2>/tmp/tr.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" /tmp/tr.err | tail -24; grep -i "error\|Traceback\|warn" /tmp/tr.err | head -5
date -u
MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench threads --threads 1,16 --repeat 9 --json > $OUT/threads.json 2>/tmp/th.err; echo "threads rc=$?"; tail -14 /tmp/th.err
kill $DP; wait $DP
date -u
