#!/bin/sh
# tests/test_reconfigure.sh: configuring an existing build directory again
# changes no compile flags, so a second configure + build compiles nothing
# (tools/run-tests.sh configures on every run; the first and second configure
# of a fresh directory once disagreed about libzmq's flags). A fresh directory, the
# compiler and sanitizer/warning options of the build under test, CUDA and
# tests left out to keep it short.
#   test_reconfigure.sh SOURCE_DIR C_COMPILER [CMAKE_ARGS...]
set -eu
src=$1
cc=$2
shift 2
dir=$(mktemp -d /tmp/mbtest-reconf.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "test_reconfigure: $*" >&2; exit 1; }

conf() {
    cmake -S "$src" -B "$dir" -DCMAKE_C_COMPILER="$cc" -DMB_CUDA=OFF -DBUILD_TESTING=OFF "$@" \
        >"$dir.log" 2>&1 || { cat "$dir.log"; rm -f "$dir.log"; fail "configure failed"; }
    rm -f "$dir.log"
}
conf "$@"
cmake --build "$dir" -j2 >/dev/null || fail "first build failed"
find "$dir" -name '*.o' | sort > "$dir/objects.before"
[ -s "$dir/objects.before" ] || fail "the build made no objects"
touch "$dir/stamp"
sleep 1
conf "$@"
out=$(cmake --build "$dir" -j2 2>&1) || fail "second build failed: $out"
newer=$(find "$dir" -name '*.o' -newer "$dir/stamp")
[ -z "$newer" ] || fail "a second configure rebuilt: $newer"
echo "$out" | grep -q "Building C object" && fail "the second build compiled: $out"
echo "test_reconfigure: $(wc -l < "$dir/objects.before") objects, none rebuilt after configuring again"
