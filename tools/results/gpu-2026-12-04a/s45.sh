#!/bin/sh
# page pools wait for the extent in flight: full replay
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
git log --oneline | head -1; git status --short | head -5
date -u
O=$OUT
OUT=/tmp/gb TRACE=.gpu/azure_llm_conv_2023.csv STEPS=replay STEP_BUDGET=200 timeout 230 sh tools/gpu_bench.sh $B 2>&1 | tail -12; cp /tmp/gb/replay.json $O/full-replay.json
python3 - $O/full-replay.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(r.get("strategy"), "r/l=%.3f"%r.get("reserved_over_live",0), "waits",r.get("driver_waits"), "creates",r.get("daemon_grant_creates"), "frames",r.get("peak_daemon_frames"), "mean",a.get("mean"), "p99",a.get("p99"),"max",a.get("max"), "at_peak", r.get("at_peak"))
PY
date -u
