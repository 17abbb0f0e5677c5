#!/bin/sh
# torch hook exit fix: train x3 (default vs moonbright); mbbench threads
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
git log --oneline | head -1
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for r in 1 2 3; do
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright train > /tmp/t$r.json 2>/tmp/t$r.err
  echo "== train $r"; grep -A3 "CONFIG" /tmp/t$r.err | head -3; grep -i "error\|Traceback\|warning" /tmp/t$r.err | head -5
  cp /tmp/t$r.json $OUT/train$r.json
done
date -u
MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench threads --json > $OUT/threads.json 2>/tmp/th.err; echo "threads rc=$?"; tail -25 /tmp/th.err
kill $DP; wait $DP
date -u
