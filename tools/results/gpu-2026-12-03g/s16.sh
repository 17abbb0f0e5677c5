#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
rm -rf /tmp/G && mkdir /tmp/G && tar cf - --exclude=./build-gpu --exclude=./.gpudeps --exclude=./.git . | tar xf - -C /tmp/G && (cd /tmp/G && patch -s -p1 < .gpu/diag.patch) || echo PATCH FAILED
cmake -S /tmp/G -B /tmp/G/b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/G/b -j16 --target mbbench moonbrightd 2>&1 | grep -E "error|warning: "
B=/tmp/G/b
for q in "--quiet" "--quiet"; do
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "== q=$q"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 stdbuf -oL $B/tools/mbbench threads --threads 1 --rounds 0 --no-cuda --pairs 100000 $q 2>&1 | grep -v "^$" | grep -v "^|" | tail -6
kill $DP; wait $DP
done
echo "== release build, --quiet"
RT=$(mktemp -d); B=$PWD/build-gpu
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 stdbuf -oL $B/tools/mbbench threads --threads 1 --rounds 0 --no-cuda --pairs 100000 --quiet 2>&1 | grep -v "^$" | grep -v "^|" | tail -6
kill $DP; wait $DP
