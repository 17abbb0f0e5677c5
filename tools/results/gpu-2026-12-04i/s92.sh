#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
O=$OUT/s92; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
C=.gpu/azure_llm_conv_2023.csv
MOONBRIGHT_LOG=debug timeout 150 $B/tools/mbbench replay $C --json --quiet --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow_async > $O/t.json 2>$O/t.err; echo rc=$?
grep -v "waited" $O/t.err | tail -30 | cut -c1-300
kill $DP; wait $DP
cd $OUT && tar czf s92.tgz s92 && rm -rf s92
