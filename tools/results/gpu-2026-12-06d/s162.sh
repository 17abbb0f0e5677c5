#!/bin/sh
# the daemon died in 2 of 6 runs of s161 with MOONBRIGHTD_IMPORT_QUIET_US=500 (its workers held off after each
# grant, so re-exports queued up while frames ended); 18cbd0f drops an ending frame's re-exports and waits
# for one in flight. The same setting again, 8 runs of realloc, grow, grow_async, vspace on a fresh daemon at
# 100G (the quiet switch is the A/B code of s160/s161, not on main), each checked for the daemon's survival.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s162; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
for r in 1 2 3 4 5 6 7 8; do
  RT=$(mktemp -d); MOONBRIGHTD_IMPORT_QUIET_US=500 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level debug >$O/r$r.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace --json --quiet > $O/r$r.json 2>$O/r$r.err
  rc=$?; alive=no; kill -0 $DP 2>/dev/null && alive=yes
  echo "r$r rc=$rc daemon alive after the replay: $alive; $(grep -c 'stopped at step' $O/r$r.err) strategies stopped"
  kill $DP 2>/dev/null; wait $DP; echo "  daemon exit $?"
done
cd $OUT && tar czf s162.tgz s162 && rm -rf s162
date -u
