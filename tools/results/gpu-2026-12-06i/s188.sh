#!/bin/sh
# Not run: from 21:29 to 22:45 UTC no machine could be started (ten tries), and the
# session's device time went to the tries.
# s187.sh cut to the device time left: free frames that hold descriptors granted first,
# returned frames exported again ahead of grants within 1 792 free descriptors,
# against a3c4087 (.gpu/old.tgz): grow alone on a fresh daemon, old and new in turn, on
# the conversation trace (2 rounds) and with 1-token blocks (1 round); then the new code's
# conversation replay of every strategy and cudaMallocAsync, and goals.py on it.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s188; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
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
ab blk1 1 --block-tokens 1
start $B $O/conv.dlog info
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json
cd $OUT && tar czf s188.tgz s188 && rm -rf s188
date -u
