#!/bin/sh
# s180.sh cut to what the changes since 47c6996 touch, for a short device budget: ctest -L gpu
# (the PyTorch tests' shared start; torch_compile with graph trees off as well), the
# conversation replay (realloc, grow, vspace, cudaMallocAsync) and the light load (vspace,
# grow: spares by the rise of the bytes in use, page-pool extents from one unit).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s181; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("; ".join("%s %.3f %.1fus p99 %.1f max %.2fms waits %s fr %s reserved %d MiB" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("driver_waits"), r.get("peak_daemon_frames"), r["peak_reserved_bytes"]>>20) for r in d["strategies"]))
PY
}
(cd $B && timeout 200 ctest -L gpu -V > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "^[0-9]+: (torch.compile|[0-9]+-byte|40 recorded|12 replays|20 graphs)|tests passed|Failed|\*\*\*" $O/ctest.log | head -24
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/d.log 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 40 $B/tools/mbbench replay .gpu/tiny.csv --requests 0 --json --quiet --strategies vspace,grow,cudaMallocAsync > $O/tiny.json 2>$O/tiny.err; echo "tiny rc=$? $(vs $O/tiny.json)"
timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv.json 2>$O/conv.err
echo "conv rc=$? $(vs $O/conv.json)"
kill $DP; wait $DP
cd $OUT && tar czf s181.tgz s181 && rm -rf s181
date -u
