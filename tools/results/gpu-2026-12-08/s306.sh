#!/bin/bash
# The code of 8dc0cac on a GPU (vspace watermark floors by the largest take); the daemon maps a frame only at its first scrub
# (251a7d7) and a frame passed on keeps its descriptor within the cap (dfdd96c).
# The goal set (conversation replay: realloc, grow, vspace, cudaMallocAsync; the
# pairs; bench_vspace growth; goals.py); ctest -L gpu whole; grow alone on fresh
# daemons, default and MOONBRIGHTD_KEEP_GRANTED=0, with the daemon's export
# counts; xproc_probe2.c (another process's anchored exports and re-exports beside
# this one's maps) if time is left. Run with bash.
T0=$(date +%s)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s306; mkdir -p $O
P=tools/results/gpu-2026-12-08
CU=$(dirname $(dirname $(command -v nvcc)))
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); env $3 MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${2:-100G} >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
date -u
(cd $B && timeout 170 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|FAILED|LINE" $O/ctest.log | head -20
show() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
  a=r['alloc_ns']
  print('%-10s'%sys.argv[2], r['strategy'], 'r/l %.3f'%r['reserved_over_live'], 'mean %.1f us'%(a['mean']/1e3), 'p99 %.0f'%(a['p99']/1e3), 'max %.2f ms'%(a['max']/1e6), 'waits', r.get('driver_waits'), 'grants', r.get('daemon_requests'), 'path-creates', r.get('daemon_grant_creates'), 'path-reexports', r.get('daemon_reexports'), 'exported-ahead', r.get('daemon_exported_ahead'), 'made-ahead', r.get('daemon_made_ahead'), 'desc', r.get('peak_daemon_descriptors'), 'import %.2f s'%(r.get('import_s') or 0), 'daemon %.2f s'%(r.get('daemon_wait_s') or 0))
" $1 $2; }
for mode in default keep0; do
  case $mode in default) E=;; keep0) E=MOONBRIGHTD_KEEP_GRANTED=0;; esac
  [ -e $O/$mode.json ] && mode=$mode-b
  LEFT=$((330 - $(date +%s) + T0)); [ $LEFT -lt 40 ] && break
  start $O/$mode.dlog 100G $E
  timeout 50 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/$mode.json 2>$O/$mode.err || echo "$mode rc=$?"
  kill $DP; wait $DP
  show $O/$mode.json $mode
done
LEFT=$((360 - $(date +%s) + T0)); echo "seconds left: $LEFT"
if [ $LEFT -gt 40 ]; then
  gcc -O2 -I$CU/include $P/xproc_probe2.c -o /tmp/xprobe2 -L$CU/lib64/stubs -lcuda && timeout $((LEFT-5)) /tmp/xprobe2 3 2 2>&1 | tee $O/xproc2.txt
fi
cd $OUT && tar czf s306.tgz s306 && rm -rf s306
date -u
