#!/bin/sh
# grow: stepwise unmaps (new) vs not (old, S.patch reversed), 3 runs each alternating; then s31
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
rm -rf /tmp/O && mkdir -p /tmp/O && tar --exclude=./build-gpu --exclude=./.gpudeps -cf - . | tar -xf - -C /tmp/O && (cd /tmp/O && patch -R -p1 -s < .gpu/S.patch)
(cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: ") &
(cmake -S /tmp/O -B /tmp/O/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/O/b -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: ") &
wait
date -u
P="import json,sys;d=json.load(open(sys.argv[1]))
for s in d['strategies']:
  a=s['alloc_ns'];print(s['strategy'],'r/l %.4f'%s['reserved_over_live'],'mean %.2f p50 %.2f p99 %.1f max %.1f'%(a['mean']/1e3,a['p50']/1e3,a['p99']/1e3,a['max']/1e3),'waits',s['driver_waits'],'frames',s['peak_daemon_frames'],'creates',s.get('daemon_grant_creates'),'dreq',s.get('daemon_requests'))"
for r in 1 2 3; do for v in new old; do
  X=$B; [ $v = old ] && X=/tmp/O/b
  RT=$(mktemp -d)
  $X/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $X/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow --json --quiet --slow-us 1000 > /tmp/s-$v$r.json 2>/tmp/s-$v$r.slow
  echo "== $v $r: ops over 1 ms $(grep -c took /tmp/s-$v$r.slow), over 2 ms $(awk '{for(i=1;i<=NF;i++) if($i=="took" && $(i+1)>2000) n++} END{print n+0}' /tmp/s-$v$r.slow), no round trip over 2 ms $(grep '0 daemon round trips' /tmp/s-$v$r.slow | awk '{for(i=1;i<=NF;i++) if($i=="took" && $(i+1)>2000) n++} END{print n+0}')"; python3 -c "$P" /tmp/s-$v$r.json
  kill $DP; wait $DP
  (echo "### $v $r"; cat /tmp/s-$v$r.slow) >> /tmp/sslow.txt
done; done
cp /tmp/sslow.txt $OUT/step-slow.txt; cp /tmp/s-new1.json /tmp/s-old1.json $OUT/
date -u
(cd $B && timeout 200 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*" | tail -5)
sh .gpu/s31.sh
