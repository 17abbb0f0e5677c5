#!/bin/sh
# the device full below the budget: conv replay, every strategy, budget above the device's memory (H100: 100G; H200: 200G);
# short: the descriptor table grown ahead (grow on fresh daemons, 2 rounds each way), then the device full below the budget; on an H200 also the exact plans near the budget (t320, 100G), cf19b13 (.gpu/basesrc) and new in turn, 2 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s112; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
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
if [ "$MEM" -gt 120000 ]; then
BASE=$PWD/build-base
cmake -S .gpu/basesrc -B $BASE -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BASE -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
for r in 1 2; do for v in new base; do
  D=$NEW; [ $v = base ] && D=$BASE
  start $D $O/t320$v$r.dlog 100G
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $D/tools/mbbench replay $C --json --quiet --token-bytes 320K --block-tokens 32 --requests 1200 --strategies realloc,grow --slow-us 30000 > $O/t320$v$r.json 2>$O/t320$v$r.err
  echo "t320 $v $r rc=$? grants of >100 frames: $(grep -cE 'in [0-9]{3,} frames' $O/t320$v$r.dlog)"; summ $O/t320$v$r.json; grep "mbbench replay:" $O/t320$v$r.err | head -3
  kill $DP; wait $DP
done; done
fi
cd $OUT && tar czf s115.tgz s112 && rm -rf s112
date -u
