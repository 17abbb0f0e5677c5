#!/bin/sh
# near the budget: 320 KiB tokens at 100G with packing off; 95G and 43G daemons
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
git log --oneline 2>/dev/null | head -1
B=$PWD/build-gpu
O=$OUT/s105; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{}); fr=r.get("free_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s waits %s alloc mean %s p99 %s max>1st %s us; free mean %s p99 %s max %s us; total %.2f s %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), f(fr.get("mean")), f(fr.get("p99")), f(fr.get("max")), r.get("total_s") or 0, r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout ${TMO:-60} $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$?"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
MOONBRIGHT_NEAR_BUDGET_PCT=0 TMO=120 rp tok320-off $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies realloc,grow_async
kill $DP; wait $DP
for bud in 95G 43G; do
  RT=$(mktemp -d)
  $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $bud >$O/daemon-$bud.log 2>&1 & DP=$!
  i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  export MOONBRIGHT_RUNTIME_DIR=$RT
  if [ $bud = 95G ]; then
    TMO=150 rp near95 $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies realloc,grow,grow_async
  else
    TMO=120 rp near43 $C --strategies realloc,grow,grow_async,vspace
  fi
  kill $DP; wait $DP
done
grep -i "error\|warn" $O/daemon*.log | head -3
cd $OUT && tar czf s105.tgz s105 && rm -rf s105
date -u
