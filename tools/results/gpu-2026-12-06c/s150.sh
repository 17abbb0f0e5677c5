#!/bin/sh
# the daemon grants a page pool's extent many free frames only where making the planned ones would
# release free frames first (Grant.warm_full_max_frames): vspace after realloc, grow and grow_async on
# a fresh daemon (as s147/s148, slices of 2), 4 runs at 100G and, on an H100, 2 at 70G; ctest -L gpu;
# then the conversation replay twice with every strategy and cudaMallocAsync (the goals).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s150; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $2 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(" ".join("%s %.3f %.1fus max %.2fms fr %s" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("peak_daemon_frames")) for r in d["strategies"]))
PY
}
one() { # name budget
  start $O/$1.dlog $2
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay $C \
    --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/$1.json 2>$O/$1.err
  echo "$1 budget $2 rc=$? $(vs $O/$1.json) slow-grants-to-vspace $(grep -c 'to session 4' $O/$1.dlog)"
  kill $DP; wait $DP
}
for r in 1 2 3 4; do one r$r 100G; done
if [ "$MEM" -lt 100000 ]; then for r in 1 2; do one b70-$r 70G; done; fi
grep -h 'replay: vspace: ' $O/*.err | head -10
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
for r in 1 2; do
  start $O/conv$r.dlog 100G
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv$r.json 2>$O/conv$r.err
  echo "conv$r rc=$? $(vs $O/conv$r.json)"
  kill $DP; wait $DP
  python3 tools/goals.py $O/conv$r.json | grep -E "MISSED|met" | sed 's/  */ /g' | tr '\n' ';'; echo
done
cd $OUT && tar czf s150.tgz s150 && rm -rf s150
date -u
