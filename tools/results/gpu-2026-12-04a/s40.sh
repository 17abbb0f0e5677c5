#!/bin/sh
# mbbench threads 1,16 with 9 repeats, twice
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for r in 1 2; do
MOONBRIGHT_RUNTIME_DIR=$RT timeout 170 $B/tools/mbbench threads --threads 1,16 --repeat 9 --json > $OUT/threads$r.json 2>/tmp/th.err; echo "threads rc=$?"
python3 - $OUT/threads$r.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
v={(r['threads'],r['calls']):r['pairs_per_s']/1e6 for r in d['rows']}
for c in sorted({k[1] for k in v}):
    print(c, "1: %.2f 16: %.2f ratio %.1fx"%(v[(1,c)],v[(16,c)],v[(16,c)]/v[(1,c)]))
print(d['stream_destruction'])
PY
date -u
done
kill $DP; wait $DP
