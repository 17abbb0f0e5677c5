#!/bin/bash
# realloc alone on the Mooncake-style trace (as s205), fb07694 and 210915f taking turns,
# three runs each, a fresh daemon per run. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s206; mkdir -p $O
B=$PWD/build-gpu; A=$PWD/abold/build-gpu
(cd $O && python3 $OLDPWD/tools/results/gpu-2026-12-07b/gen_traces.py)
run() {
  b=$1; t=$2
  RT=$(mktemp -d); MOONBRIGHT_LOG=info $b/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$t.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $b/tools/mbbench replay $O/moon.jsonl --requests 0 --token-bytes 32K --strategies realloc --json --quiet > $O/$t.json 2>$O/$t.err
  kill $DP; wait $DP
  python3 -c "
import json,sys
r=json.load(open(sys.argv[1]))['strategies'][0]; a=r['alloc_ns']
print('$t', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'mean %.1f us'%(a.get('mean',0)/1e3), 'max %.2f ms'%(a.get('max',0)/1e6), r.get('note','')[:120])" $O/$t.json
  echo "   client: $(grep -c 'moonbrightd refused' $O/$t.err) refusals, $(grep -c 'idle memory went back' $O/$t.err) trims"
}
for i in 1 2 3; do run $B new$i; run $A old$i; done
date -u
cd $OUT && tar czf s206.tgz s206 && rm -rf s206
