#!/bin/sh
# grow alone, --slow-us 2000: the code against a build whose mb_grow past the tail maps only what is missing (.gpu/B), in turn x2
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
BB=$PWD/.gpu/B/build-gpu
(cd .gpu/B && cmake -S . -B $BB -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BB -j16 2>&1 | grep -E " error")
for r in 1 2; do for v in head missing; do
  [ $v = head ] && X=$B || X=$BB
  RT=$(mktemp -d)
  $X/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $X/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow --json --quiet --slow-us 2000 > $OUT/grow-$v-$r.json 2>/tmp/slow-$v-$r.txt
  python3 - $OUT/grow-$v-$r.json $v <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r["alloc_ns"]; p=r.get("at_peak") or {}
    print(sys.argv[2], "r/l=%.3f"%r["reserved_over_live"], "frames",r.get("peak_daemon_frames"), "creates", r.get("daemon_grant_creates"), "waits", r.get("driver_waits"), "mean %.1f p99 %.0f max %.0f"%(a["mean"]/1e3,a["p99"]/1e3,a["max"]/1e3), "cached %.2f ahead %.2f idle %.2f"%(p.get("cached",0)/2**30,p.get("grow_ahead",0)/2**30,p.get("idle",0)/2**30))
PY
  echo "slow: $(grep -c took /tmp/slow-$v-$r.txt) (with round trips: $(grep took /tmp/slow-$v-$r.txt | grep -vc ' 0 daemon'))"; grep took /tmp/slow-$v-$r.txt | sort -t' ' -k9 -rn | head -3 | cut -c1-230
  cp /tmp/slow-$v-$r.txt $OUT/
  kill $DP; wait $DP
done; done
date -u
