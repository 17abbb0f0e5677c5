#!/bin/sh
# full replay (gpu_bench replay step), torch train default vs moonbright x3
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
OUT=/tmp/gb TRACE=.gpu/azure_llm_conv_2023.csv STEPS=replay STEP_BUDGET=200 timeout 230 sh tools/gpu_bench.sh $B 2>&1 | tail -12; cp /tmp/gb/replay.json $OUT/full-replay.json
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for r in 1 2 3; do
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright train > /tmp/t$r.json 2>/tmp/t$r.err
  echo "== train $r"; grep -A3 "CONFIG" /tmp/t$r.err; grep -i "error\|Traceback" /tmp/t$r.err | head -3
  [ $r = 1 ] && cp /tmp/t$r.json $OUT/train1.json
done
kill $DP; wait $DP
date -u
