#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
rm -rf /tmp/H && mkdir /tmp/H && tar cf - --exclude=./build-gpu --exclude=./.gpudeps --exclude=./.git . | tar xf - -C /tmp/H
cmake -S /tmp/H -B /tmp/H/b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build /tmp/H/b -j16 --target mbbench moonbrightd 2>&1 | grep -E "error|warning: "
grep -E "CMAKE_C_FLAGS:|CMAKE_BUILD_TYPE:|MB_" build-gpu/CMakeCache.txt /tmp/H/b/CMakeCache.txt | grep -v "^.*//" | head -20
for B in /tmp/H/b $PWD/build-gpu /tmp/H/b $PWD/build-gpu; do
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "== $B"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench threads --threads 1 --rounds 0 --no-cuda --pairs 100000 --quiet 2>&1 | grep -E "mbclient|stream destr"
kill $DP; wait $DP
done
