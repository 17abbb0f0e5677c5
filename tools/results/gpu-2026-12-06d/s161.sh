#!/bin/sh
# the reserve's workers keep quiet for a while after a grant's descriptors went out, while the client
# imports them (MOONBRIGHTD_IMPORT_QUIET_US): 0 (off) against 500, alternating, 5 rounds of realloc, grow,
# grow_async, vspace on a fresh daemon at 100G with daemon and client debug logs; imports in grow's slow
# calls, frames made on grants' paths; the goal replay with cudaMallocAsync at each.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s161; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_IMPORT_QUIET_US=$3 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G $2 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(" ".join("%s %.3f %.1fus p99 %.1f max %.2fms pc %s" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("daemon_grant_creates")) for r in d["strategies"] if r["strategy"] != "realloc"))
PY
}
imp() { grep -h "mbbench replay: grow:" $1 | sed -n 's/.* \([0-9]*\) handles imported (\([0-9]*\) us).*/\1 \2/p' | awk '{n+=$1; us+=$2} END{printf "%d handles %.1f ms", n, us/1000}'; }
for r in 1 2 3 4 5; do for q in 0 500; do
  start $O/q$q-r$r.dlog "--log-level debug" $q
  MOONBRIGHT_LOG=debug timeout 120 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/q$q-r$r.json 2>$O/q$q-r$r.err
  echo "q$q r$r rc=$? $(vs $O/q$q-r$r.json) | grow slow calls' imports $(imp $O/q$q-r$r.err)"
  kill $DP; wait $DP
done; done
for q in 0 500; do
  start $O/conv-q$q.dlog "" $q
  timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv-q$q.json 2>$O/conv-q$q.err
  echo "conv q$q rc=$? $(vs $O/conv-q$q.json)"
  kill $DP; wait $DP
done
cd $OUT && tar czf s161.tgz s161 && rm -rf s161
date -u
