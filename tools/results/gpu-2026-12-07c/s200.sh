#!/bin/bash
# The latest code (6d5e0ee: freed growable ranges passed over whenever they would strand
# memory; the daemon's connection caps; the client's races fixed) on a GPU: ctest -L gpu whole; the goal set (conversation
# replay: realloc, grow, vspace, cudaMallocAsync; the pairs; bench_vspace growth;
# goals.py); three tenants replaying at once on one daemon, one of them killed
# (SIGKILL) mid-run, the daemon's books read after; mbbench threads up to 64.
# Run with bash. (Ran at 12:33-12:43 UTC on an H100: its bare `wait` after the tenants
# waited for the daemon too, so the call ran out of time there; what came back is in
# s200.tgz. s202.sh runs the rest.)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s200; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 220 ctest -L gpu > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*" $O/ctest.log | head -20
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${2:-100G} >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
$B/tools/mbctl status > $O/status.txt 2>&1
grep -E "^frames|^handles" $O/status.txt
kill $DP; wait $DP
python3 $W - $O/conv.json
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
date -u
# Three tenants at once under a 60G budget; the third killed 6 s in.
start $O/tenants.dlog 60G
for s in realloc vspace grow; do timeout 150 $B/tools/mbbench replay $C --json --quiet --requests 2000 --strategies $s > $O/t-$s.json 2>$O/t-$s.err & eval P_$s=$!; done
sleep 6; $B/tools/mbctl tenants > $O/t-tenants-mid.txt 2>&1; pkill -9 -P $P_grow; wait $P_realloc $P_vspace $P_grow
sleep 1; $B/tools/mbctl status > $O/t-status.txt 2>&1; $B/tools/mbctl status --json > $O/t-status.json 2>&1
head -8 $O/t-status.txt; cat $O/t-tenants-mid.txt
for s in realloc vspace grow; do echo "== $s"; tail -2 $O/t-$s.err; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']: print('  ', r['strategy'], 'ok', r.get('ok'), 'r/l %.3f'%r.get('reserved_over_live',0), 'mean %.1f us'%(r.get('alloc_ns',{}).get('mean',0)/1e3), r.get('note',''))" $O/t-$s.json 2>&1 | tail -3; done
nvidia-smi --query-gpu=memory.used --format=csv,noheader
kill $DP; wait $DP; echo "daemon rc=$?"
grep -i "error\|warn\|reclaimed" $O/tenants.dlog | head -8
date -u
start $O/threads.dlog
timeout 60 $B/tools/mbbench threads --threads 1,16,64 --pairs 20000 --json > $O/threads.json 2>$O/threads.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
kill $DP; wait $DP
cd $OUT && tar czf s200.tgz s200 && rm -rf s200
date -u
