#!/bin/sh
# verify-units.sh: run systemd-analyze verify on unit files and fail on any
# message (it reports unknown keys and bad values as warnings with status 0).
#   verify-units.sh MANDIR UNIT...
# MANDIR holds man1/ and man8/ so Documentation=man: links resolve.
# Exits 77 (skipped) when systemd-analyze is not installed.
set -u
command -v systemd-analyze >/dev/null 2>&1 || { echo "systemd-analyze not found: skipped"; exit 77; }
[ "$#" -ge 2 ] || { echo "usage: verify-units.sh MANDIR UNIT..." >&2; exit 2; }
MANPATH=$1
export MANPATH
shift
out=$(systemd-analyze verify "$@" 2>&1)
rc=$?
printf 'systemd-analyze verify %s: exit %d\n' "$*" "$rc"
[ -n "$out" ] && printf '%s\n' "$out"
[ "$rc" -eq 0 ] && [ -z "$out" ]
