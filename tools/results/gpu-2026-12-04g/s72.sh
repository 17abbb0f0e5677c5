#!/bin/sh
# grow tails bounded by growth steps; other KV shapes and traces against cudaMallocAsync; a CNN through the hook
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*")
date -u
O=$OUT
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("  requests", d.get("requests"), "format", d.get("format"))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s frames %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 150 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? ($*)"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp conv $C
rp grow1 $C --strategies grow
rp grow2 $C --strategies grow
rp tok16-b1 $C --token-bytes 16K --block-tokens 1 --requests 2000
rp tok48-b7 $C --token-bytes 48K --block-tokens 7 --requests 2000
rp tok320-b32 $C --token-bytes 320K --block-tokens 32 --requests 1200
rp conv-c32 $C --compression 32 --requests 600
rp burst .gpu/burst.csv --requests 0
rp mooncake .gpu/moon.jsonl --requests 0 --token-bytes 32K
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
date -u
