#!/bin/sh
# Ran with bash on an H100 80GB HBM3 at 05:24-05:25 UTC on 2026-12-07 as `bash s189.sh
# torch` (the torch tests left out for the device time left; s189.tgz, outputs.txt). Run
# with sh a minute before on the same machine, its use-deps step found no libzmq and
# nothing was built.
# Frame slots reused under new ids (the daemon's table follows the most frames held at
# once; the client keys its frames by id in a hash): ctest -L gpu (gpu_daemon_restart
# reads the journal), then the goal set but training on the working tree (conversation
# replay: realloc, grow, vspace, cudaMallocAsync; the pairs; bench_vspace growth;
# goals.py), with the daemon's status after it (frame_slots against frames made).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s189; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
# $1: a ctest -E pattern, to leave tests out where device time is short
(cd $B && timeout 240 ctest -L gpu ${1:+-E "$1"} > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|Test +#" $O/ctest.log | head -20
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/conv.dlog 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
$B/tools/mbctl status > $O/status.txt 2>&1; $B/tools/mbctl status --json > $O/status.json 2>&1
grep -E "^frames|^handles" $O/status.txt
python3 -c "import json,sys; d=json.load(open('$O/status.json')); print('frame_slots', d.get('frame_slots'), 'frames_total', d['frames_total'], 'released_idle', d['released_idle'], 'released_isolation', d['released_isolation'], 'released_device_full', d['released_device_full'])"
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
cd $OUT && tar czf s189.tgz s189 && rm -rf s189
date -u
