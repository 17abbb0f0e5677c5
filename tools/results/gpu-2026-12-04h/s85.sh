#!/bin/sh
# ctest -L gpu on the final code
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 300 ctest -L gpu 2>&1 | grep -E "Test +#|tests passed|Failed|\*\*\*")
date -u
