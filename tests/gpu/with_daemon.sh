#!/bin/sh
# with_daemon.sh DAEMON MBCTL COMMAND...: run COMMAND against a fresh
# moonbrightd on the cuda backend in a private runtime directory; exit 77
# (skip) when the cuda backend cannot start here.
set -u
daemon=$1; mbctl=$2; shift 2
dir=$(mktemp -d /tmp/mbgpu.XXXXXX)
export MOONBRIGHT_RUNTIME_DIR=$dir
if ! "$daemon" --backend cuda --runtime-dir "$dir" --budget 32G --reserve 256M --log-level warn 2>"$dir/log"; then
  echo "SKIP: moonbrightd cannot start on the cuda backend here: $(tail -1 "$dir/log")"
  rm -rf "$dir"
  exit 77
fi
"$@"
rc=$?
"$mbctl" --runtime-dir "$dir" status || rc=1
kill "$(cat "$dir/gpu0.lock")" 2>/dev/null
sleep 1
rm -rf "$dir"
exit $rc
