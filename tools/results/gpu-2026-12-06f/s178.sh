#!/bin/sh
# 1. torch_streams.c without a host wait (169398e): ctest -L gpu, with the new
#    gpu_torch_compile (torch.compile mode="reduce-overhead" through the hook).
# 2. mb_vspace_map_async: bench_vspace growth with the backend's event pool
#    off (MOONBRIGHT_EVENT_POOL=0) and on.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 40G >$OUT/d.log 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
echo "event pool off:"; MOONBRIGHT_EVENT_POOL=0 timeout 60 $B/tools/bench_vspace growth 2>&1 | grep -E "^\| (64|2048) KiB"
echo "event pool on:"; timeout 60 $B/tools/bench_vspace growth 2>&1 | grep -E "^\| (64|2048) KiB"
kill $DP; wait $DP
# 3. page pools sized by the rise of the pages held (064b70d): vspace on the conversation trace
#    and on a light load (tools/results/host-2026-12-06f/tiny_trace.py), cudaMallocAsync beside.
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$OUT/d2.log 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r["alloc_ns"]; print("%s %.3f mean %.1fus p99 %.1f max %.2fms waits %s reserved %d MiB free pages at the peak %d MiB" % (r["strategy"], r["reserved_over_live"], a["mean"]/1e3, a["p99"]/1e3, a["max"]/1e6, r.get("driver_waits"), r["peak_reserved_bytes"]>>20, r.get("at_peak", {}).get("vspace_free", 0)>>20))
PY
}
timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies vspace,cudaMallocAsync > $OUT/conv.json 2>$OUT/conv.err; echo "conv rc=$?"; vs $OUT/conv.json
timeout 60 $B/tools/mbbench replay .gpu/tiny.csv --requests 0 --json --quiet --strategies vspace,cudaMallocAsync > $OUT/tiny.json 2>$OUT/tiny.err; echo "tiny rc=$?"; vs $OUT/tiny.json
kill $DP; wait $DP
(cd $B && timeout 300 ctest -L gpu -V > $OUT/ctest.log 2>&1)
grep -E "^[0-9]+: ([0-9]+-byte|40 recorded|tenant|12 replays|20 graphs|[0-9]+ compiled|SKIP|PASS|FAIL|Traceback)|tests passed|Test +#" $OUT/ctest.log
grep -qE "gpu_torch_compile .*Passed" $OUT/ctest.log || grep -E "^[0-9]+: " $OUT/ctest.log | grep -iE "error|exception|torch_compile" | tail -8
date -u
