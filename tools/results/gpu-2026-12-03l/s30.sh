#!/bin/sh
# build; ctest -L gpu; grow alone warm grants on/off x2 alternating (daemon slow-grant log);
# full replay (gpu_bench replay step); torch train default vs moonbright x3 alternating
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
date -u
(cd $B && timeout 240 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*" | tail -5)
date -u
P="import json,sys;d=json.load(open(sys.argv[1]))
for s in d['strategies']:
  a=s['alloc_ns'];print(s['strategy'],'r/l %.4f'%s['reserved_over_live'],'mean %.2f p50 %.2f p99 %.1f max %.1f'%(a['mean']/1e3,a['p50']/1e3,a['p99']/1e3,a['max']/1e3),'waits',s['driver_waits'],'frames',s['peak_daemon_frames'],'creates',s.get('daemon_grant_creates'),'dreq',s.get('daemon_requests'))"
for r in 1 2; do for w in 2 0; do
  RT=$(mktemp -d)
  MOONBRIGHTD_SLOW_GRANT_US=1000 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level info >/tmp/d-$w$r.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_WARM_GRANTS=$w MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow,vspace,realloc --json --quiet --slow-us 1000 > /tmp/g-$w$r.json 2>/tmp/g-$w$r.slow
  echo "== warm=$w run $r: ops over 1 ms $(grep -c took /tmp/g-$w$r.slow), over 2 ms $(awk '{for(i=1;i<=NF;i++) if($i=="took" && $(i+1)>2000) n++} END{print n+0}' /tmp/g-$w$r.slow), daemon slow grants $(grep -c 'grant of' /tmp/d-$w$r.log)"; python3 -c "$P" /tmp/g-$w$r.json
  kill $DP; wait $DP
  (echo "### warm=$w run $r"; cat /tmp/g-$w$r.slow; grep "grant of" /tmp/d-$w$r.log) >> /tmp/slow.txt
  cp /tmp/g-$w$r.json $OUT/
done; done
cp /tmp/slow.txt $OUT/slow.txt
date -u
