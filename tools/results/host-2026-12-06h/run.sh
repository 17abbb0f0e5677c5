#!/bin/sh
# run.sh BUILD LABEL TRACE [extra mbbench args]: one replay of $STRATEGY (default grow) on
# the host backend with the GPU's driver costs emulated in the daemon and in the client
# (MOONBRIGHT_HOST_COSTS=gpu for both; vsrun.sh of host-2026-12-06f set it for the daemon
# alone), at MOONBRIGHT_LOG=info; prints the strategy's figures and, for grow, the client's
# driver work at close. JSON, stderr and the daemon log in /tmp/vb/LABEL.{json,err,dlog}.
S=${STRATEGY:-grow}
mkdir -p /tmp/vb
B=$1; L=$2; T=$3; shift 3
RT=$(mktemp -d)
export MOONBRIGHT_HOST_COSTS=gpu MOONBRIGHT_LOG=${MOONBRIGHT_LOG:-info}
MOONBRIGHT_HOST_MEMORY=80G $B/daemon/moonbrightd --backend host --budget 120G --runtime-dir $RT --foreground > $RT/d.log 2>&1 & DP=$!
sleep 1
MOONBRIGHT_RUNTIME_DIR=$RT $B/tools/mbbench replay $T --json --quiet --strategies $S "$@" > /tmp/vb/$L.json 2>/tmp/vb/$L.err
kill $DP; wait $DP 2>/dev/null
python3 - /tmp/vb/$L.json $L <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
    a=r['alloc_ns']; ap=r['at_peak']
    k = 'vspace_free' if r['strategy'] == 'vspace' else 'idle'
    print("%s %s r/l %.3f mean %.1f p99 %.1f max %.2fms waits %s frames %s busy %.2f/%.2f s %s %d MiB; daemon: %s round trips, %s waited, %s creates, %s re-exports on grant paths" % (sys.argv[2], r['strategy'], r['reserved_over_live'], a['mean']/1e3, a['p99']/1e3, a['max']/1e6, r['driver_waits'], r['peak_daemon_frames'], r.get('background_busy_s') or 0, r['total_s'], k, ap[k]>>20, r.get('daemon_requests'), r.get('daemon_wait_s'), r.get('daemon_grant_creates'), r.get('daemon_reexports')))
PY
grep -E "growable ranges, " /tmp/vb/$L.err | sed 's/^mbclient: growable ranges, /  /'
cp $RT/d.log /tmp/vb/$L.dlog; rm -rf $RT
