#!/bin/sh
# mbbench threads, 64 and 256 threads, 20 000 pairs a thread (s76 ran 5 000: too short a run to time)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
O=$OUT/s77; mkdir -p $O
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 200 $B/tools/mbbench threads --threads 1,16,64,256 --pairs 20000 --repeat 1 --json > $O/threads.json 2>$O/threads.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s77.tgz s77 && rm -rf s77
date -u
