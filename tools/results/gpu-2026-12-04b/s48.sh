#!/bin/sh
# ctest -L gpu; a long-context JSON-lines trace, every strategy; the conversation trace at other KV shapes
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
git log --oneline | head -1; git status --short | head -5
(cd $B && timeout 200 ctest -L gpu 2>&1 | tail -12)
date -u
O=$OUT
python3 - > /tmp/long.jsonl <<'PY'
import random
random.seed(7)
t = 0
for i in range(600):
    t += random.randint(100, 500)
    print('{"timestamp": %d, "input_length": %d, "output_length": %d}' % (t, random.randint(4000, 10000), random.randint(30, 600)))
PY
cp /tmp/long.jsonl $O/long.jsonl
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(" ", r.get("strategy"), "ok",r.get("ok"), "note",r.get("note"), "r/l=%.3f"%r.get("reserved_over_live",0), "live GiB %.1f"%(r.get("peak_live_bytes",0)/2**30), "waits",r.get("driver_waits"), "frames",r.get("peak_daemon_frames"), "mean",a.get("mean"), "p99",a.get("p99"),"max",a.get("max"))
PY
}
OUT=/tmp/gl BUDGET=120G TRACE=/tmp/long.jsonl STEPS=replay STEP_BUDGET=200 REPLAY_ARGS="--requests 0 --token-bytes 32K" timeout 230 sh tools/gpu_bench.sh $B 2>&1 | tail -3; cp /tmp/gl/replay.json $O/long-replay.json; tail -3 /tmp/gl/replay.log
summ $O/long-replay.json
date -u
OUT=/tmp/gk TRACE=.gpu/azure_llm_conv_2023.csv STEPS=replay STEP_BUDGET=200 REPLAY_ARGS="--token-bytes 64K --block-tokens 32" timeout 230 sh tools/gpu_bench.sh $B 2>&1 | tail -3; cp /tmp/gk/replay.json $O/conv-64k-b32.json; tail -3 /tmp/gk/replay.log
summ $O/conv-64k-b32.json
date -u
