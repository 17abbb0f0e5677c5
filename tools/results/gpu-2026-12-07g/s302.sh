#!/bin/bash
# The code of a57824a (the code of 6714174) on a GPU: map_unmap_probe.c (does
# cuMemUnmap on one thread slow cuMemMap + cuMemSetAccess on another: 256 frames of
# 2 MiB and 64 of 32 MiB); ctest -L gpu whole; the goal set (conversation replay:
# realloc, grow, vspace, cudaMallocAsync; the pairs; bench_vspace growth; goals.py);
# GPT training if time is left. Run with bash.
T0=$(date +%s)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s302; mkdir -p $O
P=tools/results/gpu-2026-12-07g
CU=$(dirname $(dirname $(command -v nvcc)))
gcc -O2 -I$CU/include $P/map_unmap_probe.c -o /tmp/probe -L$CU/lib64/stubs -lcuda -lpthread && {
  timeout 60 /tmp/probe 256 2 5; timeout 60 /tmp/probe 64 32 3; } 2>&1 | tee $O/probe.txt
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
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
LEFT=$((560 - $(date +%s) + T0))
echo "seconds left for training: $LEFT"
if [ $LEFT -gt 120 ]; then
  OUT=$O/torch STEPS="torch-train" STEP_BUDGET=$((LEFT-10)) timeout $((LEFT-5)) tools/gpu_bench.sh $B > $O/torch.txt 2>&1
  tail -15 $O/torch.txt
fi
cd $OUT && tar czf s302.tgz s302 && rm -rf s302
date -u
