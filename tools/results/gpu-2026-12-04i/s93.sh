#!/bin/sh
# the code of growth in stream order: ctest -L gpu; the conversation replay (every strategy); other KV
# shapes and traces; AlexNet; pairs; GPT training through the hook; threads
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
git log --oneline | head -1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
O=$OUT/s93; mkdir -p $O
(cd $B && timeout 150 ctest -L gpu > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("  requests", d.get("requests"), "format", d.get("format"))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s frames %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("peak_daemon_frames"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 150 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? ($*)"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp warm $C --strategies realloc --requests 300
rp conv $C
rp tok16-b1 $C --token-bytes 16K --block-tokens 1 --requests 2000
rp tok48-b7 $C --token-bytes 48K --block-tokens 7 --requests 2000
rp tok320-b32 $C --token-bytes 320K --block-tokens 32 --requests 1200
rp conv-c32 $C --compression 32 --requests 600
rp burst .gpu/burst.csv --requests 0
rp mooncake .gpu/moon.jsonl --requests 0 --token-bytes 32K
rp alexnet-50 tests/data/alexnet_train_lifetimes.log --iterations 50 --strategies realloc,cudaMallocAsync
timeout 60 $B/tools/mbbench latency --sizes 64M,1G --pairs 2000 2>&1 | tail -12
date -u
timeout 200 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -4; grep -i "error\|Traceback" $O/train.err | head -3
timeout 40 $B/tools/mbbench threads --threads 1,16 --pairs 20000 --json > $O/threads.json 2>$O/threads.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
kill $DP; wait $DP
echo "daemon: grants over 10 ms by session (session count max_ms)"
grep "took" $O/daemon.log | awk '{for(i=1;i<=NF;i++){ if($i=="session") s=$(i+1); if($i=="took") t=$(i+1)}; if (t>10) {n[s]++; if(t>m[s]) m[s]=t}} END {for(k in n) print k, n[k], m[k]}' | sort -n
grep "took" $O/daemon.log | awk '{for(i=1;i<=NF;i++) if($i=="took") print $(i+1), $0}' | sort -n | tail -3 | cut -c1-330
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s93.tgz s93 && rm -rf s93
date -u
