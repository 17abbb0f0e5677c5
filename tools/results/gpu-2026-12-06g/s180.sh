#!/bin/sh
# The code after bc3d978 (spare growable ranges by the rise of the bytes in use, page-pool
# extents from one unit; the PyTorch tests' shared start) on the kind asked for (H200):
# ctest -L gpu with torch_compile trying reduce-overhead with graph trees off; the goal set
# (conversation replay, pairs, bench_vspace growth, GPT training through the hook, 2 rounds);
# vspace and grow on the light load. Not run: no machine could be started (15:28-16:46 UTC).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s180; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $2 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("; ".join("%s %.3f %.1fus p99 %.1f max %.2fms waits %s fr %s reserved %d MiB" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("driver_waits"), r.get("peak_daemon_frames"), r["peak_reserved_bytes"]>>20) for r in d["strategies"]))
PY
}
(cd $B && timeout 400 ctest -L gpu -V > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "^[0-9]+: (torch.compile|[0-9]+-byte|40 recorded|12 replays|20 graphs)|tests passed|Failed|\*\*\*" $O/ctest.log | head -30
start $O/conv.dlog 100G
timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err
echo "conv rc=$? $(vs $O/conv.json)"
timeout 60 $B/tools/mbbench replay .gpu/tiny.csv --requests 0 --json --quiet --strategies vspace,grow,cudaMallocAsync > $O/tiny.json 2>$O/tiny.err; echo "tiny rc=$? $(vs $O/tiny.json)"
timeout 60 $B/tools/mbbench latency --json --quiet --pairs 2000 --sizes 64M,1G > $O/latency.json 2>/dev/null; echo "latency rc=$?"
timeout 40 $B/tools/bench_vspace growth > $O/bench_vspace.txt 2>&1; echo "bench_vspace rc=$?"; grep -E "^\| (64|2048) KiB \| 1024 " $O/bench_vspace.txt
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -A4 "^CONFIG" $O/train.err | tail -3
kill $DP; wait $DP
echo "== goals"; python3 tools/goals.py $O/conv.json $O/latency.json $O/train.json $O/bench_vspace.txt
cd $OUT && tar czf s180.tgz s180 && rm -rf s180
date -u
