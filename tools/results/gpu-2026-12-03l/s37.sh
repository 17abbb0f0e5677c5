#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*" | tail -5)
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_LOG=info MOONBRIGHT_RUNTIME_DIR=$RT timeout 30 python3 .gpu/p34.py $B/client/libmbclient.so 2>&1 | grep -v "^$" | tail -8
kill $DP; wait $DP
date -u
