#!/bin/sh
# stream-ordered growth (grow_async): ctest -L gpu (test_async_map's output kept); the conversation replay with
# every strategy; grow and grow_async alone, alternating x3; other KV shapes and traces with grow, grow_async
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
git log --oneline | head -1
B=$PWD/build-gpu
O=$OUT/s90; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
(cd $B && timeout 60 ctest -R async_map -V 2>&1 | grep -E "^[0-9]+: +(in flight|a synchronous|after the failed|amap_alloc|injected)|OK \]|FAILED|PASSED" | head -20)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("  requests", d.get("requests"), "format", d.get("format"))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s queued %s frames %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("grow_queued"), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 150 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? ($*)"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp warm $C --strategies realloc --requests 300
rp conv $C
for k in 1 2; do
  MOONBRIGHT_LOG=debug rp grow$k $C --strategies grow; grep -c "waited" $O/grow$k.err
  MOONBRIGHT_LOG=debug rp async$k $C --strategies grow_async; grep -c "waited" $O/async$k.err
done
date -u

rp tok320-b32 $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow,grow_async,cudaMallocAsync

rp mooncake .gpu/moon.jsonl --requests 0 --token-bytes 32K --strategies grow,grow_async,cudaMallocAsync
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
grep -h "failed\|error" $O/*.err | head -5
cd $OUT && tar czf s90.tgz s90 && rm -rf s90
date -u
