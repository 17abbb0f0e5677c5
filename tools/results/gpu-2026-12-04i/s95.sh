#!/bin/sh
# the final code: ctest -L gpu; grow_async on the conversation trace, then the daemon's tenants view (grow_queued)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
O=$OUT/s95; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
C=.gpu/azure_llm_conv_2023.csv
timeout 150 $B/tools/mbbench replay $C --json --quiet --strategies grow_async --requests 1500 > $O/r.json 2>$O/r.err & RP=$!
while kill -0 $RP 2>/dev/null; do $B/tools/mbctl --runtime-dir $RT tenants --json >> $O/tenants.jsonl 2>/dev/null; sleep 0.3; done
wait $RP; echo "replay rc=$?"
python3 - $O <<'PY'
import json,sys
O=sys.argv[1]
d=json.load(open(O+'/r.json'))
for r in d['strategies']: print(r['strategy'], r['ok'], round(r['reserved_over_live'],3), 'queued', r['grow_queued'], 'waits', r['driver_waits'], 'mean', round(r['alloc_ns']['mean']/1e3,1))
best=None
for line in open(O+'/tenants.jsonl'):
    try: j=json.loads(line)
    except Exception: continue
    for t in j['tenants']:
        if t['name']=='mbbench-replay' and (best is None or t['grow_queued']>best['grow_queued']): best=t
print('mbctl tenants, the largest grow_queued seen:', best and {k: best[k] for k in ('sessions','grow_queued','grow_waits','refill_waits')})
PY
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s95.tgz s95 && rm -rf s95
date -u
