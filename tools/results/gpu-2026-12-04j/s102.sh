#!/bin/sh
# 20 000 jobs gated on one stream behind a slow mapper (gpu_async_map test_many_gates): the code of
# this tree, and the code of 4ef2b5c (stream gates enqueued under the locks the mapper takes) with the same case
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s102; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
BO=/tmp/bold
cmake -S .gpu/old -B $BO -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BO -j16 2>&1 | grep -E "error|warning: "
echo "== this tree"
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
(cd $B && timeout 120 ctest -R gpu_async_map -V > $O/new.txt 2>&1; echo "new rc=$?"; grep -E "jobs queued|freed |OK|FAILED|PASSED" $O/new.txt)
echo "== 4ef2b5c"
(cd $BO && timeout 100 ctest -R gpu_async_map -V --timeout 90 > $O/old.txt 2>&1; echo "old rc=$?"; grep -E "jobs queued|OK|FAILED|PASSED|Timeout|RUN" $O/old.txt | tail -6)
pkill -f moonbrightd; sleep 1
cd $OUT && tar czf s102.tgz s102 && rm -rf s102
date -u
