#!/bin/bash
# The latest code on the workloads other than the conversation trace, last measured on
# 2026-12-04 (H200, s83.sh): other KV shapes and traces (every strategy and cudaMallocAsync
# in one run per row), AlexNet's lifetimes, threads, ResNet-style and GPT training and GPT
# generation through the PyTorch hook. One fresh moonbrightd --budget 100G. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
git log --oneline 2>/dev/null | head -1
O=$OUT/s191; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $O && python3 $OLDPWD/tools/results/gpu-2026-12-07b/gen_traces.py)
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    f=lambda v: "%.1f"%(v/1e3) if v is not None else "-"
    print("  %-16s ok %-5s r/l %.3f live %.2f GiB waits %s frames %s desc %s mean %s p99 %s max>1st %s us %s" % (r.get("strategy"), r.get("ok"), r.get("reserved_over_live",0), r.get("peak_live_bytes",0)/2**30, r.get("driver_waits"), r.get("peak_daemon_frames"), r.get("peak_daemon_descriptors"), f(a.get("mean")), f(a.get("p99")), f(r.get("alloc_max_after_first_ns")), r.get("note","")))
PY
}
RT=$(mktemp -d)
MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
rp() { n=$1; t=$2; shift 2; timeout 100 $B/tools/mbbench replay $t --json --quiet "$@" > $O/$n.json 2>$O/$n.err; echo "$n rc=$? ($*)"; summ $O/$n.json; }
C=.gpu/azure_llm_conv_2023.csv
rp tok16-b1 $C --token-bytes 16K --block-tokens 1 --requests 2000
rp tok48-b7 $C --token-bytes 48K --block-tokens 7 --requests 2000
rp tok320-b32 $C --token-bytes 320K --block-tokens 32 --requests 1200
rp conv-c32 $C --compression 32 --requests 600
rp burst $O/burst.csv --requests 0
rp mooncake $O/moon.jsonl --requests 0 --token-bytes 32K
rp alexnet-50 tests/data/alexnet_train_lifetimes.log --iterations 50 --strategies realloc,cudaMallocAsync
date -u
timeout 40 $B/tools/mbbench threads --threads 1,4,16 --pairs 20000 --json > $O/threads.json 2>$O/threads.err; echo "threads rc=$?"
python3 - $O/threads.json <<'PY2'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    print("%3d %-34s %8.2f M/s %s" % (r["threads"], r["calls"], r["pairs_per_s"]/1e6, "" if r["ok"] else r.get("error")))
print("stream destruction", d["stream_destruction"])
PY2
$B/tools/mbctl status > $O/status.txt 2>&1; grep -E "^frames|^handles" $O/status.txt
T="python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright"
timeout 120 $T train --model cnn --rounds 2 > $O/cnn.json 2>$O/cnn.err; echo "cnn rc=$?"; python3 tools/goals.py $O/cnn.json 2>&1 | tail -6
timeout 100 $T generate --rounds 2 > $O/gen.json 2>$O/gen.err; echo "generate rc=$?"
tail -12 $O/cnn.err; tail -12 $O/gen.err
kill $DP; wait $DP
grep -ci "error\|warn" $O/daemon.log; grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s191.tgz s191 && rm -rf s191
date -u
