#!/bin/sh
# Where grow's time goes on a GPU: the conversation replay of grow alone with
# MOONBRIGHT_LOG=debug (the client's driver-work tallies at close, each caller wait over
# 1 ms with its parts; the daemon's slow grants), then the goal set: the conversation
# replay (realloc, grow, vspace, cudaMallocAsync), the 64 MiB and 1 GiB pairs,
# bench_vspace growth, GPT training through the hook (2 rounds), goals.py.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s183; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=$2 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
start $O/gdiag.dlog debug
MOONBRIGHT_LOG=debug timeout 60 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/gdiag.json 2>$O/gdiag.err; echo "gdiag rc=$?"
kill $DP; wait $DP
python3 tools/results/gpu-2026-12-06h/waits.py $O/gdiag.err $O/gdiag.json
start $O/conv.dlog info
timeout 150 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err; echo "train rc=$?"
kill $DP; wait $DP
python3 tools/results/gpu-2026-12-06h/waits.py - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/train.json $O/bench_vspace.txt
cd $OUT && tar czf s183.tgz s183 && rm -rf s183
date -u
