#!/bin/sh
# the final code (grow: give back first, urgent tails first, 16 a pass): ctest -L gpu; full replay; AlexNet; generation trace; pairs; trims; grow alone
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 120 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*")
date -u
O=$OUT
summ() {
python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d["strategies"]:
    a=r.get("alloc_ns",{})
    print(" ", r.get("strategy"), "ok",r.get("ok"), "r/l=%.3f"%r.get("reserved_over_live",0), "live GiB %.2f"%(r.get("peak_live_bytes",0)/2**30), "waits",r.get("driver_waits"), "frames",r.get("peak_daemon_frames"), "mean",a.get("mean"), "p99",a.get("p99"),"max",a.get("max"), "max>1st", r.get("alloc_max_after_first_ns"), "heap", r.get("heap"))
PY
}
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 150 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies realloc,grow,vspace,cudaMallocAsync --json --quiet > $O/conv.json 2>/tmp/e1; echo "conv rc=$?"; tail -2 /tmp/e1; summ $O/conv.json
timeout 40 $B/tools/mbbench replay tests/data/alexnet_train_lifetimes.log --iterations 50 --strategies realloc,cudaMallocAsync --json --quiet > $O/alexnet-50.json 2>/tmp/e2; echo "alexnet rc=$?"; summ $O/alexnet-50.json
timeout 90 $B/tools/mbbench replay .gpu/generate-lifetimes.log --iterations 3 --daemon-every 100 --strategies realloc,cudaMallocAsync --json --quiet > $O/gen-trace.json 2>/tmp/e3; echo "gen trace rc=$?"; summ $O/gen-trace.json
timeout 60 $B/tools/mbbench latency --sizes 64M,1G --pairs 2000 2>&1 | tail -12
timeout 150 $B/tools/mbbench trims --quiet --keep-cycles 1000 > $O/trims-long.txt 2>&1; echo "trims long rc=$?"; tail -6 $O/trims-long.txt
MOONBRIGHT_LOG=info timeout 60 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --strategies grow --json --quiet > $O/grow.json 2>$O/grow.err; echo "grow alone rc=$?"; summ $O/grow.json; grep growable $O/grow.err
kill $DP; wait $DP
grep -i "error\|warn" $O/daemon.log | head -3
date -u
