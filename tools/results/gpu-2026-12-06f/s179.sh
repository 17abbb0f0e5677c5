#!/bin/sh
# 1. gpu_torch_compile rewritten: torch.compile (default mode) checked; mode="reduce-overhead"
#    with the graph trees' debug pool check off, checked where PyTorch's pluggable
#    interface lets it run (s178: it raised "pluggable does not yet support
#    checkPoolLiveAllocations" at the first call).
# 2. the backend's event pool, off and on in turn twice more: bench_vspace growth.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 240 ctest -R gpu_torch_compile -V > $OUT/ctest.log 2>&1)
grep -E "^[0-9]+: (torch.compile|SKIP|PASS|FAIL|Traceback|RuntimeError)|tests passed|Test +#" $OUT/ctest.log
grep -qE "gpu_torch_compile .*Passed" $OUT/ctest.log || grep -E "^[0-9]+: " $OUT/ctest.log | grep -iE "error|exception" | tail -6
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 40G >$OUT/d.log 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
for k in 1 2; do
echo "event pool off:"; MOONBRIGHT_EVENT_POOL=0 timeout 60 $B/tools/bench_vspace growth 2>&1 | grep -E "^\| (64|2048) KiB"
echo "event pool on:"; timeout 60 $B/tools/bench_vspace growth 2>&1 | grep -E "^\| (64|2048) KiB"
done
kill $DP; wait $DP
date -u
