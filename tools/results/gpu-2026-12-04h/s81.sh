#!/bin/sh
# where grow's slow waits go: grow alone x3 with MOONBRIGHT_LOG=debug (each wait over 1 ms says what it
# waited for) and --slow-us 2000
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
O=$OUT/s81; mkdir -p $O
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
C=.gpu/azure_llm_conv_2023.csv
timeout 100 $B/tools/mbbench replay $C --strategies realloc --requests 300 --json --quiet > $O/warm.json 2>$O/warm.err
for k in 1 2 3; do
  MOONBRIGHT_LOG=debug timeout 150 $B/tools/mbbench replay $C --strategies grow --json --quiet --slow-us 2000 > $O/grow$k.json 2>$O/grow$k.err; echo "grow$k rc=$?"
  python3 - $O/grow$k.json $O/grow$k.err <<'PY'
import json,sys,re
d=json.load(open(sys.argv[1])); r=d["strategies"][0]; a=r["alloc_ns"]
print("  r/l %.3f waits %s frames %s mean %.1f p99 %.1f max %.1f us" % (r["reserved_over_live"], r["driver_waits"], r["peak_daemon_frames"], a["mean"]/1e3, a["p99"]/1e3, r["alloc_max_after_first_ns"]/1e3))
tot={"n":0,"all":0,"busy":0,"lock":0,"grant":0,"map":0}; big=[]
for l in open(sys.argv[2]):
    m=re.search(r"(a growth|a growable allocation[^t]*)to (\d+) MiB waited ([\d.]+) ms: ([\d.]+) for the range's refill, ([\d.]+) for the frame lock, ([\d.]+) in grants of (\d+) frames, ([\d.]+) mapping (\d+) frames", l)
    if not m: continue
    ms=float(m.group(3)); tot["n"]+=1; tot["all"]+=ms
    for k,g in (("busy",4),("lock",5),("grant",6),("map",8)): tot[k]+=float(m.group(g))
    if ms>2: big.append(l.strip()[17:])
print("  waits over 1 ms: %d, %.1f ms in all: refill %.1f, frame lock %.1f, grants %.1f, maps %.1f" % (tot["n"],tot["all"],tot["busy"],tot["lock"],tot["grant"],tot["map"]))
print("  over 2 ms: %d" % len(big))
for l in sorted(big, key=lambda x: -float(re.search(r"waited ([\d.]+)",x).group(1)))[:8]: print("   ", l)
PY
done
kill $DP; wait $DP
grep "took" $O/daemon.log | awk '{for(i=1;i<=NF;i++){ if($i=="session") s=$(i+1); if($i=="took") t=$(i+1)}; if (t>2) {n[s]++; if(t>m[s]) m[s]=t}} END {for(k in n) print "session", k, n[k], "grants over 2 ms, max", m[k]}' | sort -n
grep -i "error\|warn" $O/daemon.log | head -3
cd $OUT && tar czf s81.tgz s81 && rm -rf s81
date -u
