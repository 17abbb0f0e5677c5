#!/bin/sh
# grow alone: the tail's target (AHEAD_SHIFT, TAIL_MIN, TAIL_STEPS) from the environment, a scratch
# build (.gpu/scr, s131-tail.patch, not kept), five settings, 2 rounds in turn, fresh daemon each
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s131; mkdir -p $O
B=$PWD/build-scr
cmake -S .gpu/scr -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbclient mbbench 2>&1 | grep -E "error|warning: "
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{}); p=r.get("at_peak",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  r/l %.3f frames %s waits %s reqs %s mean %s p99 %s max>1st %s us; at the peak ahead %.2f idle %.2f cached %.2f GiB" % (r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), r.get("daemon_requests"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), p.get("grow_ahead",0)/2**30, p.get("idle",0)/2**30, p.get("cached",0)/2**30))
PY
}
C=.gpu/azure_llm_conv_2023.csv
for r in 1 2; do for v in "base X=1" "A SCR_STEPS=2" "B SCR_STEPS=2 SCR_MIN=4 SCR_SHIFT=7" "C SCR_SHIFT=30" "D SCR_STEPS=1 SCR_MIN=2 SCR_SHIFT=8"; do
  set -- $v; n=$1; shift
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$n-$r.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  env "$@" MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/$n-$r.json 2>$O/$n-$r.err
  echo "$n ($*) round $r rc=$?"; summ $O/$n-$r.json
  kill $DP; wait $DP
done; done
cd $OUT && tar czf s131.tgz s131 && rm -rf s131
date -u
