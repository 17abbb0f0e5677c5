#!/bin/bash
# grow alone, twice on one daemon (a cold start, then warm), with the daemon's
# export counts (mbbench's daemon_made_ahead, daemon_exported_ahead): by default
# (granted frames keep their descriptors within the cap), with
# MOONBRIGHTD_KEEP_GRANTED=0 (the code before: frames passed on keep none), with
# MOONBRIGHTD_UNEXPORT=0 (every frame keeps its descriptor: no re-exports, past
# the cap); each on a fresh daemon, 100G, default and KEEP_GRANTED=0 twice.
# Another process's exports slow this one's maps (xproc_probe.c, s304): how much of
# grow's time is the daemon's exports? First xproc_probe2.c: the same, and with the
# child holding an exported handle (the daemon's anchor), creating or exporting
# again. Run with bash.
T0=$(date +%s)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s305; mkdir -p $O
P=tools/results/gpu-2026-12-07g
CU=$(dirname $(dirname $(command -v nvcc)))
gcc -O2 -I$CU/include $P/xproc_probe2.c -o /tmp/xprobe2 -L$CU/lib64/stubs -lcuda && timeout 60 /tmp/xprobe2 3 2 2>&1 | tee $O/xproc2.txt
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
show() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
  a=r['alloc_ns']
  print('%-10s'%sys.argv[2], r['strategy'], 'r/l %.3f'%r['reserved_over_live'], 'mean %.1f us'%(a['mean']/1e3), 'p99 %.0f'%(a['p99']/1e3), 'max %.2f ms'%(a['max']/1e6), 'waits', r.get('driver_waits'), 'busy %.2f'%(r.get('background_busy_s') or 0), 'grants', r.get('daemon_requests'), 'path-creates', r.get('daemon_grant_creates'), 'path-reexports', r.get('daemon_reexports'), 'exported-ahead', r.get('daemon_exported_ahead'), 'made-ahead', r.get('daemon_made_ahead'), 'desc', r.get('peak_daemon_descriptors'), 'import %.2f s'%(r.get('import_s') or 0), 'daemon %.2f s'%(r.get('daemon_wait_s') or 0))
" $1 $2; }
for mode in default keep0 unexport0 default keep0; do
  case $mode in default) E=;; keep0) E=MOONBRIGHTD_KEEP_GRANTED=0;; unexport0) E=MOONBRIGHTD_UNEXPORT=0;; exportahead0) E=MOONBRIGHTD_EXPORT_AHEAD=0;; esac
  [ -e $O/$mode-1.json ] && mode=$mode-b
  RT=$(mktemp -d); env $E MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$mode.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
  for k in 1 2; do
    timeout 100 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/$mode-$k.json 2>$O/$mode-$k.err || echo "$mode $k rc=$?"
    show $O/$mode-$k.json $mode-$k
  done
  $B/tools/mbctl status | grep handles
  kill $DP; wait $DP
done
# The goal replay on the new default (all strategies), then ctest -L gpu if time is left.
RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/conv.dlog 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
kill $DP; wait $DP
show $O/conv.json conv
LEFT=$((330 - $(date +%s) + T0))
echo "seconds left: $LEFT"
if [ $LEFT -gt 150 ]; then
  (cd $B && timeout $((LEFT-10)) ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?")
  grep -E "tests passed|Failed|\*\*\*|FAILED|LINE" $O/ctest.log | head -20
fi
cd $OUT && tar czf s305.tgz s305 && rm -rf s305
date -u
