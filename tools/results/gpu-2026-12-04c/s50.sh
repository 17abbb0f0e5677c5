#!/bin/sh
# torch train in 7 alternating rounds; AlexNet loop 300 iterations
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
O=$OUT
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay tests/data/alexnet_train_lifetimes.log --iterations 300 --strategies realloc,cudaMallocAsync --json --quiet > $O/alexnet-300.json 2>/tmp/ax.err; echo "alexnet 300 rc=$?"; tail -3 /tmp/ax.err
python3 - $O/alexnet-300.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(" ", r.get("strategy"), "ok",r.get("ok"), "r/l=%.3f"%r.get("reserved_over_live",0), "waits",r.get("driver_waits"), "frames",r.get("peak_daemon_frames"), "mean",a.get("mean"), "p99",a.get("p99"),"max",a.get("max"), "heap", r.get("heap"))
PY
date -u
MOONBRIGHT_RUNTIME_DIR=$RT timeout 420 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 60 --configs torch-default,torch-moonbright train --rounds 7 --steps 200 > $O/train-rounds.json 2>/tmp/tr.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" /tmp/tr.err | tail -24; grep -i "error\|Traceback\|warn" /tmp/tr.err | head -5
kill $DP; wait $DP
date -u
