#!/bin/bash
# Spares capped all orders together (at most a sixteenth of the bytes
# granted in all): GPT and CNN training through the hook, each on a fresh
# daemon, and the conversation replay. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s198; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
T="python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright"
start $O/train.dlog
timeout 170 $T train --rounds 2 > $O/train.json 2>$O/train.err; echo "train rc=$?"; grep -E "^[12] +torch" $O/train.err; python3 tools/goals.py $O/train.json 2>&1 | tail -3
$B/tools/mbctl status | grep -E "^reserve"
kill $DP; wait $DP
start $O/cnn.dlog
timeout 120 $T train --model cnn --rounds 2 > $O/cnn.json 2>$O/cnn.err; echo "cnn rc=$?"; grep -E "^[12] +torch" $O/cnn.err; python3 tools/goals.py $O/cnn.json 2>&1 | tail -3
$B/tools/mbctl status | grep -E "^reserve"
kill $DP; wait $DP
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
$B/tools/mbctl status | grep -E "^reserve"
kill $DP; wait $DP
python3 tools/results/gpu-2026-12-06h/waits.py - $O/conv.json
python3 tools/goals.py $O/conv.json | head -12
cd $OUT && tar czf s198.tgz s198 && rm -rf s198
date -u
