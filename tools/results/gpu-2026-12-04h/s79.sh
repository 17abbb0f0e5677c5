#!/bin/sh
# grow's caller path capped at 8 cached frames (77e6c60) against the code before it (the same tree with
# the change reversed), built side by side: grow alone x3 each, alternating; then ctest -L gpu, the
# conversation replay with every strategy, and the other shapes' grow and cudaMallocAsync
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
A=/tmp/a; rm -rf $A; mkdir -p $A; tar cf - --exclude=./build-gpu --exclude=./.gpudeps . | (cd $A && tar xf -)
(cd $A && patch -s -R -p1 < .gpu/cap.patch && cmake -S . -B $A/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $A/b -j16 2>&1 | grep -E "error|warning: ")
grep -c WAIT_CACHED_MAX client/grow.c $A/client/grow.c
(cd $B && timeout 120 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*")
O=$OUT/s79; mkdir -p $O
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s frames %s mean %s p99 %s max>1st %s us creates %s %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("daemon_grant_creates"), r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { bb=$1; n=$2; t=$3; shift 3; timeout 150 $bb/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? ($*)"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp $B warm $C --strategies realloc --requests 300
for k in 1 2 3; do
  MOONBRIGHT_LOG=info rp $B cap$k $C --strategies grow; grep "caller" $O/cap$k.err
  MOONBRIGHT_LOG=info rp $A/b before$k $C --strategies grow; grep "caller" $O/before$k.err
done
rp $B conv $C
rp $B tok320-b32 $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow,cudaMallocAsync
rp $B conv-c32 $C --compression 32 --requests 600 --strategies grow,cudaMallocAsync
rp $B burst .gpu/burst.csv --requests 0 --strategies grow,cudaMallocAsync
rp $B mooncake .gpu/moon.jsonl --requests 0 --token-bytes 32K --strategies grow,cudaMallocAsync
kill $DP; wait $DP
echo "daemon: grants over 2 ms by session (session count max_ms)"
grep "took" $O/daemon.log | awk '{for(i=1;i<=NF;i++){ if($i=="session") s=$(i+1); if($i=="took") t=$(i+1)}; if (t>2) {n[s]++; if(t>m[s]) m[s]=t}} END {for(k in n) print k, n[k], m[k]}' | sort -n
grep "took" $O/daemon.log | awk '{for(i=1;i<=NF;i++) if($i=="took") print $(i+1), $0}' | sort -n | tail -3 | cut -c1-330
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s79.tgz s79 && rm -rf s79
date -u
