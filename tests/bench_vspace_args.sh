#!/bin/sh
# tests/bench_vspace_args.sh: bench_vspace's command line without a GPU. An
# unknown part is a usage error (exit 2) before any daemon is reached;
# against a real moonbrightd on the host backend it skips (exit 77) and says
# it needs the cuda backend.
# usage: bench_vspace_args.sh BENCH_VSPACE MOONBRIGHTD
set -u
bench=$1 daemon=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-vspace-args.XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
fail() { echo "bench_vspace_args: $*"; exit 1; }

MOONBRIGHT_RUNTIME_DIR="$dir/none" "$bench" growth bogus >/dev/null 2>"$dir/usage"
rc=$?
[ $rc -eq 2 ] || fail "an unknown part: exit $rc, not 2 ($(cat "$dir/usage"))"
grep -q '^usage: bench_vspace \[growth|slow|gather\]' "$dir/usage" || fail "no usage line: $(cat "$dir/usage")"

"$daemon" --foreground --backend host --runtime-dir "$dir/run" --budget 1G >"$dir/daemon.log" 2>&1 &
pid=$!
i=0
while [ ! -S "$dir/run/gpu0.fds" ]; do
  i=$((i + 1))
  [ $i -le 200 ] && kill -0 "$pid" 2>/dev/null || fail "moonbrightd did not start: $(tail -5 "$dir/daemon.log")"
  sleep 0.1
done
MOONBRIGHT_RUNTIME_DIR="$dir/run" "$bench" growth >"$dir/out" 2>"$dir/err"
rc=$?
[ $rc -eq 77 ] || fail "on the host backend: exit $rc, not 77 ($(cat "$dir/err"))"
grep -q 'needs the cuda backend' "$dir/err" || fail "no reason given: $(cat "$dir/err")"
[ -s "$dir/out" ] && fail "printed a table on the host backend: $(head -3 "$dir/out")"
echo "bench_vspace_args: an unknown part refused (2); the host backend skipped (77)"
