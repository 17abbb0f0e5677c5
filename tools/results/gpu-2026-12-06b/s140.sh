#!/bin/sh
# the same H200, warm: where grow's slowest calls wait: grow alone, twice, the client's and the daemon's
# debug logs, --slow-us 2000
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1; B=$PWD/build-gpu; O=$OUT/s140; mkdir -p $O; date -u
for i in 1 2; do
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level debug >$O/g$i.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow \
    --slow-us 2000 --json --quiet > $O/g$i.json 2>$O/g$i.err
  echo "grow$i rc=$?"; $B/tools/mbctl --runtime-dir $RT status | grep -E "reserve|handles"; kill $DP; wait $DP
  python3 tools/goals.py $O/g$i.json | grep grow
  grep waited $O/g$i.err | awk '{for(k=1;k<=NF;k++) if($k=="waited") print $(k+1), $0}' | sort -n | tail -4 | cut -c1-260
done; date -u
