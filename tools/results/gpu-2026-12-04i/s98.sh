#!/bin/sh
# the final code: ctest -L gpu (output kept)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
O=$OUT/s98; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 200 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
grep -E "in flight after|synchronous growth|failed mapping|freed .* while its stream" $O/ctest.txt | cut -c1-250
cd $OUT && tar czf s98.tgz s98 && rm -rf s98
date -u
