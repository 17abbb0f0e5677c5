#!/bin/bash
# The code of 6714174 on a GPU: the conversation replay's grow strategy twice with
# every allocation over 300 us reported (--slow-us) and the client's waits over
# 1 ms at debug level, to see where grow's slow allocations wait; then the goal set
# once (realloc, grow, vspace, cudaMallocAsync; pairs; bench_vspace; goals.py); GPT
# training through the hook if time is left.
# Run with bash.
T0=$(date +%s)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s301; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${2:-100G} >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
for i in 1 2; do
  date -u
  start $O/grow$i.dlog
  MOONBRIGHT_LOG=debug timeout 100 $B/tools/mbbench replay $C --json --quiet --slow-us 300 --strategies grow > $O/grow$i.json 2>$O/grow$i.err; echo "grow$i rc=$?"
  kill $DP; wait $DP
  python3 $W $O/grow$i.err $O/grow$i.json
done
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
LEFT=$((520 - $(date +%s) + T0))
echo "seconds left for training: $LEFT"
if [ $LEFT -gt 120 ]; then
  OUT=$O/torch STEPS="torch-train" STEP_BUDGET=$((LEFT-10)) timeout $((LEFT-5)) tools/gpu_bench.sh $B > $O/torch.txt 2>&1
  tail -15 $O/torch.txt
fi
cd $OUT && tar czf s301.tgz s301 && rm -rf s301
date -u
