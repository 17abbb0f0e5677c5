#!/bin/sh
# s153.sh again with the daemon remembering what the device held of its frames when a make found it full
# (device_room): vspace after realloc, grow and grow_async on a fresh daemon at 100G (over the H100's
# memory), 6 runs with debug logs, the vspace calls over 1 ms with their parts, slow grants to vspace.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s154; mkdir -p $O; B=$PWD/build-gpu; C=.gpu/azure_llm_conv_2023.csv
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
for r in 1 2 3 4 5 6; do
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/r$r.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT MOONBRIGHT_LOG=debug timeout 120 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/r$r.json 2>$O/r$r.err
  echo "r$r rc=$? grow-slowest/vspace-mean/p99/slowest $(python3 tools/goals.py $O/r$r.json | grep -E 'vspace (mean|p99|slowest)|grow slowest' | awk '{print $(NF-3)}' | tr '\n' ' ') slow-grants-to-vspace $(grep -c 'to session 4' $O/r$r.dlog)"
  kill $DP; wait $DP
done
grep -h -E "vspace map of|vspace's creation|replay: vspace" $O/r*.err | head -20
cd $OUT && tar czf s154.tgz s154 && rm -rf s154; date -u
