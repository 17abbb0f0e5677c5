#!/bin/sh
# Not run: from 21:29 to 22:45 UTC no machine could be started (ten tries, the later ones
# with shorter cuts of this script: the new code alone, grow alone); the device time
# available went to the tries.
# Free frames that hold descriptors granted first, returned frames exported again ahead of
# grants within 1 792 free descriptors, against the code before it (a3c4087,
# .gpu/old.tgz): grow alone on a fresh daemon, old and new in turn, on the conversation
# trace and with 1-token blocks (2 rounds each); then, new code: the goal set but training
# (conversation replay, the pairs, bench_vspace growth, goals.py) and 1-token blocks for
# every strategy and cudaMallocAsync on one daemon.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s187; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
mkdir -p /tmp/old && tar xzf .gpu/old.tgz -C /tmp/old
cmake -S /tmp/old -B /tmp/old/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/old/b -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=$3 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$2 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
ab() {   # ab LABEL ROUNDS [mbbench args]: grow alone, old then new, fresh daemons
  L=$1; N=$2; shift 2
  for r in $(seq $N); do for v in old new; do
    BB=$B; [ $v = old ] && BB=/tmp/old/b
    start $BB $O/$L-$v$r.dlog info
    timeout 60 $BB/tools/mbbench replay $C --json --quiet --strategies grow "$@" > $O/$L-$v$r.json 2>$O/$L-$v$r.err
    echo "$L-$v$r rc=$?"; kill $DP; wait $DP
    python3 $W - $O/$L-$v$r.json | sed "s/^/$L-$v$r /"
  done; done
}
ab conv 2
ab blk1 2 --block-tokens 1
start $B $O/conv.dlog info
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
start $B $O/blk1all.dlog info
timeout 120 $B/tools/mbbench replay $C --block-tokens 1 --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/blk1all.json 2>$O/blk1all.err; echo "blk1all rc=$?"
kill $DP; wait $DP
python3 $W - $O/blk1all.json
cd $OUT && tar czf s187.tgz s187 && rm -rf s187
date -u
