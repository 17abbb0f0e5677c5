#!/bin/sh
# grow on the conversation trace, 47c6996's code (.gpu/old.tgz, git archive) against the
# latest (spares by the rise of the bytes in use), in turn, three rounds; each run on a
# fresh daemon of its own build.
# Not run: too little device time was left to start a machine (16:58 UTC).
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/old && tar xzf .gpu/old.tgz -C /tmp/old
for d in $PWD /tmp/old; do cmake -S $d -B $d/build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $d/build-gpu -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "; done
g() { RT=$(mktemp -d); $1/build-gpu/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 $1/build-gpu/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies grow,cudaMallocAsync > $OUT/$2.json 2>/dev/null
kill $DP; wait $DP
python3 - $OUT/$2.json $2 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(sys.argv[2], " ".join("%s %.3f %.1fus max %.2fms waits %s" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["max"]/1e6, r.get("driver_waits")) for r in d["strategies"]))
PY
}
for k in 1 2 3; do g /tmp/old old$k; g $PWD new$k; done
date -u
