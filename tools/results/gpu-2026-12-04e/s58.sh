#!/bin/sh
# fills with the plan's frames (warm grants): mbbench trims, both patterns; ctest -L gpu
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*")
O=$OUT
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level info >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
for r in 1 2; do
timeout 150 $B/tools/mbbench trims --quiet > $O/trims-$r.txt 2>&1; echo "trims $r rc=$?"; tail -6 $O/trims-$r.txt
timeout 150 $B/tools/mbbench trims --quiet --keep-cycles 1000 > $O/trims-long-$r.txt 2>&1; echo "trims long $r rc=$?"; tail -6 $O/trims-long-$r.txt
done
kill $DP; wait $DP
grep -c "took" $O/daemon.log; grep -i "error\|warn" $O/daemon.log | head -3
date -u
