#!/bin/sh
# grow alone: a request's frame take maps at most SCR_TAKE cached frames (the rest granted in the plan's
# large frames) against the code (64), a scratch build (.gpu/scr, not kept), 3 rounds in turn, fresh daemon each
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s129; mkdir -p $O
B=$PWD/build-scr
cmake -S .gpu/scr -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbclient mbbench 2>&1 | grep -E "error|warning: "
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-10s r/l %.3f frames %s waits %s reqs %s mean %s p99 %s max>1st %s us" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), r.get("daemon_requests"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns"))))
PY
}
C=.gpu/azure_llm_conv_2023.csv
for r in 1 2 3; do for t in 64 16 8; do
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/t$t-$r.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  SCR_TAKE=$t MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 $B/tools/mbbench replay $C --json --quiet --slow-us 2000 --strategies grow > $O/t$t-$r.json 2>$O/t$t-$r.err
  echo "take $t round $r rc=$?"; summ $O/t$t-$r.json
  echo "  ops over 2 ms $(grep -o 'waited [0-9.]*' $O/t$t-$r.err | awk '$2>2' | wc -l), over 3 ms $(grep -o 'waited [0-9.]*' $O/t$t-$r.err | awk '$2>3' | wc -l)"
  grep -o "waited [0-9.]*.*" $O/t$t-$r.err | sort -k2 -rn | head -2 | cut -c1-200
  kill $DP; wait $DP
done; done
cd $OUT && tar czf s129.tgz s129 && rm -rf s129
date -u
