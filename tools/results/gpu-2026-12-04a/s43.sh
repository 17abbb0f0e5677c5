#!/bin/sh
# page pools wait for the extent in flight: ctest -L gpu, vspace replay twice (own daemon each)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*" | tail -5)
for r in 1 2 3; do
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies vspace --json --quiet > $OUT/vspace$r.json 2>/tmp/v.err; echo "rc=$?"
python3 - $OUT/vspace$r.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(r.get("strategy"), "r/l=%.3f"%r.get("reserved_over_live",0), "waits",r.get("driver_waits"), "frames",r.get("peak_daemon_frames"), "mean %.2f p99 %.1f max %.0f"%(a.get("mean")/1e3, a.get("p99")/1e3, a.get("max")/1e3))
PY
kill $DP; wait $DP
done
date -u
