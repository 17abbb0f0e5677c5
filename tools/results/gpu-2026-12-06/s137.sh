#!/bin/sh
# bench_vspace's parts (df5c256) on whichever card comes, in as little device time as will do:
# build the daemon and bench_vspace only, then 'bench_vspace growth' against a cuda daemon, its
# table read by tools/goals.py, and an unknown part refused
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s137; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd bench_vspace 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!
i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
t0=$(date +%s)
MOONBRIGHT_RUNTIME_DIR=$RT timeout 90 $B/tools/bench_vspace growth > $O/vspace.txt 2>$O/vspace.err
echo "bench_vspace growth rc=$? in $(( $(date +%s) - t0 )) s"
cat $O/vspace.txt
python3 tools/goals.py $O/vspace.txt
MOONBRIGHT_RUNTIME_DIR=$RT $B/tools/bench_vspace growth bogus > /dev/null 2>$O/usage.err; echo "bench_vspace growth bogus rc=$? $(cat $O/usage.err)"
kill $DP; wait $DP
cd $OUT && tar czf s137.tgz s137 && rm -rf s137
date -u
