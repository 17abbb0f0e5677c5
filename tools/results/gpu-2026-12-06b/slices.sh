#!/bin/sh
# s142-s145 (run on the H100 of s141, warm, its build-gpu): grow alone on a fresh daemon, the slice
# values of each call in turn, rounds as below, then (s142 only) realloc,grow,vspace twice with
# --slow-us 1000 and debug logs. The calls, as run:
#   s142: ROUNDS="5 6 7 8" ORDER="0 4"              (and the two realloc,grow,vspace runs)
#   s143: ROUNDS="1 2 3"   ORDER="1 2 4 0"
#   s144: ROUNDS="1 2 3 4 5 6", ORDER "0 2 4" in odd rounds, "4 2 0" in even ones
#   s145: ROUNDS="1 2 3 4 5 6 7 8", ORDER "2 4" in odd rounds, "4 2" in even ones
# s146: every strategy and cudaMallocAsync twice with MOONBRIGHT_DRIVER_SLICE=2 (the default after it).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1; B=$PWD/build-gpu; O=$OUT/$NAME; mkdir -p $O; C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; }
for r in $ROUNDS; do
  for sl in $ORDER; do
    start $O/g$sl-$r.dlog
    MOONBRIGHT_DRIVER_SLICE=$sl MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench replay $C --strategies grow --json --quiet > $O/g$sl-$r.json 2>$O/g$sl-$r.err
    echo "slice $sl round $r rc=$? $(python3 tools/goals.py $O/g$sl-$r.json | grep -E 'grow (reserved|mean|slowest)' | awk '{print $(NF-3)}' | tr '\n' ' ') over2ms $(grep -c 'waited [2-9]\.\|waited [1-9][0-9]\.' $O/g$sl-$r.err)"
    kill $DP; wait $DP
  done
done
cd $OUT && tar czf $NAME.tgz $NAME && rm -rf $NAME
