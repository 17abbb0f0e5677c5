#!/bin/sh
# the device full below the budget: conv replay, every strategy, budget above the device's memory (H100: 100G; H200: 200G);
# short: the descriptor table grown ahead (grow on fresh daemons, 2 rounds each way), then the device full below the budget; on an H200 also the exact plans near the budget (t320, 100G), cf19b13 (.gpu/basesrc) and new in turn, 2 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s112; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
$NEW/tools/mbbench fdtable --rounds 3 2>&1 | tee $O/fdtable.txt
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); echo "device memory $MEM MiB"
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s waits %s path-creates %s/%s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), r.get("daemon_grant_creates"), r.get("daemon_requests"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:90]))
PY
}
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=1000 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $3 >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
# the descriptor table grown at start-up: grow on a fresh daemon, off (MOONBRIGHTD_FD_TABLE_AHEAD=0) and on in turn, 3 rounds
for r in 1 2; do for v in off on; do
  if [ $v = off ]; then export MOONBRIGHTD_FD_TABLE_AHEAD=0; else unset MOONBRIGHTD_FD_TABLE_AHEAD; fi
  start $NEW $O/fd$v$r.dlog 100G
  echo "fd $v $r daemon FDSize $(grep FDSize /proc/$DP/status)"
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 40 $NEW/tools/mbbench replay $C --json --quiet --strategies grow > $O/fd$v$r.json 2>$O/fd$v$r.err
  echo "fd $v $r rc=$? slow grants with a frame made on the path: $(grep -c 'created on the path' $O/fd$v$r.dlog) (export > 1 ms: $(grep -o 'export [0-9.]*' $O/fd$v$r.dlog | awk '$2 > 1' | wc -l); slowest: $(grep -o 'export [0-9.]*' $O/fd$v$r.dlog | sort -k2 -rn | head -3 | tr '\n' ' '))"; summ $O/fd$v$r.json
  kill $DP; wait $DP
done; done
unset MOONBRIGHTD_FD_TABLE_AHEAD
BIG=100G; [ "$MEM" -gt 120000 ] && BIG=200G
start $NEW $O/full.dlog $BIG
MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $NEW/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace > $O/full.json 2>$O/full.err; echo "conv under $BIG rc=$?"; summ $O/full.json
echo "device full below the budget: $(grep -c 'device is full below' $O/full.dlog) notices; reserve failures said: $(grep -c 'warm reserve' $O/full.dlog); $(grep -c 'out of memory' $O/full.err) client errors"
kill $DP; wait $DP
cd $OUT && tar czf s112.tgz s112 && rm -rf s112
date -u
