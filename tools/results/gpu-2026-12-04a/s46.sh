#!/bin/sh
# grow alone: swap-out bounded by the grant's bytes (HEAD) against everything past the cache's size (.gpu/A), alternating x3
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
AB=$PWD/.gpu/A/build-gpu
(cd .gpu/A && cmake -S . -B $AB -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $AB -j16 2>&1 | grep -E " error")
for r in 1 2 3; do for v in head all; do
  [ $v = head ] && X=$B || X=$AB
  RT=$(mktemp -d)
  $X/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $X/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow --json --quiet > $OUT/grow-$v-$r.json 2>/dev/null
  python3 - $OUT/grow-$v-$r.json $v <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r["alloc_ns"]; p=r.get("at_peak") or {}
    print(sys.argv[2], "r/l=%.3f"%r["reserved_over_live"], "frames",r.get("peak_daemon_frames"), "creates", r.get("daemon_grant_creates"), "mean %.1f p99 %.0f max %.0f"%(a["mean"]/1e3,a["p99"]/1e3,a["max"]/1e3), "cached %.2f ahead %.2f idle %.2f"%(p.get("cached",0)/2**30,p.get("grow_ahead",0)/2**30,p.get("idle",0)/2**30))
PY
  kill $DP; wait $DP
done; done
date -u
