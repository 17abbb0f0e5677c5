#!/bin/sh
# handle imports count as in the driver; the daemon asks the device's free memory before a grant makes
# frames (no cap on cached frames). realloc, grow, grow_async, vspace on a fresh daemon at 100G with
# debug logs, 6 runs; ctest -L gpu; the goal replay with every strategy and cudaMallocAsync twice.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s156; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $2 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(" ".join("%s %.3f %.1fus p99 %.1f max %.2fms fr %s" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("peak_daemon_frames")) for r in d["strategies"]))
PY
}
for r in 1 2 3 4 5 6; do for n in 0; do
  start $O/n$n-r$r.dlog 100G
  MOONBRIGHT_LOG=debug timeout 120 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/n$n-r$r.json 2>$O/n$n-r$r.err
  echo "n$n r$r rc=$? $(vs $O/n$n-r$r.json | sed 's/realloc [^a-z]*//') slow-grants-to-vspace $(grep -c 'to session 4' $O/n$n-r$r.dlog)"
  kill $DP; wait $DP
done; done
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
for n in 0 1; do
  start $O/conv-n$n.dlog 100G
  timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv-n$n.json 2>$O/conv-n$n.err
  echo "conv n$n rc=$? $(vs $O/conv-n$n.json)"
  kill $DP; wait $DP
  python3 tools/goals.py $O/conv-n$n.json | grep -E "MISSED|met" | sed 's/  */ /g' | tr '\n' ';'; echo
done
cd $OUT && tar czf s156.tgz s156 && rm -rf s156
date -u
