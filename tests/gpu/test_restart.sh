#!/bin/sh
# test_restart.sh DAEMON MBCTL MBTEST_CLIENT: on the cuda backend, SIGKILL
# the daemon while three clients hold GPU frames; start it again: the
# clients report their frames (status shows the same holdings), and they go
# on allocating. Exit 0 pass, 1 fail, 77 skip (no usable GPU).
set -u
daemon=$1; mbctl=$2; client=$3
dir=$(mktemp -d /tmp/mbrestart.XXXXXX)
export MOONBRIGHT_RUNTIME_DIR=$dir
start() {
  "$daemon" --backend cuda --runtime-dir "$dir" --budget 8G --log-level warn 2>>"$dir/log" 5>&- 6>&- 7>&-
}
granted() { "$mbctl" --runtime-dir "$dir" status --json | sed 's/.*"frames_granted":\([0-9]*\).*/\1/'; }
if ! start; then echo "SKIP: no cuda backend here: $(tail -1 "$dir/log")"; rm -rf "$dir"; exit 77; fi
for i in 0 1 2; do
  mkfifo "$dir/in$i"
  "$client" hold 335544320 $i keeper$i <"$dir/in$i" >"$dir/out$i" 2>>"$dir/clients" 5>&- 6>&- 7>&- &
  eval "pid$i=\$!"
  eval "exec $((5 + i))>\"$dir/in$i\""
done
for i in 0 1 2; do
  n=0; while ! grep -q ready "$dir/out$i"; do n=$((n + 1)); [ $n -gt 100 ] && { echo "FAIL: client $i not ready"; exit 1; }; sleep 0.1; done
done
before=$(granted); echo "granted before the kill: $before"
kill -9 "$(cat "$dir/gpu0.lock")"; sleep 0.5
start || { echo "FAIL: the daemon did not start again"; tail -5 "$dir/log"; exit 1; }
n=0; while [ "$(granted)" != "$before" ]; do n=$((n + 1)); [ $n -gt 200 ] && { echo "FAIL: $(granted) granted after restart, $before before"; exit 1; }; sleep 0.05; done
echo "granted after restart: $(granted)"
for i in 0 1 2; do echo alloc >&$((5 + i)); done
sleep 2
for i in 0 1 2; do
  grep -q "alloc: success" "$dir/out$i" || { echo "FAIL: client $i: $(tail -1 "$dir/out$i")"; exit 1; }
done
echo "all three clients allocated again"
for i in 0 1 2; do eval "exec $((5 + i))>&-"; done
wait
n=0; while [ "$(granted)" != 0 ]; do n=$((n + 1)); [ $n -gt 100 ] && { echo "FAIL: frames left granted"; exit 1; }; sleep 0.05; done
kill "$(cat "$dir/gpu0.lock")"; sleep 0.5
rm -rf "$dir"
echo PASS
