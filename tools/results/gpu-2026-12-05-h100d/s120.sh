#!/bin/sh
# the reserve workers export returned frames again: grow base (57458a6) vs new, 1 round; the conversation replay, every strategy; ctest -L gpu
# then the conversation replay, every strategy, this commit; then ctest -L gpu
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s120; mkdir -p $O
NEW=$PWD/build-gpu; BASE=$PWD/build-base
(cmake -S .gpu/basesrc -B $BASE -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BASE -j8 --target moonbrightd mbclient mbbench 2>&1 | grep -E "error|warning: ") &
cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
wait
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s fds %s waits %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("peak_daemon_descriptors"), r.get("driver_waits"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:90]))
PY
}
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=1000 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
for r in 1; do for v in base new; do
  B=$NEW; [ $v = base ] && B=$BASE
  start $B $O/g$v$r.dlog
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/g$v$r.json 2>$O/g$v$r.err
  echo "g $v $r rc=$?"; summ $O/g$v$r.json
  echo "  slow grants $(grep -c took $O/g$v$r.dlog); waits>1ms $(grep -c waited $O/g$v$r.err); >2ms $(grep -o 'waited [0-9.]*' $O/g$v$r.err | awk '$2>2' | wc -l); lock>1ms $(grep -o '[0-9.]* for the frame lock' $O/g$v$r.err | awk '$1>1' | wc -l); lock sum $(grep -o '[0-9.]* for the frame lock' $O/g$v$r.err | awk '{s+=$1} END {print s}') ms"
  grep -o "waited [0-9.]*.*" $O/g$v$r.err | sort -k2 -rn | head -3 | cut -c1-200
  kill $DP; wait $DP
done; done
start $NEW $O/all.dlog
MOONBRIGHT_RUNTIME_DIR=$RT timeout 300 $NEW/tools/mbbench replay $C --json --quiet > $O/all.json 2>$O/all.err
echo "all rc=$?"; summ $O/all.json
kill $DP; wait $DP
(cd $NEW && timeout 200 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; tail -4 $O/ctest.log)
cd $OUT && tar czf s120.tgz s120 && rm -rf s120
date -u
