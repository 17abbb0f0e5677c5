#!/bin/sh
# the device full below the budget: conv replay, every strategy, budget above the device's memory (H100: 100G; H200: 200G);
# short: the descriptor table grown ahead (grow on fresh daemons, 2 rounds each way), then the device full below the budget; on an H200 also the exact plans near the budget (t320, 100G), cf19b13 (.gpu/basesrc) and new in turn, 2 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s112; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1); echo "device memory $MEM MiB"
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s waits %s path-creates %s/%s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), r.get("daemon_grant_creates"), r.get("daemon_requests"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:90]))
PY
}
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=1000 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget $3 >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
for r in 1 2; do
  ST=grow; [ $r = 1 ] && ST=grow,grow_async,cudaMallocAsync
  start $NEW $O/g$r.dlog 100G
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $NEW/tools/mbbench replay $C --json --quiet --strategies $ST > $O/g$r.json 2>$O/g$r.err
  echo "g $r rc=$?"; summ $O/g$r.json
  grep took $O/g$r.dlog | awk '{for(i=1;i<=NF;i++) if($i=="took") print $(i+1), $0}' | sort -rn | head -4 | cut -c1-420
  grep -c "since it arrived" $O/g$r.dlog
  grep -o "waited [0-9.]*.*" $O/g$r.err | sort -k2 -rn | head -6
  grep -c "waited" $O/g$r.err
  kill $DP; wait $DP
done
cd $OUT && tar czf s116.tgz s112 && rm -rf s112
date -u
