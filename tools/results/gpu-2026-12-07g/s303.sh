#!/bin/bash
# The code of a57824a on a GPU: the goal set (conversation replay: realloc, grow,
# vspace, cudaMallocAsync; the pairs; bench_vspace growth; goals.py) at --budget 100G;
# where the device holds less than 100 GiB (an H100), the replay again under a budget
# the device holds (70G), and each MoonBright strategy alone on a fresh daemon under
# it, grow with every allocation over 1 ms reported (--slow-us): which of the misses
# come from a device full below the budget. Run with bash.
T0=$(date +%s)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
O=$OUT/s303; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${2:-100G} >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
goal() {  # $1 name, $2 budget
  date -u
  start $O/$1.dlog $2
  timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/$1.json 2>$O/$1.err; echo "$1 rc=$?"
  timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/$1-latency.json 2>/dev/null
  timeout 40 $B/tools/bench_vspace growth > $O/$1-bench_vspace.txt 2>&1
  kill $DP; wait $DP
  python3 $W - $O/$1.json
  python3 tools/goals.py $O/$1.json $O/$1-latency.json $O/$1-bench_vspace.txt | grep -E "MISSED|met \("
}
goal conv100 100G
if [ "$MEM" -lt 102400 ]; then
  goal conv70 70G
  for s in realloc grow vspace; do
    date -u
    start $O/$s-70.dlog 70G
    timeout 100 $B/tools/mbbench replay $C --json --quiet --slow-us 1000 --strategies $s > $O/$s-70.json 2>$O/$s-70.err; echo "$s alone 70G rc=$?"
    kill $DP; wait $DP
    python3 $W - $O/$s-70.json
    grep -c " took " $O/$s-70.err
  done
  grep -h " took " $O/grow-70.err | head -12
fi
LEFT=$((500 - $(date +%s) + T0))
echo "seconds left: $LEFT"
[ $LEFT -gt 100 ] && goal conv100b 100G
cd $OUT && tar czf s303.tgz s303 && rm -rf s303
date -u
