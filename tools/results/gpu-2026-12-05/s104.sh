#!/bin/sh
# the final code: ctest -L gpu; the conversation replay, every strategy; grow_async at lags 1 and 8 taking
# turns; 320 KiB tokens near the budget; pairs of 64 MiB and 1 GiB
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
git log --oneline 2>/dev/null | head -1
B=$PWD/build-gpu
O=$OUT/s104; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
grep -E "jobs queued|freed " $O/ctest.txt | head -4
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
rp warm $C --strategies realloc --requests 300
rp conv $C
for round in 1 2; do
  for lag in 1 8; do MOONBRIGHT_GROW_FREE_LAG=$lag rp lag$lag-$round $C --strategies grow_async; done
done
rp tok320 $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow,grow_async
MOONBRIGHT_GROW_FREE_LAG=1 rp tok320-lag1 $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow_async
timeout 60 $B/tools/mbbench latency --sizes 64M,1G --pairs 2000 2>&1 | tail -12
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s104.tgz s104 && rm -rf s104
date -u
