#!/bin/bash
# The device's headroom on or off (--device-headroom 0), the conversation
# replay (realloc, grow, vspace, cudaMallocAsync) twice each, alternating, on
# one H100 right after s192. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s193; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f waits %s frames %s desc %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("driver_waits"), r.get("peak_daemon_frames"), r.get("peak_daemon_descriptors"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
for k in 1 2; do for h in 0 1G; do
RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --device-headroom $h >$O/d-$h-$k.log 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 120 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies realloc,grow,vspace,cudaMallocAsync > $O/conv-$h-$k.json 2>$O/conv-$h-$k.err; echo "headroom $h run $k rc=$?"; summ $O/conv-$h-$k.json
$B/tools/mbctl status | grep -E "^reserve"
kill $DP; wait $DP
done; done
cd $OUT && tar czf s193.tgz s193 && rm -rf s193
date -u
