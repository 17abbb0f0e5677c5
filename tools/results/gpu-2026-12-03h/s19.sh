#!/bin/sh
# threads A/B/C: HEAD, B (64 MiB bins), C (top-up to 3/4)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
for v in A B C; do
  rm -rf /tmp/$v && mkdir -p /tmp/$v && tar --exclude=./build-gpu --exclude=./.gpudeps -cf - . | tar -xf - -C /tmp/$v
  [ $v != A ] && (cd /tmp/$v && patch -p1 -s < .gpu/$v.patch)
  (cmake -S /tmp/$v -B /tmp/$v/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/$v/b -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: ") &
done
wait
date -u
for r in 1 2 3; do for v in A B C; do
B=/tmp/$v/b; RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench threads --threads 1,16 --pairs 300000 --rounds 0 --no-cuda --quiet > /tmp/ab-$v$r.txt 2>&1; cat /tmp/ab-$v$r.txt >> $OUT/ab.txt
echo "$v$r $(grep -E '^\| (1|16) ' /tmp/ab-$v$r.txt | tr '\n' ' ') $(grep against /tmp/ab-$v$r.txt)"
kill $DP; wait $DP
done; done
date -u
B=/tmp/A/b; RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_HEAP_CLOSE_FIT=1 MOONBRIGHT_RUNTIME_DIR=$RT timeout 200 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies realloc,cudaMallocAsync --json --quiet > $OUT/closefit.json 2>/dev/null
python3 -c "import json,sys
for s in json.load(open(sys.argv[1]))['strategies']:
  a=s['alloc_ns'];print('closefit',s['strategy'],'r/l %.4f'%s['reserved_over_live'],'mean %.2f p50 %.2f p99 %.1f max %.1f'%(a['mean']/1e3,a['p50']/1e3,a['p99']/1e3,a['max']/1e3),'waits',s['driver_waits'],'frames',s['peak_daemon_frames'],'heap',s.get('heap'))" $OUT/closefit.json
kill $DP; wait $DP
date -u
