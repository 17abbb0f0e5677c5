#!/bin/sh
# tools/run-tests.sh: the one command that runs every test: installs the
# build dependencies if missing, builds with AddressSanitizer and UBSan
# (warnings are errors), and runs ctest. GPU tests skip, and say so, where no
# GPU is usable. Extra arguments go to ctest (e.g. -L unit).
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DMB_ASAN=ON -DMB_WERROR=ON >/dev/null
cmake --build build-test -j"$(nproc)"
cd build-test
ctest --output-on-failure --timeout 900 "$@"
