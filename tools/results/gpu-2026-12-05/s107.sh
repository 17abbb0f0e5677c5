#!/bin/sh
# two tenants at once under one budget (BUD, default 85G; the second SB, default realloc): before (5931f78) and after, in turn, 3 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s107; mkdir -p $O
NEW=$PWD/build-gpu; OLD=$PWD/build-old
cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
cmake -S .gpu/oldsrc -B $OLD -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $OLD -j16 --target moonbrightd mbbench mbctl 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
for r in 1 2 3; do for v in new old; do
  B=$NEW; [ $v = old ] && B=$OLD
  RT=$(mktemp -d)
  $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${BUD:-85G} >$O/$v$r.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 40 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/$v$r-a.json 2>$O/$v$r-a.err & A=$!
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 40 $B/tools/mbbench replay $C --json --quiet --strategies ${SB:-realloc} > $O/$v$r-b.json 2>$O/$v$r-b.err & BP=$!
  wait $A; wait $BP
  $B/tools/mbctl --runtime-dir $RT metrics --json > $O/$v$r-metrics.json 2>&1
  kill $DP; wait $DP
  python3 - $O/$v$r-a.json $O/$v$r-b.json $O/$v$r-metrics.json <<'PY'
import json,sys
out=[]
for f in sys.argv[1:3]:
    try:
        for r in json.load(open(f))["strategies"]:
            out.append("%s ok=%s r/l %.3f max %.1f ms %s" % (r["strategy"], r["ok"], r.get("reserved_over_live",0), (r.get("alloc_max_after_first_ns") or 0)/1e6, r.get("note","")[:40]))
    except Exception as e: out.append("%s: %s" % (f, e))
try:
    m=json.load(open(sys.argv[3])); out.append("notices %s short %s timeouts %s ignored %s" % (m["reclaim_notices"], m.get("reclaim_short","-"), m["reclaim_timeouts"], m["reclaim_ignored"]))
except Exception as e: out.append("metrics: %s" % e)
print(" | ".join(out))
PY
done; done 2>&1 | sed "s/^/  /"
cd $OUT && tar czf s107.tgz s107 && rm -rf s107
date -u
