#!/bin/sh
# tails refilled per background pass: at most 16, at most 48, no limit (XP_PER_PASS, a scratch build's knob): grow alone, three runs each, in turn
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
(cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j8 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: ") &
wait
date -u
O=$OUT
run() { # name, env
  n=$1; shift; X=$B
  RT=$(mktemp -d)
  $X/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon-$n.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  env "$@" MOONBRIGHT_LOG=info MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $X/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow --json --quiet > $O/$n.json 2>$O/$n.err
  echo "== $n rc=$?"
  python3 - $O/$n.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{}); p=r.get("at_peak",{})
    print(" ", r.get("strategy"), "ok",r.get("ok"), "r/l=%.3f"%r.get("reserved_over_live",0), "frames",r.get("peak_daemon_frames"), "mean %.1f"%(a.get("mean",0)/1e3), "p99 %.0f"%(a.get("p99",0)/1e3),"max %.2f ms"%(a.get("max",0)/1e6), "waits", r.get("driver_waits"), "busy %.2f/%.2f"%(r.get("background_busy_s",0), r.get("total_s",0)), "idle %.2f ahead %.2f cached %.2f GB"%(p.get("idle",0)/1e9,p.get("grow_ahead",0)/1e9,p.get("cached",0)/1e9), "creates", r.get("daemon_grant_creates"))
PY
  grep -E "caller|tails mapped|idle ranges unm|tails cut" $O/$n.err | sed 's/mbclient: growable ranges, /   /'
  kill $DP; wait $DP
  grep -il "error\|warn" $O/daemon-$n.log
}
for k in 1 2 3; do
run p16_$k XP_PER_PASS=16
run p48_$k XP_PER_PASS=48
run all_$k XP_N=1
done
rm -f $O/*.err $O/daemon-*.log
date -u
