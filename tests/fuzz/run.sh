#!/bin/sh
# tests/fuzz/run.sh: build the libFuzzer target with clang and run it for a
# bounded time over the seeds in tests/fuzz/corpus (copied, so the repo's
# seeds stay as they are). Exits non-zero on any crash, leak, timeout or
# sanitizer report.
#   tests/fuzz/run.sh [SECONDS]        (default 60; build dir: build-fuzz)
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-60}
build=${MB_FUZZ_BUILD:-build-fuzz}
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMB_FUZZ=ON \
      -DMB_CUDA=OFF -DBUILD_TESTING=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_request fuzz_seeds
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp tests/fuzz/corpus/* "$work"/
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  "$build"/tests/fuzz/fuzz_request -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build"/ "$work"
