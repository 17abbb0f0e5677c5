#!/bin/bash
# Large ranges that take free frames on a full device (WARM_FULL_PER, the code of
# HEAD) against the code before (HEAD~1, in abold/): a process holds all of the GPU
# but 46 GiB, budget 200G, realloc and grow on the conversation replay, taking turns,
# a fresh daemon per run; the daemon's slowest grants after each. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s208; mkdir -p $O
B=$PWD/build-gpu; A=$PWD/abold/build-gpu
(cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j8 --target moonbrightd mbctl mbbench 2>&1 | grep -E "error|warning: ") &
(cd abold && cmake -S . -B $A -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $A -j8 --target moonbrightd mbctl mbbench 2>&1 | grep -E "error|warning: ") &
wait
date -u
python3 - > $O/hog.log 2>&1 <<'PY' &
import torch, time
free, total = torch.cuda.mem_get_info()
x = torch.empty(max(free - 46 * (1 << 30), 0), dtype=torch.uint8, device="cuda")
print("holding %.1f GiB of %.1f; free now %.1f GiB" % (x.numel() / 2**30, total / 2**30, torch.cuda.mem_get_info()[0] / 2**30), flush=True)
time.sleep(400)
PY
HOG=$!
for j in $(seq 1 120); do grep -q holding $O/hog.log && break; sleep 0.5; done; cat $O/hog.log
C=.gpu/azure_llm_conv_2023.csv
run() {
  RT=$(mktemp -d); MOONBRIGHT_LOG=info $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 200G >$O/$2.dlog 2>&1 & DP=$!
  j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $1/tools/mbbench replay $C --json --quiet --strategies realloc,grow > $O/$2.json 2>$O/$2.err; echo "$2 rc=$?"
  MOONBRIGHT_RUNTIME_DIR=$RT $1/tools/mbctl status --json > $O/$2.status.json 2>&1
  kill $DP; wait $DP
  python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']: print('  ', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'mean %.1f us'%(r.get('alloc_ns',{}).get('mean',0)/1e3), 'p99 %.1f us'%(r.get('alloc_ns',{}).get('p99',0)/1e3), 'max %.2f ms'%(r.get('alloc_ns',{}).get('max',0)/1e6), r.get('note','')[:120])
s=json.load(open(sys.argv[2])); print('   warm_full_grants', s.get('warm_full_grants'), 'released_device_full', s.get('released_device_full'))" $O/$2.json $O/$2.status.json
  echo "   slowest grants (ms): $(grep -o 'took [0-9.]* ms' $O/$2.dlog | awk '{print $2}' | sort -n | tail -4 | tr '\n' ' ')"
}
run $B new1; run $A old1; run $B new2; run $A old2
kill $HOG; wait $HOG
date -u
cd $OUT && tar czf s208.tgz s208 && rm -rf s208
