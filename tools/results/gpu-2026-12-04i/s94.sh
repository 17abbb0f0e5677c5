#!/bin/sh
# scratch A/B: grow_async's queued maps with the tail ahead (as committed) or what is missing only (MB_X_NOTAIL=1)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
O=$OUT/s94; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{}); ap=r.get("at_peak",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-12s ok %-5s r/l %.3f waits %s queued %s frames %s mean %s p99 %s max>1st %s us ahead %.1f idle %.1f GiB %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("driver_waits"), r.get("grow_queued"), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), ap.get("grow_ahead",0)/2**30, ap.get("idle",0)/2**30, r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 150 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$?"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp warm $C --strategies realloc --requests 300
for k in 1 2; do
  rp tail$k $C --strategies grow_async
  MB_X_NOTAIL=1 rp notail$k $C --strategies grow_async
done
rp tok320-tail $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow_async
MB_X_NOTAIL=1 rp tok320-notail $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow_async
kill $DP; wait $DP
cd $OUT && tar czf s94.tgz s94 && rm -rf s94
