#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
O=$OUT/s96; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
C=.gpu/azure_llm_conv_2023.csv
MOONBRIGHT_LOG=debug timeout 150 $B/tools/mbbench replay $C --json --quiet --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow,grow_async > $O/t.json 2>$O/t.err; echo rc=$?
grep -nE "trimmed|refused \(|stopped" $O/t.err | head -6 | cut -c1-420; echo ...; grep -nE "trimmed|refused \(|stopped" $O/t.err | tail -8 | cut -c1-420; grep -c "trimmed" $O/t.err
kill $DP; wait $DP
cd $OUT && tar czf s96.tgz s96 && rm -rf s96
