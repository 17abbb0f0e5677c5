#!/bin/bash
# A device full below the budget, on the host backend with the H200's driver costs
# emulated: a 45 GiB device (MOONBRIGHT_HOST_MEMORY) under a 100G budget, the
# conversation replay (realloc, grow, vspace), a fresh daemon per run.
#   usage: full_device.sh BUILD_DIR OUT.json [STRATEGIES] [BUDGET] [DEVICE]
B=$1; RT=$(mktemp -d)
MOONBRIGHT_HOST_MEMORY=${5:-45G} MOONBRIGHT_HOST_COSTS=gpu $B/daemon/moonbrightd --foreground --backend host \
  --runtime-dir $RT --budget ${4:-100G} > $2.dlog 2>&1 &
DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
MOONBRIGHT_LOG=${LOGLV:-warn} MOONBRIGHT_HOST_COSTS=gpu MOONBRIGHT_RUNTIME_DIR=$RT timeout 300 $B/tools/mbbench replay \
  ${TRACE:-.gpu/azure_llm_conv_2023.csv} --json --quiet --strategies ${3:-realloc,grow,vspace} > $2 2>$2.err
echo "rc=$?"
kill $DP; wait $DP
python3 -c "
import json,sys;d=json.load(open(sys.argv[1]))
for r in d['strategies']:
  a=r['alloc_ns']
  print('  ', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'mean %.1f us'%(a['mean']/1e3), 'p99 %.1f us'%(a.get('p99',0)/1e3), 'max %.2f ms'%(a.get('max',0)/1e6), r.get('note','')[:160])" $2
echo "   refused grants the daemon logged as slow: $(grep -c 'refused after' $2.dlog)"
