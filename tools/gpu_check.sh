#!/bin/sh
# tools/gpu_check.sh: everything checked on a GPU host in one go: build
# (Release), the GPU tests (ctest -L gpu), then the GPU benchmarks, with logs
# under $OUT (default ./gpu-out) and a short summary last. On a host without
# the build dependencies, source tools/gpu/use-deps.sh first (see README).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=${BUILD:-/tmp/mb-gpu-build}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
date -u +%Y-%m-%dT%H:%MZ | tee -a "$OUT/gpu.txt"
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release && cmake --build "$B" -j"$(nproc)"; } >"$OUT/build.log" 2>&1
echo "build rc=$? ($(grep -c warning "$OUT/build.log") warnings)"
timeout 360 ctest --test-dir "$B" -L gpu --output-on-failure -V >"$OUT/ctest-gpu.log" 2>&1
echo "ctest -L gpu rc=$?"
grep -E "Test +#|tests passed|PASS|FAIL|SKIP|same-stream|disturbed|bytes wrong|losses" "$OUT/ctest-gpu.log" | head -40
if [ -f tools/gpu_bench.sh ] && [ "${BENCH:-1}" = 1 ]; then
  timeout "${BENCH_TIMEOUT:-600}" sh tools/gpu_bench.sh "$B" >"$OUT/bench.log" 2>&1
  echo "gpu_bench rc=$?"
  tail -60 "$OUT/bench.log"
fi
