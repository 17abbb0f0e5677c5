#!/bin/sh
# tests/fuzz/run.sh: build the libFuzzer targets with clang and run each for
# a bounded time over its seeds (copied, so the repo's seeds stay as they
# are): fuzz_request (one control message; tests/fuzz/corpus) for SECONDS,
# then fuzz_config (the configuration's text; tests/fuzz/corpus_config) for
# a third of that, at least 10 s. Exits non-zero on any crash, leak,
# timeout, sanitizer report or broken promise.
#   tests/fuzz/run.sh [SECONDS]        (default 60; build dir: build-fuzz)
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-60}
build=${MB_FUZZ_BUILD:-build-fuzz}
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMB_FUZZ=ON \
      -DMB_CUDA=OFF -DBUILD_TESTING=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_request fuzz_seeds fuzz_config
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/request" "$work/config"
cp tests/fuzz/corpus/* "$work/request"/
cp tests/fuzz/corpus_config/* "$work/config"/
fuzz() {   # fuzz TARGET SECONDS CORPUS_DIR
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    "$build"/tests/fuzz/"$1" -max_total_time="$2" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build"/ "$3"
}
fuzz fuzz_request "$secs" "$work/request"
csecs=$((secs / 3))
[ "$csecs" -ge 10 ] || csecs=10
echo "fuzzing the configuration's text for $csecs s"
fuzz fuzz_config "$csecs" "$work/config"
