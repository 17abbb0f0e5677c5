#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake --build $B -j16 2>&1 | grep -E "error|warning: "
for cfg in "--threads 1 --rounds 0 --no-cuda" "--threads 16 --rounds 0 --no-cuda" "--threads 16 --rounds 0" "--threads 16 --rounds 3 --no-cuda"; do
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "== $cfg"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench threads $cfg --pairs 100000 --quiet 2>&1 | grep -E "mbclient|^\| [0-9]|stream destr"
kill $DP; wait $DP
done
