#!/bin/sh
# the final code: bench_vspace (map_async of 1024 pages), two runs, a fresh daemon each
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd bench_vspace 2>&1 | grep -E "error|warning: "
for r in 1 2; do
  RT=$(mktemp -d)
  $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/bench_vspace > $OUT/bench_vspace-$r.txt 2>&1
  echo "== bench_vspace $r rc=$?"; grep -E "^\| (64|2048) KiB \| 1024 \|" $OUT/bench_vspace-$r.txt | head -4
  kill $DP; wait $DP
done
date -u
