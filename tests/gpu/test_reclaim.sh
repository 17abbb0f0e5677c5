#!/bin/sh
# test_reclaim.sh MBTEST_CLIENT MBCTL: on the cuda backend (run under
# with_daemon.sh), a client holding GPU frames is killed with SIGKILL and
# every frame comes back to the daemon; the daemon holds no exported
# descriptor for the frames it granted, and exports the reclaimed ones
# again for the next client, whose data checks out. Exit 0 pass, 1 fail.
set -u
client=$1; mbctl=$2
dir=$MOONBRIGHT_RUNTIME_DIR
granted() { "$mbctl" --runtime-dir "$dir" status --json | sed 's/.*"frames_granted":\([0-9]*\).*/\1/'; }
granted_bytes() { "$mbctl" --runtime-dir "$dir" status --json | sed 's/.*"bytes_granted":\([0-9]*\).*/\1/'; }
field() { "$mbctl" --runtime-dir "$dir" status --json | sed "s/.*\"$1\":\([0-9]*\).*/\1/"; }
fifo=$(mktemp -u /tmp/mbgpu-in.XXXXXX); mkfifo "$fifo"
out=$(mktemp /tmp/mbgpu-out.XXXXXX)
"$client" hold 335544320 1 victim <"$fifo" >"$out" &   # 320 MiB: large frames of 256 + 64 MiB
pid=$!
exec 9>"$fifo"
i=0
while ! grep -q ready "$out"; do
  i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: holder never ready: $(cat "$out")"; exit 1; }
  sleep 0.1
done
before=$(granted)
bytes=$(granted_bytes)
echo "granted while held: $before frames, $bytes bytes"
[ "$before" -ge 1 ] && [ "$bytes" -ge 335544320 ] ||
  { echo "FAIL: expected at least 320 MiB granted"; exit 1; }
fds=$(field descriptors); free=$(field frames_free)
echo "exported descriptors held: $fds, free frames: $free"
[ "$fds" -le "$free" ] || { echo "FAIL: the daemon keeps descriptors of granted frames"; exit 1; }
re0=$(( $(field reexports) + $(field exported_ahead) ))   # before the frames come back
kill -9 $pid; wait $pid 2>/dev/null
i=0
while [ "$(granted)" != 0 ]; do
  i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: frames not reclaimed: $(granted) still granted"; exit 1; }
  sleep 0.05
done
echo "granted after SIGKILL: 0"
"$client" alloc 335544320 again > "$out" 2>&1 || { echo "FAIL: a client after the reclaim: $(cat "$out")"; exit 1; }
re1=$(( $(field reexports) + $(field exported_ahead) ))
echo "frames exported again for the next client: $((re1 - re0))"
[ "$re1" -gt "$re0" ] || { echo "FAIL: the reclaimed frames were not exported again"; exit 1; }
rm -f "$fifo" "$out"
echo PASS
