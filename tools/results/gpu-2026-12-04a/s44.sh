#!/bin/sh
# page pools wait for the extent in flight: the reworked gpu_vspace test, then ctest -L gpu
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*" | tail -5)
(cd $B && timeout 60 ctest -R gpu_vspace --output-on-failure 2>&1 | grep -E "OK|FAIL|ERROR|LINE|passed" | tail -20)
date -u
