#!/bin/bash
# The code of fb07694 on a GPU: ctest -L gpu whole (gpu_async_map's reuse test asks
# for what the freed range holds); the goal set (conversation replay: realloc, grow,
# vspace, cudaMallocAsync; the pairs; bench_vspace growth; goals.py); three tenants
# replaying 1000 requests each at once on one daemon (60G budget), the third killed
# (SIGKILL) 6 s in, the daemon's books read after; GPT training if time is left.
# Run with bash.
T0=$(date +%s)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s203; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
date -u
(cd $B && timeout 200 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|FAILED|LINE" $O/ctest.log | head -20
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${2:-100G} >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
$B/tools/mbctl status > $O/status.txt 2>&1
grep -E "^frames|^handles" $O/status.txt
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
date -u
start $O/tenants.dlog 60G
for s in realloc vspace grow; do timeout 100 $B/tools/mbbench replay $C --json --quiet --requests 1000 --strategies $s > $O/t-$s.json 2>$O/t-$s.err & eval P_$s=$!; done
sleep 6; $B/tools/mbctl tenants > $O/t-tenants-mid.txt 2>&1; pkill -9 -P $P_grow; wait $P_realloc $P_vspace $P_grow
sleep 1; $B/tools/mbctl status > $O/t-status.txt 2>&1; $B/tools/mbctl status --json > $O/t-status.json 2>&1
head -8 $O/t-status.txt; cat $O/t-tenants-mid.txt
for s in realloc vspace grow; do echo "== $s"; tail -2 $O/t-$s.err; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']: print('  ', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'mean %.1f us'%(r.get('alloc_ns',{}).get('mean',0)/1e3), r.get('note',''))" $O/t-$s.json 2>&1 | tail -3; done
nvidia-smi --query-gpu=memory.used --format=csv,noheader
kill $DP; wait $DP; echo "daemon rc=$?"
grep -i "error\|warn\|reclaimed" $O/tenants.dlog | head -8
date -u
LEFT=$((560 - $(date +%s) + T0))
echo "seconds left for training: $LEFT"
if [ $LEFT -gt 120 ]; then
  OUT=$O/torch STEPS="torch-train" STEP_BUDGET=$((LEFT-10)) timeout $((LEFT-5)) tools/gpu_bench.sh $B > $O/torch.txt 2>&1
  tail -15 $O/torch.txt
fi
cd $OUT && tar czf s203.tgz s203 && rm -rf s203
date -u
