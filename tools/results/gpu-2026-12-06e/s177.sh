#!/bin/sh
# the final code (the stats frame size set before the background thread starts): ctest -L gpu
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && ctest -L gpu -V 2>&1 | grep -E "^[0-9]+: ([0-9]+-byte|40 recorded|tenant|12 replays|20 graphs|PASS|FAIL|Traceback)|tests passed|Test +#")
