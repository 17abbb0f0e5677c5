#!/bin/sh
# final code: bench_torch train and generate (short), mbbench threads 1,16
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
O=$OUT
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 50 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 25 --configs torch-default,torch-moonbright train --steps 40 > $O/train.json 2>/tmp/t.err; echo "train rc=$?"; grep -v "^bench_torch: train\|^bench_torch: torch" /tmp/t.err | tail -4; grep -i "Traceback\|Error" /tmp/t.err | head -3
timeout 50 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 25 --configs torch-default,torch-moonbright generate --steps 2 > $O/generate.json 2>/tmp/g.err; echo "generate rc=$?"; grep -v "^bench_torch: generate\|^bench_torch: torch" /tmp/g.err | tail -4; grep -i "Traceback\|Error" /tmp/g.err | head -3
timeout 40 $B/tools/mbbench threads --threads 1,16 --pairs 20000 --repeat 1 --json > $O/threads.json 2>/tmp/th.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
kill $DP; wait $DP
date -u
