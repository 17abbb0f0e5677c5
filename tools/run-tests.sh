#!/bin/sh
# tools/run-tests.sh: the one command that runs every test: installs the
# build dependencies if missing, builds with AddressSanitizer and UBSan
# (warnings are errors), and runs ctest. GPU tests skip, and say so, where no
# GPU is usable; then runs the threads test again under ThreadSanitizer
# (MB_TSAN=0 skips) and fuzzes the daemon's request handling for 60 s
# (libFuzzer, tests/fuzz; MB_FUZZ_SECONDS changes it, 0 skips). Extra
# arguments go to ctest (e.g. -L unit).
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DMB_ASAN=ON -DMB_WERROR=ON >/dev/null
cmake --build build-test -j"$(nproc)"
(cd build-test && ctest --output-on-failure --timeout 900 "$@")
# The threads test again under ThreadSanitizer (MB_TSAN=0 skips).
if [ "${MB_TSAN:-1}" != 0 ]; then
  echo "ThreadSanitizer build: threads sharing one client"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DMB_TSAN=ON -DMB_WERROR=ON >/dev/null
  cmake --build build-tsan -j"$(nproc)" --target test_threads moonbrightd mbctl
  (cd build-tsan && ctest --output-on-failure --timeout 900 -R '^test_threads$')
fi
secs=${MB_FUZZ_SECONDS:-60}
if [ "$secs" -gt 0 ]; then
  echo "fuzzing the daemon's request handling for $secs s"
  sh tests/fuzz/run.sh "$secs"
fi
