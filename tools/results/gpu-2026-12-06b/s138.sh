#!/bin/sh
# the code at ff3d6d7 on whichever card comes: build, ctest -L gpu, then tools/gpu_bench.sh with the
# steps the open goals read (replay, latency, vspace: bench_vspace growth, never run on a GPU before,
# torch-train), and tools/goals.py's verdicts; then the conversation replay paced at 2 ms a decode step
# (mbbench replay --pace-us 2000, first 1000 requests) for grow and cudaMallocAsync
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s138; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
OUT=$O/bench TRACE=.gpu/azure_llm_conv_2023.csv STEPS="replay latency vspace torch-train" STEP_BUDGET=370 \
  timeout 390 sh tools/gpu_bench.sh $B > $O/bench.log 2>&1
echo "gpu_bench rc=$?"; grep -A8 "== replay" $O/bench.log | head -9
echo "== goals"; cat $O/bench/goals.txt
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/paced.dlog 2>&1 & DP=$!
i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --requests 1000 --pace-us 2000 \
  --strategies grow,cudaMallocAsync --json --quiet > $O/paced.json 2>$O/paced.err; echo "paced rc=$?"
kill $DP; wait $DP
python3 tools/goals.py $O/paced.json 2>&1 | grep -i grow
cd $OUT && tar czf s138.tgz s138 && rm -rf s138
date -u
