#!/bin/sh
# background driver calls in slices of 4 frames (MOONBRIGHT_DRIVER_SLICE, default 4) against whole ranges
# (0, the code before), on whichever card comes: build, ctest -L gpu, then the conversation replay, grow
# alone on a fresh daemon, 4 rounds of the two in turn; then every strategy with the default, for the goals
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s141; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; }
for r in 1 2 3 4; do
  for sl in 0 4; do
    start $O/g$sl-$r.dlog
    MOONBRIGHT_DRIVER_SLICE=$sl MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench replay $C --strategies grow \
      --json --quiet > $O/g$sl-$r.json 2>$O/g$sl-$r.err
    echo "slice $sl round $r rc=$? $(python3 tools/goals.py $O/g$sl-$r.json | grep -E 'grow (reserved|mean|slowest)' | awk '{print $(NF-3)}' | tr '\n' ' ') over2ms $(grep -c 'waited [2-9]\.\|waited [1-9][0-9]\.' $O/g$sl-$r.err)"
    kill $DP; wait $DP
  done
done
start $O/all.dlog
MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace,cudaMallocAsync --json --quiet > $O/all.json 2>$O/all.err
echo "all rc=$?"; kill $DP; wait $DP
python3 tools/goals.py $O/all.json
cd $OUT && tar czf s141.tgz s141 && rm -rf s141
date -u
