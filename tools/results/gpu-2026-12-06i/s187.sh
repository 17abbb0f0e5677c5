#!/bin/sh
# Ran on an H100 80GB HBM3 at 01:49 UTC on 2026-12-07 (s187.tgz) and again at 01:53 on the
# same machine (s187-again.tgz); outputs.txt has what each printed. No machine could be
# started from 00:13 to 01:48 UTC, nor from 21:29 to 22:45 UTC the day before (an earlier
# form of this script).
# Each order's share of the descriptors, given up where fresh frames take their room
# (ed2f66c), against the code before it (0f60d61, .gpu/mid.tgz; it grants free frames
# that hold descriptors first): grow alone on a fresh daemon, each build in turn,
# on the conversation trace and with 1-token blocks; then, the working tree: the goal set
# but training (conversation replay, the pairs, bench_vspace growth, goals.py).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s187; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
for v in mid; do
  mkdir -p /tmp/$v && tar xzf .gpu/$v.tgz -C /tmp/$v
  cmake -S /tmp/$v -B /tmp/$v/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/$v/b -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
done
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=$3 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$2 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
ab() {   # ab LABEL ROUNDS [mbbench args]: grow alone, each build in turn, fresh daemons
  L=$1; N=$2; shift 2
  for r in $(seq $N); do for v in mid new; do
    BB=$B; [ $v != new ] && BB=/tmp/$v/b
    start $BB $O/$L-$v$r.dlog info
    timeout 60 $BB/tools/mbbench replay $C --json --quiet --strategies grow "$@" > $O/$L-$v$r.json 2>$O/$L-$v$r.err
    echo "$L-$v$r rc=$?"; kill $DP; wait $DP
    python3 $W - $O/$L-$v$r.json | sed "s/^/$L-$v$r /"
  done; done
}
ab blk1 1 --block-tokens 1
# (ab conv 1: left out, to fit the device time left)
start $B $O/conv.dlog info
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
cd $OUT && tar czf s187.tgz s187 && rm -rf s187
date -u
