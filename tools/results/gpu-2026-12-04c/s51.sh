#!/bin/sh
# bench_torch generate in 3 rounds (4 configs); training with heap classes / extension off; threads 1-64
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
git log --oneline | head -1
O=$OUT
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
if [ "${PART:-1}" = 1 ]; then
MOONBRIGHT_RUNTIME_DIR=$RT timeout 260 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 60 --configs torch-default,torch-expandable,torch-cudaMallocAsync,torch-moonbright generate --rounds 3 > $O/generate-rounds.json 2>/tmp/ge.err
echo "generate rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: generate" /tmp/ge.err | tail -24; grep -i "error\|Traceback\|warn" /tmp/ge.err | head -8
date -u
else
for v in HEAP_CLASSES HEAP_EXTEND; do
env MOONBRIGHT_$v=0 MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 50 --configs torch-default,torch-moonbright train --rounds 2 --steps 200 > $O/train-$v-off.json 2>/tmp/tv.err
echo "train $v=0 rc=$?"; grep -A4 "^over" /tmp/tv.err; grep -i "error\|Traceback" /tmp/tv.err | head -3
done
date -u
MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench threads --threads 1,2,4,8,16,32,64 --pairs 50000 --repeat 3 --json > $O/threads.json 2>/tmp/th.err; echo "threads rc=$?"; grep -i "error\|warn" /tmp/th.err | head -5
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
timeout 60 python3 .gpu/cap.py generate $O/generate-lifetimes.log 2>&1 | tail -2
timeout 40 python3 .gpu/cap.py train $O/train-lifetimes.log 2>&1 | tail -2
fi
kill $DP; wait $DP
date -u
