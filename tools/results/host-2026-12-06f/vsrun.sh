#!/bin/sh
# vsrun.sh BUILD LABEL TRACE [extra mbbench args]: host daemon with emulated GPU costs, a replay
# of one strategy, $STRATEGY (default vspace; gsrun.sh runs grow), with the free pages (vspace)
# or the idle bytes (others) at the peak
# It sets MOONBRIGHT_HOST_COSTS for the daemon alone: the client's driver calls cost nothing
# (tools/results/host-2026-12-06h/run.sh sets it for both).
S=${STRATEGY:-vspace}
mkdir -p /tmp/vb
B=$1; L=$2; T=$3; shift 3
RT=$(mktemp -d)
MOONBRIGHT_HOST_COSTS=gpu MOONBRIGHT_HOST_MEMORY=80G $B/daemon/moonbrightd --backend host --budget 120G --runtime-dir $RT --foreground > $RT/d.log 2>&1 & DP=$!
sleep 1
MOONBRIGHT_RUNTIME_DIR=$RT $B/tools/mbbench replay $T --json --quiet --strategies $S "$@" > /tmp/vb/$L.json 2>/tmp/vb/$L.err
kill $DP; wait $DP 2>/dev/null
python3 - /tmp/vb/$L.json $L <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
    a=r['alloc_ns']; ap=r['at_peak']
    k = 'vspace_free' if r['strategy'] == 'vspace' else 'idle'
    print("%s %s r/l %.3f mean %.1f p99 %.1f max %.2fms waits %s frames %s reserved %d MiB %s %d MiB" % (sys.argv[2], r['strategy'], r['reserved_over_live'], a['mean']/1e3, a['p99']/1e3, a['max']/1e6, r['driver_waits'], r['peak_daemon_frames'], r['peak_reserved_bytes']>>20, k, ap[k]>>20))
PY
rm -rf $RT
