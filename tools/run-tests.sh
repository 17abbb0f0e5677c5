#!/bin/sh
# tools/run-tests.sh: the one command that runs every test: installs the
# build dependencies if missing, builds with AddressSanitizer and UBSan
# (warnings are errors), and runs ctest. GPU tests skip where no GPU is
# usable, and the reason is printed once after ctest's summary; then runs
# the multi-threaded client tests again under ThreadSanitizer (MB_TSAN=0 skips) and fuzzes
# the daemon's request handling for 60 s, then its configuration's text for
# 20 s (libFuzzer, tests/fuzz; MB_FUZZ_SECONDS changes the first, 0 skips both). Extra arguments go to ctest (e.g.
# -L unit).
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DMB_ASAN=ON -DMB_WERROR=ON >/dev/null
cmake --build build-test -j"$(nproc)"
rc=0
(cd build-test && ctest --output-on-failure --timeout 900 "$@") || rc=$?

# Skipped tests say why on their first line starting "SKIP:"; ctest keeps
# that in its log only. Say it here, once: the most direct reason (the
# driver's own words when a test got that far), with the number of tests.
log=build-test/Testing/Temporary/LastTest.log
if [ -f "$log" ]; then
  n=$(grep -c '^SKIP: ' "$log" || true)
  if [ "$n" -gt 0 ]; then
    why=$(grep '^SKIP: no usable GPU' "$log" | head -n 1)
    [ -n "$why" ] || why=$(grep '^SKIP: ' "$log" | head -n 1)
    echo "$n tests skipped: ${why#SKIP: } (each test's reason: $log)"
  fi
fi
[ "$rc" -eq 0 ] || exit "$rc"

# The client tests with threads of their own (every client has background
# threads) again under ThreadSanitizer (MB_TSAN=0 skips).
if [ "${MB_TSAN:-1}" != 0 ]; then
  echo "ThreadSanitizer build: the client tests that run threads (every client has background threads)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DMB_TSAN=ON -DMB_WERROR=ON >/dev/null
  tsan_tests="test_threads test_vspace_host test_client_model test_heap test_late_grant test_integration test_devices"
  # shellcheck disable=SC2086
  cmake --build build-tsan -j"$(nproc)" --target $tsan_tests moonbrightd mbctl mbtest_client mbtest_cacher
  (cd build-tsan &&
   TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/../tests/tsan.supp" \
   MB_MODEL_OPS=100000 ctest --output-on-failure --timeout 900 \
     -R "^($(echo $tsan_tests test_client_model_near | tr ' ' '|'))\$")
fi
secs=${MB_FUZZ_SECONDS:-60}
if [ "$secs" -gt 0 ]; then
  echo "fuzzing the daemon's request handling for $secs s, then its configuration's text"
  sh tests/fuzz/run.sh "$secs"
fi
