#!/bin/sh
# the final code of the stop (hook: CUDA graphs, record_stream, empty_cache; devices by UUID): ctest -L gpu, the hook under CUDA_VISIBLE_DEVICES=<uuid>, the goal set
# cudaMallocAsync, pairs, bench_vspace growth, GPT training through the hook (3 rounds).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s174; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $2 $3 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(" ".join("%s %.3f %.1fus p99 %.1f max %.2fms fr %s" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("peak_daemon_frames")) for r in d["strategies"]))
PY
}
(cd $B && timeout 300 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
# the hook with the GPU named by its UUID in CUDA_VISIBLE_DEVICES
U=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0); echo "uuid $U"
start $O/hook.dlog 8G
CUDA_VISIBLE_DEVICES=$U PYTHONPATH=client/python MOONBRIGHT_LIB=$B/client/libmbclient.so timeout 60 python3 - <<'PY' 2>&1 | tail -3
import moonbright_torch, torch
moonbright_torch.enable()
x = torch.ones(64 << 20, device="cuda:0")
y = (x * 3).sum().item()
print("hook under CUDA_VISIBLE_DEVICES=<uuid>: sum %.0f (expected %d)" % (y, 3 * (64 << 20)))
PY
$B/tools/mbctl --runtime-dir $RT tenants | head -4
kill $DP; wait $DP
start $O/conv.dlog 100G
timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err
echo "conv rc=$? $(vs $O/conv.json)"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -A4 "^CONFIG" $O/train.err | tail -3
kill $DP; wait $DP
echo "== goals"; python3 tools/goals.py $O/conv.json $O/latency.json $O/train.json $O/bench_vspace.txt
cd $OUT && tar czf s174.tgz s174 && rm -rf s174
date -u
