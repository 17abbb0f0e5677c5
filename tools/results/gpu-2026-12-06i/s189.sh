#!/bin/sh
# Not run: from 21:29 to 22:45 UTC no machine could be started (ten tries), and the
# session's device time went to the tries.
# s188.sh cut again to the device time left: the committed code only, grow alone on a
# fresh daemon, the conversation trace and 1-token blocks: re-exports on grant paths and
# the daemon's descriptors at the peak on a GPU.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s189; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
for L in conv blk1; do
  A=; [ $L = blk1 ] && A="--block-tokens 1"
  start $O/$L.dlog
  timeout 60 $B/tools/mbbench replay $C --json --quiet --strategies grow $A > $O/$L.json 2>$O/$L.err; echo "$L rc=$?"
  kill $DP; wait $DP
  python3 $W - $O/$L.json | sed "s/^/$L /"
done
cd $OUT && tar czf s189.tgz s189 && rm -rf s189
date -u
