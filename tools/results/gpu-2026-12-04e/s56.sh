#!/bin/sh
# holes filled again: ctest -L gpu; mbbench trims (two patterns); the replay's realloc beside cudaMallocAsync; threads
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*")
date -u
O=$OUT
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 150 $B/tools/mbbench trims --quiet --json > $O/trims.json 2>/tmp/t1; echo "trims rc=$?"; tail -2 /tmp/t1
timeout 150 $B/tools/mbbench trims --quiet --keep-cycles 1000 --json > $O/trims-long.json 2>/tmp/t2; echo "trims long rc=$?"; tail -2 /tmp/t2
python3 - $O/trims.json $O/trims-long.json <<'PY'
import json,sys
for f in sys.argv[1:]:
    d=json.load(open(f))
    for r in d["rows"]:
        a=r["alloc_ns"]
        print(f.split('/')[-1], r["heap"], "ok", r["ok"], "peak GiB %.2f"%(r["peak_granted_bytes"]/2**30), "held/live %.3f"%r["held_over_live_end"], "VA GiB %.1f"%(r["address_space_growth_bytes"]/2**30), "ext", r["heap_extends"], "fills", r["heap_fills"], "unmaps", r["unmaps"], "mean us %.1f p99 %.1f max %.1f"%(a["mean"]/1e3, a["p99"]/1e3, a["max"]/1e3))
PY
timeout 100 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies realloc,cudaMallocAsync --json --quiet > $O/conv.json 2>/tmp/e1; echo "conv rc=$?"
python3 - $O/conv.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(" ", r.get("strategy"), "ok",r.get("ok"), "r/l=%.3f"%r.get("reserved_over_live",0), "mean",a.get("mean"), "p99",a.get("p99"),"max",a.get("max"), "heap", r.get("heap"))
PY
timeout 40 $B/tools/mbbench threads --threads 1,16 --pairs 20000 --repeat 3 2>&1 | tail -9
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -5
date -u
