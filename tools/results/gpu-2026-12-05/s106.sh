#!/bin/sh
# PyTorch training through the hook, 2 rounds; threads; two tenants near one budget
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
git log --oneline 2>/dev/null | head -1
B=$PWD/build-gpu
O=$OUT/s106; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 100 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -6; grep -i "error\|Traceback" $O/train.err | head -3
timeout 40 $B/tools/mbbench threads --threads 1,16 --pairs 20000 > $O/threads.txt 2>&1; echo "threads rc=$?"; tail -8 $O/threads.txt
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
# two tenants at once under one 88 GiB budget (live peaks 41.4 and 41.8 GiB), 3 rounds
C=.gpu/azure_llm_conv_2023.csv
for r in 1 2 3; do
  RT=$(mktemp -d)
  $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 88G >$O/two$r.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench replay $C --json --quiet --strategies grow > $O/two$r-a.json 2>$O/two$r-a.err & A=$!
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $B/tools/mbbench replay $C --json --quiet --strategies realloc > $O/two$r-b.json 2>$O/two$r-b.err & BP=$!
  wait $A; wait $BP
  $B/tools/mbctl --runtime-dir $RT metrics --json > $O/two$r-metrics.json 2>&1
  kill $DP; wait $DP
  python3 - $O/two$r-a.json $O/two$r-b.json $O/two$r-metrics.json <<'PY'
import json,sys
out=[]
for f in sys.argv[1:3]:
    try:
        for r in json.load(open(f))["strategies"]:
            if r["strategy"]=="cudaMallocAsync": continue
            out.append("%s ok=%s r/l %.3f max %.1f ms %s" % (r["strategy"], r["ok"], r.get("reserved_over_live",0), (r.get("alloc_max_after_first_ns") or 0)/1e6, r.get("note","")[:60]))
    except Exception as e: out.append("%s: %s" % (f, e))
try:
    m=json.load(open(sys.argv[3])); out.append("notices %s short %s timeouts %s ignored %s" % (m["reclaim_notices"], m["reclaim_short"], m["reclaim_timeouts"], m["reclaim_ignored"]))
except Exception as e: out.append("metrics: %s" % e)
print("  two: " + " | ".join(out))
PY
  grep -c "waits for" $O/two$r.dlog
done
cd $OUT && tar czf s106.tgz s106 && rm -rf s106
date -u
