#!/bin/sh
# where grow's slowest calls wait, on whichever card comes: the conversation replay, grow alone, three
# times, with the client's debug log (calls that waited 1 ms or more, by part) and the daemon's grants
# slower than 0.5 ms logged
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s135; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
for i in 1 2 3; do
  RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=500 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/grow$i.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench replay $C --json --quiet --strategies grow,cudaMallocAsync > $O/grow$i.json 2>$O/grow$i.err
  echo "grow$i rc=$?"
  python3 tools/goals.py $O/grow$i.json | grep grow
  grep waited $O/grow$i.err | awk '{for(k=1;k<=NF;k++) if($k=="waited") print $(k+1)}' | sort -n | tail -3 | tr '\n' ' '; echo
  kill $DP; wait $DP
done
cd $OUT && tar czf s135.tgz s135 && rm -rf s135
date -u
