#!/bin/sh
# vspace's slowest allocation after the other strategies, with background driver calls in slices of 2
# (the default) and whole ranges (0), in turn; on an H100 also at a budget under the card (70G).
# Then ctest -L gpu with the defaults. Every run: realloc,grow,grow_async,vspace on a fresh daemon,
# --slow-us 1000, the client's debug log, the daemon's log.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s147; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $2 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; }
one() { # name slice budget
  start $O/$1.dlog $3
  MOONBRIGHT_DRIVER_SLICE=$2 MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay $C \
    --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/$1.json 2>$O/$1.err
  echo "$1 slice $2 budget $3 rc=$? $(python3 tools/goals.py $O/$1.json | grep -E 'grow slowest|vspace (slowest|mean)' | awk '{print $(NF-3)}' | tr '\n' ' ') vspace-slow: $(grep -c '^vspace: ' $O/$1.err)"
  kill $DP; wait $DP
}
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then one s2-$r 2 100G; one s0-$r 0 100G; else one s0-$r 0 100G; one s2-$r 2 100G; fi
done
if [ "$MEM" -lt 100000 ]; then
  for r in 1 2; do one b70s2-$r 2 70G; one b70s0-$r 0 70G; done
fi
grep -h '^vspace: ' $O/*.err | head -20
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
cd $OUT && tar czf s147.tgz s147 && rm -rf s147
date -u
