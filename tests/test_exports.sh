#!/bin/sh
# tests/test_exports.sh: libmbclient.so exports exactly the functions the
# public headers mark MB_API, nothing internal (tiers, wire, backends, test
# kernels, the CUDA runtime).
#   test_exports.sh LIBMBCLIENT HEADER...
set -eu
lib=$1
shift
fail() { echo "test_exports: $*" >&2; exit 1; }
tmp=$(mktemp -d /tmp/mbtest-exports.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The API: every "MB_API ... mb_name(" in the headers.
sed -n 's/^MB_API .*[ *]\(mb_[a-z0-9_]*\)(.*/\1/p' "$@" | sort -u > "$tmp/api"
[ -s "$tmp/api" ] || fail "no MB_API declarations found in $*"
# What the library exports: defined dynamic symbols, less the version node.
nm -D --defined-only "$lib" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u > "$tmp/exported"
if ! cmp -s "$tmp/api" "$tmp/exported"; then
    echo "exported but not API (>) / API but not exported (<):" >&2
    diff "$tmp/api" "$tmp/exported" >&2 || true
    fail "libmbclient.so's dynamic symbols differ from the public API"
fi
echo "test_exports: $(wc -l < "$tmp/api") symbols, all mb_ API"
