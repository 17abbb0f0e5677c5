#!/bin/sh
# mbbench threads to 256 threads (the cap was 64); bench_vspace (map_async of 1024 pages)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench bench_vspace 2>&1 | grep -E "error|warning: "
O=$OUT/s76; mkdir -p $O
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 200 $B/tools/mbbench threads --threads 1,16,64,256 --pairs 5000 --repeat 3 --json > $O/threads.json 2>$O/threads.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
timeout 120 $B/tools/bench_vspace > $O/bench_vspace.txt 2>&1
echo "== bench_vspace rc=$?"; grep -E "^\| (64|2048) KiB \| 1024 \|" $O/bench_vspace.txt | head -4
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s76.tgz s76 && rm -rf s76
date -u
