#!/bin/bash
# A device full below the budget, on a GPU: a process holds all of the GPU's memory but
# HOLD_LEFT (default 46 GiB), the daemon's budget is above the device, and the
# conversation replay (realloc, grow, vspace) runs against the code of 1b6d96c (a grant
# refused on a full device keeps the free frames) and of 210915f (abold/, the code before
# it), taking turns, a fresh daemon per run. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s204; mkdir -p $O
B=$PWD/build-gpu; A=$PWD/abold/build-gpu
(cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j8 --target moonbrightd mbctl mbbench 2>&1 | grep -E "error|warning: ") &
(cd abold && cmake -S . -B $A -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $A -j8 --target moonbrightd mbctl mbbench 2>&1 | grep -E "error|warning: ") &
wait
date -u
python3 - > $O/hog.log 2>&1 <<'PY' &
import torch, time, os
free, total = torch.cuda.mem_get_info()
left = int(float(os.environ.get("HOLD_LEFT", "46")) * (1 << 30))
x = torch.empty(max(free - left, 0), dtype=torch.uint8, device="cuda")
print("holding %.1f GiB of %.1f; free now %.1f GiB" % (x.numel() / 2**30, total / 2**30, torch.cuda.mem_get_info()[0] / 2**30), flush=True)
time.sleep(560)
PY
HOG=$!
for j in $(seq 1 120); do grep -q holding $O/hog.log && break; sleep 0.5; done; cat $O/hog.log
C=.gpu/azure_llm_conv_2023.csv
run() {  # build-dir tag
  RT=$(mktemp -d); MOONBRIGHT_LOG=info $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 200G >$O/$2.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $1/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace > $O/$2.json 2>$O/$2.err; echo "$2 rc=$?"
  kill $DP; wait $DP
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']: print('  ', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'mean %.1f us'%(r.get('alloc_ns',{}).get('mean',0)/1e3), 'p99 %.1f us'%(r.get('alloc_ns',{}).get('p99',0)/1e3), 'max %.2f ms'%(r.get('alloc_ns',{}).get('max',0)/1e6), r.get('note','')[:160])" $O/$2.json
  grep -c "refused after" $O/$2.dlog
}
run $B new1; run $A old1; run $B new2; run $A old2
kill $HOG; wait $HOG
date -u
cd $OUT && tar czf s204.tgz s204 && rm -rf s204
