#!/bin/sh
# test_devices.sh MBTEST_CLIENT: on the cuda backend (under with_daemon.sh),
# a client finds the daemon's GPU by its UUID, not by its ordinal: with
# CUDA_VISIBLE_DEVICES naming that GPU by UUID it allocates; with no GPU visible to it, mb_open fails with MB_EDEVICE
# (exit 31) and says which GPU it cannot see, and the daemon holds nothing
# for it. Exit 0 pass, 1 fail.
set -u
client=$1
dir=$MOONBRIGHT_RUNTIME_DIR
out=$(mktemp /tmp/mbgpu-dev.XXXXXX)
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null | head -1)
if [ -n "$uuid" ] && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -eq 1 ]; then
  CUDA_VISIBLE_DEVICES=$uuid "$client" alloc 67108864 devices >"$out" 2>&1 ||
    { echo "FAIL: with CUDA_VISIBLE_DEVICES=$uuid: $(cat "$out")"; exit 1; }
  echo "CUDA_VISIBLE_DEVICES=$uuid: 64 MiB allocated"
else
  echo "(no nvidia-smi, or several GPUs: the UUID-named run is left out)"
fi
CUDA_VISIBLE_DEVICES= "$client" alloc 67108864 hidden >"$out" 2>&1
rc=$?
[ $rc -eq 31 ] || { echo "FAIL: with no GPU visible, exit $rc (expected 31): $(cat "$out")"; exit 1; }
grep -q "which this process does not see" "$out" ||
  { echo "FAIL: the error does not say which GPU: $(cat "$out")"; exit 1; }
echo "no GPU visible: $(grep 'does not see' "$out" | head -1)"
"$client" alloc 67108864 devices >"$out" 2>&1 || { echo "FAIL: a client after it: $(cat "$out")"; exit 1; }
rm -f "$out"
echo PASS
