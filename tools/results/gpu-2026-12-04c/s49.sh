#!/bin/sh
# ctest -L gpu; full conversation replay (all strategies + cudaMallocAsync); AlexNet loop 50 iterations; 64M/1G pairs
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
git log --oneline | head -1; git status --short | head -5
(cd $B && timeout 150 ctest -L gpu 2>&1 | tail -12)
date -u
O=$OUT
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(" ", r.get("strategy"), "ok",r.get("ok"), "note",r.get("note"), "r/l=%.3f"%r.get("reserved_over_live",0), "live GiB %.2f"%(r.get("peak_live_bytes",0)/2**30), "waits",r.get("driver_waits"), "frames",r.get("peak_daemon_frames"), "mean",a.get("mean"), "p99",a.get("p99"),"max",a.get("max"), "heap", r.get("heap"))
PY
}
OUT=/tmp/gr TRACE=.gpu/azure_llm_conv_2023.csv STEPS="replay latency" LAT_SIZES=64M,1G STEP_BUDGET=250 timeout 280 sh tools/gpu_bench.sh $B 2>&1 | tail -12; cp /tmp/gr/replay.json $O/conv-replay.json; cp /tmp/gr/latency.json $O/latency.json; tail -3 /tmp/gr/replay.log
summ $O/conv-replay.json
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for it in 2 50; do
MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench replay tests/data/alexnet_train_lifetimes.log --iterations $it --strategies realloc,cudaMallocAsync --json --quiet > $O/alexnet-$it.json 2>/tmp/ax.err; echo "alexnet $it rc=$?"; tail -3 /tmp/ax.err
summ $O/alexnet-$it.json
done
kill $DP; wait $DP
date -u
