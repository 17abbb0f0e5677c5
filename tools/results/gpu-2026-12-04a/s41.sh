#!/bin/sh
# one-thread figure: c2052b9 (old) against HEAD (new), alternating, threads 1,16
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
OB=$PWD/.gpu/old/build-gpu
(cd .gpu/old && cmake -S . -B $OB -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $OB -j16 2>&1 | grep -E " error")
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for r in 1 2; do for v in old new; do
  [ $v = old ] && M=$OB/tools/mbbench || M=$B/tools/mbbench
  [ $v = old ] && export LD_LIBRARY_PATH=$OB/client:$LD_LIBRARY_PATH
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $M threads --threads 1,16 --pairs 50000 --repeat 7 --rounds 0 --json > /tmp/t.json 2>/dev/null; echo "$v $r rc=$?"
  cp /tmp/t.json $OUT/ab-$v-$r.json
  python3 - /tmp/t.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
v={(r['threads'],r['calls']):r['pairs_per_s']/1e6 for r in d['rows']}
for c in sorted({k[1] for k in v}):
    print("  ", c, "1: %.2f 16: %.2f ratio %.1fx"%(v[(1,c)],v[(16,c)],v[(16,c)]/v[(1,c)]))
PY
done; done
kill $DP; wait $DP
date -u
