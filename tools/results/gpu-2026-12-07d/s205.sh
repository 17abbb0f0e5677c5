#!/bin/bash
# The Mooncake-style trace (moon.jsonl from gpu-2026-12-07b/gen_traces.py, 32 KiB tokens,
# about 71 GiB live) on an H100 under a 100G budget, where the device fills below the
# budget (realloc stopped out of memory at 1.103 in s191/s194): the code of fb07694
# against 210915f (abold/), a fresh daemon per run; then the conversation replay twice
# more on fb07694. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s205; mkdir -p $O
B=$PWD/build-gpu; A=$PWD/abold/build-gpu
cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $O && python3 $OLDPWD/tools/results/gpu-2026-12-07b/gen_traces.py)
summ() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
  a=r.get('alloc_ns',{})
  print('  ', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'live %.1f GiB'%(r.get('peak_live_bytes',0)/2**30), 'mean %.1f us'%(a.get('mean',0)/1e3), 'p99 %.1f us'%(a.get('p99',0)/1e3), 'max %.2f ms'%(a.get('max',0)/1e6), r.get('note','')[:150])" $1; }
run() {  # build-dir tag trace-and-args...
  b=$1; t=$2; shift 2
  RT=$(mktemp -d); MOONBRIGHT_LOG=info $b/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$t.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $b/tools/mbbench replay "$@" --json --quiet > $O/$t.json 2>$O/$t.err; echo "$t rc=$?"
  kill $DP; wait $DP; summ $O/$t.json; echo "   slow refusals logged: $(grep -c 'refused after' $O/$t.dlog)"
}
run $B moon-new $O/moon.jsonl --requests 0 --token-bytes 32K --strategies realloc,grow,vspace,cudaMallocAsync
run $A moon-old $O/moon.jsonl --requests 0 --token-bytes 32K --strategies realloc,grow,vspace
date -u
run $B conv-a .gpu/azure_llm_conv_2023.csv --strategies realloc,grow,vspace,cudaMallocAsync
run $B conv-b .gpu/azure_llm_conv_2023.csv --strategies realloc,grow,vspace,cudaMallocAsync
date -u
cd $OUT && tar czf s205.tgz s205 && rm -rf s205
