#!/bin/sh
# threads: new thread-cache lock; where 16 sync threads sleep (sched_switch)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
date -u
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-fno-omit-frame-pointer >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
PERF=".gpu/perf/lib/ld-linux-x86-64.so.2 --library-path .gpu/perf/lib .gpu/perf/perf"
start_d() { RT=$(mktemp -d); env $1 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level info >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
for r in 1 2; do
start_d X=1 $OUT/d-t$r.log
echo "== threads run $r"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench threads --threads 1,4,16 --pairs 300000 --rounds 10 --quiet > $OUT/threads-$r.txt 2>&1; tail -8 $OUT/threads-$r.txt
kill $DP; wait $DP
done
start_d X=1 $OUT/d-t3.log
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $PERF stat -e task-clock,context-switches,cpu-migrations $B/tools/mbbench threads --threads 16 --pairs 300000 --rounds 1 --no-cuda --quiet 2>&1 | grep -E "^\| 16|task-clock|context-sw|migrations|elapsed"
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $PERF record -e sched:sched_switch -g -o $OUT/sw.data $B/tools/mbbench threads --threads 16 --pairs 300000 --rounds 1 --no-cuda --quiet 2>&1 | grep -E "^\| 16|perf"
$PERF report -i $OUT/sw.data --stdio --no-children --sort comm,sym -G --percent-limit 1 2>/dev/null | grep -v "^$" | head -150 > $OUT/sw.txt
rm -f $OUT/sw.data
head -70 $OUT/sw.txt
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $PERF record -F 2999 -g -o $OUT/t16.data $B/tools/mbbench threads --threads 16 --pairs 300000 --rounds 1 --no-cuda --quiet 2>&1 | grep -E "^\| 16"
$PERF report -i $OUT/t16.data --stdio --no-children --sort dso,sym --percent-limit 0.5 -g none 2>/dev/null | grep "%" | head -30
rm -f $OUT/t16.data
kill $DP; wait $DP
date -u
