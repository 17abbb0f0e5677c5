#!/bin/bash
# The device's headroom (free frames leave 1 GiB of the device free; a client
# whose context finds no room tries again for 2 s) on an H100, where a 100G
# budget fills the device: ctest -L gpu; the Mooncake-style trace (s191's
# vspace could not open a session after grow_async filled the device); the
# goal set (conversation replay, pairs, bench_vspace) against s190's. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s192; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 240 ctest -L gpu > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|Test +#" $O/ctest.log | head -20
(cd $O && python3 $OLDPWD/tools/results/gpu-2026-12-07b/gen_traces.py)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s frames %s desc %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("peak_daemon_frames"), r.get("peak_daemon_descriptors"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
start $O/moon.dlog
timeout 150 $B/tools/mbbench replay $O/moon.jsonl --json --quiet --requests 0 --token-bytes 32K > $O/mooncake.json 2>$O/mooncake.err; echo "mooncake rc=$?"; summ $O/mooncake.json
grep -v "^mbbench replay: \(realloc\|grow_async\): stopped" $O/mooncake.err | head -8
$B/tools/mbctl status > $O/moon-status.txt 2>&1; grep -E "^frames|^reserve" $O/moon-status.txt
kill $DP; wait $DP
date -u
start $O/conv.dlog
timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"; summ $O/conv.json
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
$B/tools/mbctl status > $O/status.txt 2>&1; grep -E "^frames|^handles|^reserve" $O/status.txt
kill $DP; wait $DP
python3 tools/goals.py $O/conv.json $O/latency.json $O/bench_vspace.txt
cd $OUT && tar czf s192.tgz s192 && rm -rf s192
date -u
