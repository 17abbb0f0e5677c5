#!/bin/sh
# grow on fresh daemons, 2 rounds, the slow-grant line now with the warm plan's page faults and preemptions (slots touched ahead, no broadcast when nothing adopted);
# then GPT training 2 rounds: default, PyTorch's cudaMallocAsync, the same behind the pluggable interface (ensure_ctx fix), MoonBright
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s119; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 --target moonbrightd mbclient mbbench mbtorchpass 2>&1 | grep -E "error|warning: "
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s waits %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:90]))
PY
}
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=1000 $NEW/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$1 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
for r in 1 2; do
  start $O/g$r.dlog
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 120 $NEW/tools/mbbench replay $C --json --quiet --strategies grow > $O/g$r.json 2>$O/g$r.err
  echo "g $r rc=$?"; summ $O/g$r.json
  echo "  slow grants: $(grep -c took $O/g$r.dlog)"
  grep took $O/g$r.dlog | sed 's/.*took \([0-9.]*\) ms.*warm plan \([0-9.]*\) ms (\([0-9]*\) page faults, \([0-9]*\) preemptions); \([0-9.]*\) ms waiting.*adopt \([0-9]*\).*: \([0-9]*\) created.*/took \1 plan \2 pf \3 pre \4 lockw \5 adopt \6 created \7/' | sort -k2 -rn | head -12
  grep -c "waited" $O/g$r.err
  kill $DP; wait $DP
done
start $O/train.dlog
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 240 python3 tools/bench_torch.py --json --mb-lib $NEW/client/libmbclient.so --child-timeout 40 --pass-lib $NEW/tools/libmbtorchpass.so --configs torch-default,torch-cudaMallocAsync,torch-pluggable-cudaMallocAsync,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -14
kill $DP; wait $DP
cd $OUT && tar czf s119.tgz s119 && rm -rf s119
date -u
