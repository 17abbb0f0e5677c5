#!/bin/bash
# Tails about to run out refilled before grow's background pass gives back
# (urgent.diff, tried and not kept): the conversation replay's grow strategy on
# the host backend with the H200's driver costs emulated, a 200 GiB device under a
# 100G budget, a fresh daemon per run. With urgent.diff applied,
# MOONBRIGHT_GROW_URGENT=0 runs the pass as before.
#   usage: urgent_ab.sh BUILD_DIR OUT.json URGENT(0|1)
B=$1; RT=$(mktemp -d)
MOONBRIGHT_HOST_MEMORY=200G MOONBRIGHT_HOST_COSTS=gpu $B/daemon/moonbrightd --foreground --backend host --runtime-dir $RT --budget 100G > $2.dlog 2>&1 &
DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
MOONBRIGHT_GROW_URGENT=$3 MOONBRIGHT_LOG=info MOONBRIGHT_HOST_COSTS=gpu MOONBRIGHT_RUNTIME_DIR=$RT timeout 300 \
  $B/tools/mbbench replay ${TRACE:-.gpu/azure_llm_conv_2023.csv} --json --quiet --strategies grow > $2 2>$2.err
kill $DP; wait $DP
python3 -c "
import json,sys;d=json.load(open(sys.argv[1]))
for r in d['strategies']:
  a=r['alloc_ns']
  print('urgent=$3', r['strategy'], 'r/l %.3f'%r['reserved_over_live'], 'mean %.1f us'%(a['mean']/1e3), 'p99 %.1f'%(a['p99']/1e3), 'max %.2f ms'%(a['max']/1e6), 'waits', r['driver_waits'], 'busy %.2f'%r['background_busy_s'])" $2
