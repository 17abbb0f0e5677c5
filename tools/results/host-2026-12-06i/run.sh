#!/bin/sh
# run.sh BUILD LABEL TRACE [extra mbbench args]: one replay of $STRATEGY (default grow) on
# the host backend with driver costs emulated in the daemon and in the client
# (MOONBRIGHT_HOST_COSTS, default gpu,export=300: a daemon that keeps up as an H100's does),
# MOONBRIGHT_LOG=info; prints the strategy's figures, the daemon's descriptors at the peak
# and its exports on grant paths. JSON, stderr and the daemon log in /tmp/vb/LABEL.*.
S=${STRATEGY:-grow}
mkdir -p /tmp/vb
B=$1; L=$2; T=$3; shift 3
RT=$(mktemp -d)
export MOONBRIGHT_HOST_COSTS=${MOONBRIGHT_HOST_COSTS:-gpu,export=300} MOONBRIGHT_LOG=${MOONBRIGHT_LOG:-info}
MOONBRIGHT_HOST_MEMORY=80G $B/daemon/moonbrightd --backend host --budget 120G --runtime-dir $RT --foreground > $RT/d.log 2>&1 & DP=$!
sleep 1
MOONBRIGHT_RUNTIME_DIR=$RT $B/tools/mbbench replay $T --json --quiet --strategies $S "$@" > /tmp/vb/$L.json 2>/tmp/vb/$L.err
MOONBRIGHT_RUNTIME_DIR=$RT $B/tools/mbctl status --json > /tmp/vb/$L.status 2>&1
kill $DP; wait $DP 2>/dev/null
python3 - /tmp/vb/$L.json $L <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['strategies']:
    a=r['alloc_ns']
    print("%s %s r/l %.3f mean %.1f p99 %.1f max %.2fms waits %s frames %s; daemon: %s descriptors, %s round trips, %s waited, %s creates, %s re-exports on grant paths" % (sys.argv[2], r['strategy'], r['reserved_over_live'], a['mean']/1e3, a['p99']/1e3, a['max']/1e6, r.get('driver_waits'), r.get('peak_daemon_frames'), r.get('peak_daemon_descriptors'), r.get('daemon_requests'), r.get('daemon_wait_s'), r.get('daemon_grant_creates'), r.get('daemon_reexports')))
PY
grep -o "\"reexports\":[0-9]*,\"exported_ahead\":[0-9]*\(,\"exports_dropped\":[0-9]*\)\?" /tmp/vb/$L.status
cp $RT/d.log /tmp/vb/$L.dlog; rm -rf $RT
