#!/bin/sh
# A/B: shared legacy clock (A, HEAD) against epochs closed only when needed (D, working tree)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
date -u
rm -rf /tmp/A && mkdir /tmp/A && tar cf - --exclude=./build-gpu --exclude=./.gpudeps --exclude=./.git . | tar xf - -C /tmp/A && (cd /tmp/A && patch -s -R -p1 < .gpu/D.patch) || echo "PATCH FAILED"
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
cmake -S /tmp/A -B /tmp/A/b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/A/b -j16 2>&1 | grep -E "error|warning: "
grep -c "gen < cur" client/lclock.c /tmp/A/client/lclock.c
run() { RT=$(mktemp -d); $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
 echo "== $2"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $1/tools/mbbench threads --threads 1,4,16 $3 --pairs 300000 --quiet > $OUT/threads-$2.txt 2>&1; grep -E "^\| [0-9]|stream destr" $OUT/threads-$2.txt
 kill $DP; wait $DP; }
run /tmp/A/b A1 "--rounds 1 --no-cuda"
run $B D1 "--rounds 1 --no-cuda"
run /tmp/A/b A2 "--rounds 1 --no-cuda"
run $B D2 "--rounds 1 --no-cuda"
run $B D3 "--rounds 10"
run /tmp/A/b A3 "--rounds 10"
date -u
(cd $B && timeout 200 ctest -L gpu -R "streams|async|vspace|backend" 2>&1 | grep -E "tests passed|Failed|Passed" | tail -9)
date -u
