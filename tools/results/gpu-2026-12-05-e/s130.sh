#!/bin/sh
# the reserve makes room for all it lacks of an order on a full device (169fa09) against de72c81, in turn, 2 rounds: the conversation
# replay, realloc, grow, grow_async, vspace back to back on one daemon under --budget 100G (above an H100's
# memory); frames made on grant paths, the workers' failed creates, vspace's and grow's slowest operations
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
O=$OUT/s130; mkdir -p $O
NEW=$PWD/build-gpu; BASE=$PWD/build-base
(cmake -S .gpu/basesrc -B $BASE -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $BASE -j8 --target moonbrightd mbclient mbbench 2>&1 | grep -E "error|warning: ") &
cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 --target moonbrightd mbclient mbbench mbctl 2>&1 | grep -E "error|warning: "
wait
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-12s r/l %.3f frames %s fds %s creates %s waits %s mean %s p99 %s max>1st %s us" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("peak_daemon_descriptors"), r.get("daemon_grant_creates"), r.get("driver_waits"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns"))))
PY
}
C=.gpu/azure_llm_conv_2023.csv
for r in 1 2; do for v in base new; do
  B=$NEW; [ $v = base ] && B=$BASE
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G --log-level debug >$O/$v$r.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT timeout 150 $B/tools/mbbench replay $C --json --quiet --slow-us 2000 --strategies realloc,grow,grow_async,vspace > $O/$v$r.json 2>$O/$v$r.err
  echo "$v $r rc=$?"; summ $O/$v$r.json
  echo "  failed creates in the reserve: $(grep -c 'failed to add a frame' $O/$v$r.dlog); room made: $(grep -c "for the reserve.s order" $O/$v$r.dlog); grants over 1 ms $(grep -c ' took ' $O/$v$r.dlog); slow ops $(grep -c waited $O/$v$r.err)"
  grep -o "waited [0-9.]*.*" $O/$v$r.err | sort -k2 -rn | head -2 | cut -c1-220
  kill $DP; wait $DP
done; done
cd $OUT && tar czf s130.tgz s130 && rm -rf s130
date -u
