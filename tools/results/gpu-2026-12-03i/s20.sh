#!/bin/sh
# final: HEAD and HEAD without the leaf walks (V.patch reversed); ctest -L gpu; bench_vspace A/B x2; full replay; threads
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
rm -rf /tmp/O && mkdir -p /tmp/O && tar --exclude=./build-gpu --exclude=./.gpudeps -cf - . | tar -xf - -C /tmp/O && (cd /tmp/O && patch -R -p1 -s < .gpu/V.patch)
(cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: ") &
(cmake -S /tmp/O -B /tmp/O/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/O/b -j16 --target moonbrightd bench_vspace 2>&1 | grep -E "error|warning: ") &
wait
(cd $B && timeout 240 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|Passed" | tail -9)
date -u
for r in 1 2; do for v in new old; do
  X=$B; [ $v = old ] && X=/tmp/O/b
  RT=$(mktemp -d)
  $X/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $X/tools/bench_vspace > /tmp/bv-$v$r.txt 2>&1
  echo "== bench_vspace $v $r"; grep -E "^\| (64|2048) KiB \| 1024 \|" /tmp/bv-$v$r.txt | head -4
  cat /tmp/bv-$v$r.txt >> $OUT/bench_vspace.txt
  kill $DP; wait $DP
done; done
date -u
P="import json,sys;d=json.load(open(sys.argv[1]))
for s in d['strategies']:
  a=s['alloc_ns'];print(s['strategy'],'r/l %.4f'%s['reserved_over_live'],'mean %.2f p50 %.2f p99 %.1f max %.1f first %.1f max-after-first %.1f'%(a['mean']/1e3,a['p50']/1e3,a['p99']/1e3,a['max']/1e3,s.get('first_alloc_ns',0)/1e3,s.get('alloc_max_after_first_ns',0)/1e3),'waits',s['driver_waits'],'frames',s['peak_daemon_frames'],'req',s.get('daemon_requests'))"
REPLAY_ARGS="--slow-us 1000" OUT=$OUT/bench TRACE=.gpu/azure_llm_conv_2023.csv STEPS="replay" STEP_BUDGET=250 sh tools/gpu_bench.sh $B >/dev/null 2>&1
for k in realloc grow vspace; do echo "$k slow: $(grep -c "$k: .*took" $OUT/bench/replay.log)"; done
python3 -c "$P" $OUT/bench/replay.json
cp $OUT/bench/replay.json $OUT/replay.json; cp $OUT/bench/replay.log $OUT/replay.log; rm -rf $OUT/bench
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench threads --threads 1,4,16 --pairs 300000 --rounds 10 --quiet > $OUT/threads.txt 2>&1; grep -E "^\| [0-9]|stream destr|mbclient|against" $OUT/threads.txt
kill $DP; wait $DP
date -u
