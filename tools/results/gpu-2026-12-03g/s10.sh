#!/bin/sh
# threads 16 under perf; vspace alone with the export anchor on/off (first allocation); full replay
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
date -u
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-fno-omit-frame-pointer >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
PERF=".gpu/perf/lib/ld-linux-x86-64.so.2 --library-path .gpu/perf/lib .gpu/perf/perf"
start_d() { RT=$(mktemp -d); env $1 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level info >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
start_d X=1 $OUT/d-threads.log
echo "== threads 16 perf"
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $PERF record -F 2999 -g -o $OUT/t16.data $B/tools/mbbench threads --threads 16 --pairs 300000 --rounds 1 --no-cuda --quiet > $OUT/t16.txt 2>$OUT/t16.err; tail -3 $OUT/t16.err; grep "^| 16" $OUT/t16.txt
$PERF report -i $OUT/t16.data --stdio --no-children --sort dso,sym --percent-limit 0.3 2>/dev/null | grep -v "^$" | grep -E "%" | head -60 > $OUT/t16-flat.txt
$PERF report -i $OUT/t16.data --stdio --no-children --sort comm,tid --percent-limit 1 2>/dev/null | grep "%" | head -40 > $OUT/t16-tid.txt
$PERF report -i $OUT/t16.data --stdio --children --sort sym --percent-limit 2 -g none 2>/dev/null | grep "%" | head -60 > $OUT/t16-children.txt
head -35 $OUT/t16-flat.txt
rm -f $OUT/t16.data
kill $DP; wait $DP
date -u
P="import json,sys;d=json.load(open(sys.argv[1]))
for s in d['strategies']:
  a=s['alloc_ns'];print(s['strategy'],'r/l %.4f'%s['reserved_over_live'],'mean %.2f p50 %.2f p99 %.1f max %.1f first %.1f max-after-first %.1f'%(a['mean']/1e3,a['p50']/1e3,a['p99']/1e3,a['max']/1e3,s.get('first_alloc_ns',0)/1e3,s.get('alloc_max_after_first_ns',0)/1e3),'waits',s['driver_waits'],'frames',s['peak_daemon_frames'],'dw %s imp %s'%(s.get('daemon_wait_s'),s.get('import_s')))"
for a in 1 0 1 0; do
start_d "MOONBRIGHTD_EXPORT_ANCHOR=$a MOONBRIGHTD_SLOW_GRANT_US=100" $OUT/d-v$a.log
timeout 60 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies vspace --json --quiet --runtime-dir $RT --slow-us 500 > $OUT/v$a.json 2>$OUT/slow-v$a.txt
echo "== vspace anchor=$a"; python3 -c "$P" $OUT/v$a.json; head -2 $OUT/slow-v$a.txt; grep "grant of" $OUT/d-v$a.log | head -3
kill $DP; wait $DP
done
date -u
REPLAY_ARGS="--slow-us 1000" OUT=$OUT/bench TRACE=.gpu/azure_llm_conv_2023.csv STEPS="replay" STEP_BUDGET=250 sh tools/gpu_bench.sh $B >/dev/null 2>&1
for k in realloc grow vspace; do echo "$k slow: $(grep -c "$k: .*took" $OUT/bench/replay.log)"; done
python3 -c "$P" $OUT/bench/replay.json
echo "slow grants: $(grep -c 'grant of' $OUT/bench/moonbrightd.log)"
date -u
