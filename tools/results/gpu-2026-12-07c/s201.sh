#!/bin/bash
# Growable ranges: a freed range is passed over whenever its frames would keep more than
# one tail past the new owner's size (the working tree), against 1308c28 (abold/), where
# that held near the budget only. One fresh moonbrightd --budget 100G per run, the two
# builds in turn: the conversation replay x8 (grow, cudaMallocAsync) twice each, then at
# compression 32 (600 requests) once each. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s201; mkdir -p $O
for v in new old; do
  S=$PWD; [ $v = old ] && S=$PWD/abold
  cmake -S $S -B $PWD/build-$v -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $PWD/build-$v -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
done
C=.gpu/azure_llm_conv_2023.csv
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{}); p=r.get("at_peak") or {}
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f ahead %.2f idle %.2f cached %.2f GiB waits %s passes %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), p.get("grow_ahead",0)/2**30, p.get("idle",0)/2**30, p.get("cached",0)/2**30, r.get("driver_waits"), r.get("close_passes", r.get("near_passes")), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
run() { v=$1; n=$2; shift 2; B=$PWD/build-$v; RT=$(mktemp -d)
  MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/$n.dlog 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench replay $C --json --quiet --strategies grow,cudaMallocAsync "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? $(date -u +%T)"
  kill $DP; wait $DP; summ $O/$n.json; }
run new x8-new-1; run old x8-old-1; run new x8-new-2; run old x8-old-2
run new c32-new --compression 32 --requests 600; run old c32-old --compression 32 --requests 600
cd $OUT && tar czf s201.tgz s201 && rm -rf s201
date -u
