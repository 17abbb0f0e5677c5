#!/bin/sh
# tests/test_daemon_start.sh: moonbrightd's start as a user sees it. Without
# --foreground it returns once serving and lets go of the caller's stdio (a
# pipe on stderr ends); its start-up line names the config file it read (or
# says none); a default start (no --budget) takes half of physical memory on
# the host backend and warns about nothing; a regular file on stderr stays
# the daemon's log after it detaches.
#   test_daemon_start.sh MOONBRIGHTD
set -eu
daemon=$1
dir=$(mktemp -d /tmp/mbtest-start.XXXXXX)
cleanup() {
    for l in "$dir"/rt*/gpu0.lock; do
        [ -s "$l" ] && kill "$(cat "$l")" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "test_daemon_start: $*" >&2; exit 1; }

# stop DIR: SIGTERM the daemon serving DIR, wait until it is gone.
stop() {
    pid=$(cat "$1/gpu0.lock")
    kill "$pid"
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 200 ] || fail "daemon $pid did not stop"
        sleep 0.05
    done
}

# 1. Background start through a pipe: the pipe ends (timeout would kill it
#    otherwise), the line names no config file, nothing warns.
mkdir "$dir/rt1"
out=$(timeout 60 sh -c "'$daemon' --backend host --runtime-dir '$dir/rt1' 2>&1 | cat") \
    || fail "moonbrightd | cat did not end, or the daemon failed: $out"
echo "$out"
echo "$out" | grep -q "serving device 0 (host backend, host device 0)" || fail "no start-up line: $out"
if [ ! -e /etc/moonbright/moonbrightd.conf ]; then
    echo "$out" | grep -q "config none" || fail "start-up line does not say no config was read: $out"
fi
echo "$out" | grep -qi "warning" && fail "a default start warned: $out"
# The default budget: half of physical memory on the host backend.
phys=$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)
budget=$(echo "$out" | sed -n 's/.*budget \([0-9.]*\) GiB.*/\1/p')
[ -n "$budget" ] || fail "no budget in GiB in the start-up line: $out"
awk -v b="$budget" -v p="$phys" 'BEGIN { h = p / 2 / 1073741824; exit !(b > h * 0.9 && b < h * 1.1) }' \
    || fail "default budget $budget GiB is not half of physical memory ($phys bytes)"
stop "$dir/rt1"

# 2. A config file named on the command line is the one the line names.
mkdir "$dir/rt2"
printf 'budget = 64M\n' > "$dir/my.conf"
out=$(timeout 60 sh -c "'$daemon' --backend host --runtime-dir '$dir/rt2' --config '$dir/my.conf' 2>&1 | cat") \
    || fail "start with --config failed: $out"
echo "$out" | grep -q "budget 64 MiB.*config $dir/my.conf" || fail "start-up line does not name $dir/my.conf: $out"
stop "$dir/rt2"

# 3. stderr on a regular file stays the log after detaching.
mkdir "$dir/rt3"
timeout 60 "$daemon" --backend host --runtime-dir "$dir/rt3" --budget 64M 2>"$dir/log" \
    || fail "background start failed: $(cat "$dir/log")"
stop "$dir/rt3"
grep -q "stopped" "$dir/log" || fail "the log file lost the lines written after detaching: $(cat "$dir/log")"
echo "test_daemon_start: detaches from pipes, names its config, default budget without warnings"
