#!/bin/bash
# grow alone, twice on one daemon (a cold start, then warm), with the daemon's
# export counts (mbbench's daemon_made_ahead, daemon_exported_ahead, new here): by
# default, with MOONBRIGHTD_UNEXPORT=0 (frames passed on keep their descriptor: no
# re-exports) and with MOONBRIGHTD_EXPORT_AHEAD=0; each on a fresh daemon, 100G.
# Another process's exports slow this one's maps (xproc_probe.c, s304): how much of
# grow's time is the daemon's exports? Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s305; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
show() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
  a=r['alloc_ns']
  print('%-10s'%sys.argv[2], r['strategy'], 'r/l %.3f'%r['reserved_over_live'], 'mean %.1f us'%(a['mean']/1e3), 'p99 %.0f'%(a['p99']/1e3), 'max %.2f ms'%(a['max']/1e6), 'waits', r.get('driver_waits'), 'busy %.2f'%r.get('background_busy_s'), 'grants', r.get('daemon_requests'), 'path-creates', r.get('daemon_grant_creates'), 'path-reexports', r.get('daemon_reexports'), 'exported-ahead', r.get('daemon_exported_ahead'), 'made-ahead', r.get('daemon_made_ahead'), 'desc', r.get('peak_daemon_descriptors'), 'import %.2f s'%r.get('import_s'), 'daemon %.2f s'%r.get('daemon_wait_s'))
" $1 $2; }
for mode in default unexport0 exportahead0; do
  case $mode in default) E=;; unexport0) E=MOONBRIGHTD_UNEXPORT=0;; exportahead0) E=MOONBRIGHTD_EXPORT_AHEAD=0;; esac
  RT=$(mktemp -d); env $E MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$mode.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
  for k in 1 2; do
    timeout 100 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/$mode-$k.json 2>$O/$mode-$k.err || echo "$mode $k rc=$?"
    show $O/$mode-$k.json $mode-$k
  done
  $B/tools/mbctl status | grep handles
  kill $DP; wait $DP
done
cd $OUT && tar czf s305.tgz s305 && rm -rf s305
date -u
