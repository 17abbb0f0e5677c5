#!/bin/sh
# 1-token blocks on a GPU (--block-tokens 1: every request grows by 128 KiB each decode
# step): realloc, grow, vspace and cudaMallocAsync in one run on one daemon; then grow
# alone on a fresh daemon with MOONBRIGHT_LOG=debug (its waits over 1 and 2 ms, and the
# daemon's re-exports on grant paths, which on the host make its slowest waits).
# Not run: from 20:02 to 20:23 UTC no machine could be started (five tries).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
O=$OUT/s186; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=$2 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
start $O/all.dlog info
timeout 200 $B/tools/mbbench replay $C --block-tokens 1 --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/all.json 2>$O/all.err; echo "all rc=$?"
kill $DP; wait $DP
python3 tools/results/gpu-2026-12-06h/waits.py - $O/all.json
start $O/g.dlog debug
MOONBRIGHT_LOG=debug timeout 100 $B/tools/mbbench replay $C --block-tokens 1 --json --quiet --strategies grow > $O/g.json 2>$O/g.err; echo "g rc=$?"
kill $DP; wait $DP
python3 tools/results/gpu-2026-12-06h/waits.py $O/g.err $O/g.json | grep -E "^(waits|grow)"
cd $OUT && tar czf s186.tgz s186 && rm -rf s186
date -u
