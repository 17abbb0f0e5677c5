#!/bin/bash
# Ran on an H100 80GB HBM3 (a fast host) at 07:32-07:36 UTC on 2026-12-07: `bash s190.sh`
# (s190-train.tgz), then `bash s190.sh goals` four times on the same machine
# (s190-goals1.tgz to s190-goals4.tgz), and at 07:56 UTC once more on another H100
# (s190-goals5.tgz); outputs.txt has what each printed.
# The current code (da34896: one journal writer, frames.c naming slots) on a GPU: ctest -L gpu whole (the torch
# tests included, and gpu_daemon_restart reading the journal), GPT training through the
# hook (2 rounds); with the argument `goals`, instead, the goal set (conversation replay:
# realloc, grow, vspace, cudaMallocAsync; the pairs; bench_vspace growth; goals.py).
# Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s190; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
[ "${1:-}" = goals ] || (cd $B && timeout 200 ctest -L gpu > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|Test +#" $O/ctest.log | head -20
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
if [ "${1:-}" != goals ]; then
start $O/train.dlog
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err; echo "train rc=$?"
kill $DP; wait $DP
python3 tools/goals.py $O/train.json
fi
date -u
if [ "${1:-}" = goals ]; then
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
$B/tools/mbctl status > $O/status.txt 2>&1; $B/tools/mbctl status --json > $O/status.json 2>&1
grep -E "^frames|^handles" $O/status.txt
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
fi
cd $OUT && tar czf s190.tgz s190 && rm -rf s190
date -u
