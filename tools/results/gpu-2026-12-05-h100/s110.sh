#!/bin/sh
# run after s108 (a call of its own): exact plans near the budget: realloc and grow at 320 KiB tokens under 100G, cf19b13 (.gpu/basesrc) and new in turn, 3 rounds;
# then grow_async's frees (waiting before, not now) beside cudaMallocAsync, both builds in turn, 3 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s109; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
[ -n "$CT" ] && (cd $NEW && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s waits %s path-creates %s/%s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), r.get("daemon_grant_creates"), r.get("daemon_requests"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:50]))
PY
}
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=1000 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
BASE=$PWD/build-base
cmake -S .gpu/basesrc -B $BASE -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BASE -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
for r in 1 2 3; do for v in new base; do
  D=$NEW; [ $v = base ] && D=$BASE
  start $D $O/ga$v$r.dlog
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $D/tools/mbbench replay $C --json --quiet --strategies grow_async,cudaMallocAsync > $O/ga$v$r.json 2>$O/ga$v$r.err
  echo "grow_async $v $r rc=$?"; summ $O/ga$v$r.json
  python3 -c "import json,sys; [print('   frees mean %.1f us p99 %.1f us max %.2f ms' % (r['free_ns']['mean']/1e3, r['free_ns']['p99']/1e3, r['free_ns']['max']/1e6)) for r in json.load(open(sys.argv[1]))['strategies'] if 'free_ns' in r]" $O/ga$v$r.json
  kill $DP; wait $DP
done; done
cd $OUT && tar czf s109.tgz s109 && rm -rf s109
date -u
