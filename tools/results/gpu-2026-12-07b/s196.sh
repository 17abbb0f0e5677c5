#!/bin/bash
# Spares capped by the bytes granted (a spare of each order holds at most a
# sixteenth of what the daemon has granted): the CNN and GPT training through
# the hook (peak device memory in use against the default allocator's), the
# goal set once. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s196; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
T="python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright"
start $O/train.dlog
timeout 120 $T train --model cnn --rounds 2 > $O/cnn.json 2>$O/cnn.err; echo "cnn rc=$?"; python3 tools/goals.py $O/cnn.json 2>&1 | tail -4
tail -6 $O/cnn.err
timeout 170 $T train --rounds 2 > $O/train.json 2>$O/train.err; echo "train rc=$?"; python3 tools/goals.py $O/train.json 2>&1 | tail -4
tail -6 $O/train.err
kill $DP; wait $DP
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
$B/tools/mbctl status > $O/status.txt 2>&1; grep -E "^frames|^handles|^reserve" $O/status.txt
kill $DP; wait $DP
python3 tools/results/gpu-2026-12-06h/waits.py - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
cd $OUT && tar czf s196.tgz s196 && rm -rf s196
date -u
