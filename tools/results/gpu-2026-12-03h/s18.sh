#!/bin/sh
# build, machine facts, ctest -L gpu, full replay, threads x2
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
date -u; git log -1 --format=%h 2>/dev/null
lscpu | grep -E "^CPU\(s\)|Thread|Core|Socket|Model name|MHz|NUMA node\(s\)" > $OUT/lscpu.txt; cat $OUT/lscpu.txt
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 240 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|Passed" | tail -9)
date -u
P="import json,sys;d=json.load(open(sys.argv[1]))
for s in d['strategies']:
  a=s['alloc_ns'];print(s['strategy'],'r/l %.4f'%s['reserved_over_live'],'mean %.2f p50 %.2f p99 %.1f max %.1f first %.1f max-after-first %.1f'%(a['mean']/1e3,a['p50']/1e3,a['p99']/1e3,a['max']/1e3,s.get('first_alloc_ns',0)/1e3,s.get('alloc_max_after_first_ns',0)/1e3),'waits',s['driver_waits'],'frames',s['peak_daemon_frames'],'req',s.get('daemon_requests'))"
REPLAY_ARGS="--slow-us 1000" OUT=$OUT/bench TRACE=.gpu/azure_llm_conv_2023.csv STEPS="replay" STEP_BUDGET=250 sh tools/gpu_bench.sh $B >/dev/null 2>&1
for k in realloc grow vspace; do echo "$k slow: $(grep -c "$k: .*took" $OUT/bench/replay.log)"; done
grep -E "vspace: .*took" $OUT/bench/replay.log | head -3
python3 -c "$P" $OUT/bench/replay.json
cp $OUT/bench/replay.json $OUT/replay.json; cp $OUT/bench/replay.log $OUT/replay.log; cp $OUT/bench/moonbrightd.log $OUT/replay-daemon.log; rm -rf $OUT/bench
date -u
for m in cold prepared; do
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$OUT/vs-$m-daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
A=; [ $m = cold ] && A=--cold
MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies vspace $A --json --quiet --slow-us 500 > $OUT/vs-$m.json 2>$OUT/vs-$m.slow
echo "== vspace $m"; python3 -c "$P" $OUT/vs-$m.json; python3 -c "import json;s=json.load(open('$OUT/vs-$m.json'))['strategies'][0];print('prepared',s['prepared_pages'],'prepare ms %.2f'%(s['prepare_ns']/1e6))"; head -3 $OUT/vs-$m.slow
kill $DP; wait $DP
done
date -u
for r in 1 2; do
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "== threads run $r"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench threads --threads 1,4,16 --pairs 300000 --rounds 10 --quiet > $OUT/threads-$r.txt 2>&1; grep -E "^\| [0-9]|stream destr|mbclient|against" $OUT/threads-$r.txt
kill $DP; wait $DP
done
date -u
