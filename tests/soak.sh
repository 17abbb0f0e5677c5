#!/bin/sh
# soak.sh DAEMON MBSOAK [SECONDS] [FAULTS]: a short soak in CI: a real daemon
# (host backend, small budget so clients compete), mbsoak's clients with
# random SIGKILLs, optionally with fault injection in daemon and clients
# (MOONBRIGHT_FAULTS, debug builds), then the daemon must stop cleanly
# (under AddressSanitizer its exit also proves it leaked nothing).
set -u
daemon=$1; soak=$2; secs=${3:-20}
if [ -n "${4:-}" ]; then
  export MOONBRIGHT_FAULTS=$4 MOONBRIGHT_TIMEOUT_MS=300
fi
dir=$(mktemp -d /tmp/mbsoak.XXXXXX)
export MOONBRIGHT_RUNTIME_DIR=$dir
"$daemon" --foreground --backend host --runtime-dir "$dir" --budget 1G --log-level warn 2>"$dir/daemon.log" &
dpid=$!
i=0
while [ ! -S "$dir/gpu0.fds" ]; do
  i=$((i + 1)); [ $i -gt 200 ] && { echo "FAIL: daemon did not start"; cat "$dir/daemon.log"; exit 1; }
  sleep 0.05
done
"$soak" --clients 4 --seconds "$secs" --kill-ms 500 2>"$dir/soak.log"
rc=$?
tail -3 "$dir/soak.log"
kill -TERM $dpid
wait $dpid
drc=$?
if [ $drc -ne 0 ]; then
  echo "FAIL: moonbrightd exited $drc"; tail -20 "$dir/daemon.log"; rc=1
fi
grep -q "ERROR: AddressSanitizer\|runtime error" "$dir/daemon.log" && { echo "FAIL: sanitizer report"; tail -30 "$dir/daemon.log"; rc=1; }
rm -rf "$dir"
exit $rc
