#!/bin/sh
# the code with background slices of 2 (the default) on whichever card comes: ctest -L gpu with the
# default; then grow alone on a fresh daemon, the cached frames a request maps on its path at most
# (MOONBRIGHT_GROW_TAKE_CACHED) 64 (the code) and 8 in turn, both orders, 3 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s147; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; }
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then L="64 8"; else L="8 64"; fi
  for t in $L; do
    start $O/g$t-$r.dlog
    MOONBRIGHT_GROW_TAKE_CACHED=$t MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench replay $C --strategies grow \
      --json --quiet > $O/g$t-$r.json 2>$O/g$t-$r.err
    echo "take $t round $r rc=$? $(python3 tools/goals.py $O/g$t-$r.json | grep -E 'grow (reserved|mean|slowest)' | awk '{print $(NF-3)}' | tr '\n' ' ') over2ms $(grep -c 'waited [2-9]\.\|waited [1-9][0-9]\.' $O/g$t-$r.err)"
    kill $DP; wait $DP
  done
done
cd $OUT && tar czf s147.tgz s147 && rm -rf s147
date -u
