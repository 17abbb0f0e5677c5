#!/bin/sh
# the code of this stop (page pool extents take the daemon's free frames of other sizes) on whichever card
# comes: ctest -L gpu; the conversation replay twice (every strategy, cudaMallocAsync in the same run,
# a fresh daemon each); the long-context trace; 64 MiB and 1 GiB pairs; map_async of 1024 pages; GPT
# training through the hook, 3 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s149; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %s r/l %.3f frames %s fds %s waits %s mean %s p50 %s p99 %s max %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("peak_daemon_descriptors"), r.get("driver_waits"), f(a.get("mean")), f(a.get("p50")), f(a.get("p99")), f(a.get("max")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:80]))
PY
}
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget ${2:-100G} >$1 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
C=.gpu/azure_llm_conv_2023.csv; L=tools/results/gpu-2026-12-04b/long.jsonl
for r in 1 2; do
start $O/conv$r.dlog
timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv$r.json 2>$O/conv$r.err
echo "conv$r rc=$?"; summ $O/conv$r.json
$B/tools/mbctl status | grep -E "handles|reserve"
kill $DP; wait $DP
done
start $O/long.dlog 120G
timeout 150 $B/tools/mbbench replay $L --requests 0 --token-bytes 32K --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/long.json 2>$O/long.err
echo "long rc=$?"; summ $O/long.json
kill $DP; wait $DP
start $O/lat.dlog
timeout 60 $B/tools/mbbench latency --pairs 2000 --sizes 64M,1G > $O/latency.txt 2>&1; echo "latency rc=$?"; grep -E "64 MiB|1 GiB|64M|1G" $O/latency.txt | head -12
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1
echo "bench_vspace rc=$?"; grep -E "^\| (64|2048) KiB \| 1024 \|" $O/bench_vspace.txt | head -4
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -10
kill $DP; wait $DP
echo "== goals"; python3 tools/goals.py $O/conv1.json $O/latency.json $O/train.json $O/bench_vspace.txt; echo "== conv2"; python3 tools/goals.py $O/conv2.json
cd $OUT && tar czf s149.tgz s149 && rm -rf s149
date -u
