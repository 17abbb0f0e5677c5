#!/bin/sh
# where grow's slow grants go: the daemon logs grants over 0.5 ms (MOONBRIGHTD_SLOW_GRANT_US=500), the client
# its waits over 1 ms (MOONBRIGHT_LOG=debug); grow alone x3
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
O=$OUT/s87; mkdir -p $O
RT=$(mktemp -d)
MOONBRIGHTD_SLOW_GRANT_US=500 $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/daemon.log 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
C=.gpu/azure_llm_conv_2023.csv
timeout 100 $B/tools/mbbench replay $C --strategies realloc --requests 300 --json --quiet > $O/warm.json 2>$O/warm.err
for k in grow1 grow2 grow3 grow4; do
  MOONBRIGHT_LOG=debug timeout 150 $B/tools/mbbench replay $C --strategies grow --json --quiet > $O/$k.json 2>$O/$k.err; echo "$k rc=$?"
  python3 - $O/$k.json $O/$k.err <<'PY'
import json,sys,re
d=json.load(open(sys.argv[1])); r=d["strategies"][0]; a=r["alloc_ns"]
print("  r/l %.3f waits %s frames %s mean %.1f p99 %.1f max %.1f us" % (r["reserved_over_live"], r["driver_waits"], r["peak_daemon_frames"], a["mean"]/1e3, a["p99"]/1e3, r["alloc_max_after_first_ns"]/1e3))
tot=[0,0.0,0.0,0.0,0.0,0.0]; big=[]
for l in open(sys.argv[2]):
    m=re.search(r"waited ([\d.]+) ms: ([\d.]+) for the range's refill, ([\d.]+) for the frame lock, ([\d.]+) in grants of \d+ frames, ([\d.]+) mapping",l)
    if not m: continue
    v=[float(x) for x in m.groups()]; tot[0]+=1
    for q in range(5): tot[q+1]+=v[q]
    if v[0]>2: big.append(l.strip()[17:])
print("  waits over 1 ms %d (%.1f ms: frame lock %.1f, grants %.1f, maps %.1f), over 2 ms %d" % (tot[0],tot[1],tot[3],tot[4],tot[5],len(big)))
for l in sorted(big, key=lambda x: -float(re.search(r"waited ([\d.]+)",x).group(1)))[:3]: print("   ", l)
PY
done
kill $DP; wait $DP
echo DBG lines:; grep -c DBG $O/daemon.log; grep DBG $O/daemon.log | sort -t' ' -k6 -rn | head -12 | cut -c1-200
grep "took" $O/daemon.log | awk '{for(i=1;i<=NF;i++){ if($i=="session") s=$(i+1); if($i=="took") t=$(i+1)}; if (t>2) {n[s]++; if(t>m[s]) m[s]=t}} END {for(k in n) print "session", k, n[k], "grants over 2 ms, max", m[k]}' | sort -n
grep -i "error\|warn" $O/daemon.log | head -3
python3 - $O/daemon.log <<'PY'
import re,sys,collections
by=collections.defaultdict(list)
for l in open(sys.argv[1]):
    m=re.search(r"grant of .* to session (\d+) took ([\d.]+) ms \(([\d.]+) ms since it arrived\): (\d+) created", l)
    if m: by[int(m.group(1))].append((float(m.group(2)), float(m.group(3)), int(m.group(4)), l.strip()))
for s_,v in sorted(by.items()):
    q=sum(1 for x in v if x[1]-x[0]>0.3)
    print("session %d: %d grants over 0.5 ms, %d created frames, %d queued over 0.3 ms, max %.2f ms" % (s_, len(v), sum(1 for x in v if x[2]), q, max(x[1] for x in v)))
    for x in sorted(v, key=lambda x:-x[1])[:2]: print("   ", x[3][12:330])
PY
cd $OUT && tar czf s87.tgz s87 && rm -rf s87
date -u
