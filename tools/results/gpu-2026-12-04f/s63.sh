#!/bin/sh
# the final code: PyTorch through the hook in rounds (generation, training); threads
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake --build $B -j16 2>&1 | grep -E "error|warning: "
O=$OUT
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 280 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright generate --rounds 3 > $O/generate.json 2>/tmp/ge.err
echo "generate rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: generate" /tmp/ge.err | tail -8; grep -i "error\|Traceback" /tmp/ge.err | head -3
timeout 200 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>/tmp/tr.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" /tmp/tr.err | tail -8; grep -i "error\|Traceback" /tmp/tr.err | head -3
timeout 40 $B/tools/mbbench threads --threads 1,16 --pairs 20000 --json > $O/threads.json 2>/tmp/th.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
kill $DP; wait $DP
date -u
