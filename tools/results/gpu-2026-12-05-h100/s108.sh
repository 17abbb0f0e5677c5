#!/bin/sh
# the warm reserve that follows each grant: grow on a fresh daemon, old daemon (5931f78's reserve) and new in turn,
# 3 rounds, both with this client; then the conversation replay, every strategy; GPT training 3 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s108; mkdir -p $O
NEW=$PWD/build-gpu; OLD=$PWD/build-old
cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
cmake -S .gpu/oldsrc -B $OLD -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $OLD -j16 --target moonbrightd 2>&1 | grep -E "error|warning: "
(cd $NEW && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s r/l %.3f frames %s waits %s path-creates %s/%s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), r.get("driver_waits"), r.get("daemon_grant_creates"), r.get("daemon_requests"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")[:50]))
PY
}
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHTD_SLOW_GRANT_US=1000 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$2 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; }
for r in 1 2 3; do for v in new old; do
  D=$NEW; [ $v = old ] && D=$OLD
  start $D $O/$v$r.dlog
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 40 $NEW/tools/mbbench replay $C --json --quiet --strategies grow > $O/$v$r.json 2>$O/$v$r.err
  echo "$v $r rc=$? slow grants with a frame made on the path: $(grep -c 'created on the path' $O/$v$r.dlog) (export > 1 ms: $(grep -o 'export [0-9.]*' $O/$v$r.dlog | awk '$2 > 1' | wc -l))"; summ $O/$v$r.json
  kill $DP; wait $DP
done; done
start $NEW $O/conv.dlog
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 60 $NEW/tools/mbbench replay $C --json --quiet --strategies realloc --requests 300 > $O/warm.json 2>$O/warm.err
timeout 90 $NEW/tools/mbbench replay $C --json --quiet > $O/conv.json 2>$O/conv.err; echo "conv rc=$?"; summ $O/conv.json
echo "slow path grants: $(grep -c 'created on the path' $O/conv.dlog)"
timeout 200 python3 tools/bench_torch.py --json --mb-lib $NEW/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -6
kill $DP; wait $DP
cd $OUT && tar czf s108.tgz s108 && rm -rf s108
date -u
