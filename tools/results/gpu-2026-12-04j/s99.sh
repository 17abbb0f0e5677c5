#!/bin/sh
# grow_async frees no longer wait for the mapper (the range goes idle with its jobs' record, same-stream
# reuse takes it): ctest -L gpu; conversation replay grow, grow_async, cudaMallocAsync x3; 320 KiB tokens
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
O=$OUT/s99; mkdir -p $O
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
(cd $B && timeout 60 ctest -R async_map -V 2>&1 | grep -E "freed |FAILED|PASSED|OK " | head -12)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{}); fr=r.get("free_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f frames %s alloc mean %s p99 %s max>1st %s us; free mean %s p99 %s max %s us; total %.2f s %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), f(fr.get("mean")), f(fr.get("p99")), f(fr.get("max")), r.get("total_s") or 0, r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 150 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$?"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp warm $C --strategies realloc --requests 300
rp conv1 $C --strategies grow,grow_async,cudaMallocAsync
rp conv2 $C --strategies grow_async,grow,cudaMallocAsync
rp conv3 $C --strategies grow,grow_async,cudaMallocAsync
rp tok320 $C --token-bytes 320K --block-tokens 32 --requests 1200 --strategies grow,grow_async
rp tok48 $C --token-bytes 48K --block-tokens 7 --requests 2000 --strategies grow,grow_async
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s99.tgz s99 && rm -rf s99
date -u
