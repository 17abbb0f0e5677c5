#!/bin/sh
# the reserve's tick has its workers release frames for room (not the main thread); otherwise as s157: daemon
# and client debug logs in realloc, grow, grow_async, vspace on a fresh daemon at 100G, 6 runs; ctest -L gpu;
# then the conversation replay with every strategy and cudaMallocAsync.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s158; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $2 $3 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(" ".join("%s %.3f %.1fus p99 %.1f max %.2fms fr %s" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("peak_daemon_frames")) for r in d["strategies"]))
PY
}
for r in 1 2 3 4 5 6; do
  start $O/r$r.dlog 100G "--log-level debug"
  MOONBRIGHT_LOG=debug timeout 120 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/r$r.json 2>$O/r$r.err
  echo "r$r rc=$? $(vs $O/r$r.json | sed 's/realloc [^a-z]*//') passes>=2ms $(grep -c 'pass of the main loop' $O/r$r.dlog)"
  kill $DP; wait $DP
done
echo "== the daemon's slow passes and requests"
grep -h -E "pass of the main loop|request took" $O/r*.dlog | sed 's/[0-9.]* ms/N ms/' | sort | uniq -c | sort -rn | head -12
grep -h -E "pass of the main loop|request took" $O/r*.dlog | awk '{for(i=1;i<=NF;i++) if($i=="took") print $(i+1), $0}' | sort -rn | head -12 | cut -d' ' -f2- | cut -c1-230
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
start $O/conv.dlog 100G
timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err
echo "conv rc=$? $(vs $O/conv.json)"
kill $DP; wait $DP
echo "== goals"; python3 tools/goals.py $O/conv.json
cd $OUT && tar czf s158.tgz s158 && rm -rf s158
date -u
