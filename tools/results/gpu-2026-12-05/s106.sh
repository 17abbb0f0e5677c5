#!/bin/sh
# PyTorch training and generation through the hook, 3 rounds each; threads
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
git log --oneline 2>/dev/null | head -1
B=$PWD/build-gpu
O=$OUT/s106; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 220 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -6; grep -i "error\|Traceback" $O/train.err | head -3
timeout 200 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 60 --configs torch-default,torch-moonbright generate --rounds 3 > $O/gen.json 2>$O/gen.err
echo "generate rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: generate" $O/gen.err | tail -6; grep -i "error\|Traceback" $O/gen.err | head -3
timeout 60 $B/tools/mbbench threads --threads 1,16 --pairs 20000 > $O/threads.txt 2>&1; echo "threads rc=$?"; tail -8 $O/threads.txt
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s106.tgz s106 && rm -rf s106
date -u
