#!/bin/sh
# MOONBRIGHT_HEAP_CLOSE_FIT=1 (arena extension off with it) against the default heap and cudaMallocAsync
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench mbclient 2>&1 | grep -E "error|warning: "
O=$OUT/s78; mkdir -p $O
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s frames %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 120 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? ($*)"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
for w in conv burst mooncake; do
  case $w in conv) a="$C";; burst) a=".gpu/burst.csv --requests 0";; mooncake) a=".gpu/moon.jsonl --requests 0 --token-bytes 32K";; esac
  export MOONBRIGHT_HEAP_CLOSE_FIT=1; rp $w-closefit $a --strategies realloc,cudaMallocAsync; unset MOONBRIGHT_HEAP_CLOSE_FIT
  rp $w-default $a --strategies realloc
done
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s78.tgz s78 && rm -rf s78
date -u
