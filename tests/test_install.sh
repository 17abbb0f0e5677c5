#!/bin/sh
# tests/test_install.sh: cmake --install into a DESTDIR, then a program built
# against the installed mbclient.pc links, and runs against the installed
# moonbrightd (host backend) with the installed default config.
#   test_install.sh BUILD_DIR [CC]
set -eu
build=$1
cc=${2:-cc}
dest=$(mktemp -d /tmp/mbtest-install.XXXXXX)
rt=$dest/run
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$dest"
}
trap cleanup EXIT
fail() { echo "test_install: $*" >&2; exit 1; }

DESTDIR=$dest cmake --install "$build" >/dev/null || fail "cmake --install failed"
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
root=$dest$prefix
pc=$(find "$dest" -name mbclient.pc | head -n 1)
[ -n "$pc" ] || fail "no mbclient.pc installed"
for f in bin/moonbrightd bin/mbctl include/moonbright/mbclient.h; do
    [ -e "$root/$f" ] || fail "$f not installed under $root"
done
lib=$(find "$dest" -name 'libmbclient.so*' | head -n 1)
[ -n "$lib" ] || fail "no libmbclient.so installed"
conf=$(find "$dest" -name moonbrightd.conf | head -n 1)
[ -n "$conf" ] || fail "no moonbrightd.conf installed"
# A system prefix puts the config in /etc, where the daemon looks by default.
case $prefix in
/usr|/usr/local)
    [ "$conf" = "$dest/etc/moonbright/moonbrightd.conf" ] || fail "config installed at $conf, not /etc/moonbright"
    "$root/bin/moonbrightd" --help | grep -q "default /etc/moonbright/moonbrightd.conf" \
        || fail "the installed moonbrightd does not default to /etc/moonbright/moonbrightd.conf"
    ;;
esac
# A reinstall keeps an edited config.
echo "# edited" >> "$conf"
DESTDIR=$dest cmake --install "$build" >/dev/null || fail "second cmake --install failed"
grep -q "^# edited" "$conf" || fail "a reinstall overwrote the edited $conf"

# moonbright_torch: installed as a package that python3 finds (a .pth in its
# site-packages names the package's directory), importable without torch,
# and it finds the libmbclient installed with it.
if command -v python3 >/dev/null 2>&1; then
    pydir=$(find "$dest" -type d -name moonbright_torch | head -n 1)
    [ -n "$pydir" ] || fail "moonbright_torch is not installed"
    pth=$(find "$dest" -name moonbright.pth | head -n 1)
    [ -n "$pth" ] || fail "no moonbright.pth installed"
    [ "$dest$(cat "$pth")" = "$(dirname "$pydir")" ] || fail "moonbright.pth names $(cat "$pth"), not $(dirname "$pydir")"
    purelib=$(python3 -c "import sysconfig; print(sysconfig.get_path('purelib'))")
    [ "$(dirname "$pth")" = "$dest$purelib" ] || fail "moonbright.pth is in $(dirname "$pth"), not python3's $purelib"
    got=$(cd / && env -u MOONBRIGHT_LIB PYTHONPATH="$(dirname "$pydir")" python3 -c '
import sys
sys.modules["torch"] = None          # as if PyTorch were not installed
import moonbright_torch
print(moonbright_torch.library_path())
try:
    moonbright_torch.enable()
except RuntimeError as e:
    print("enable:", e)
') || fail "import moonbright_torch failed: $got"
    want=$(readlink -f "$lib")
    [ "$(readlink -f "$(echo "$got" | head -n 1)")" = "$want" ] \
        || fail "moonbright_torch.library_path() gave '$got', not the installed $want"
    echo "$got" | grep -q "enable: moonbright_torch.enable() needs PyTorch" \
        || fail "enable() without torch did not say it needs PyTorch: $got"
fi

cat > "$dest/app.c" <<'APP'
#include <stdio.h>
#include <string.h>
#include <moonbright/mbclient.h>
int main(void)
{
    mb_client *c;
    int rc = mb_open(&c, "installed");
    if (rc) { printf("open: %s\n", mb_strerror(rc)); return 1; }
    unsigned char *p;
    size_t n = 3u << 20;
    if ((rc = mb_malloc(c, n, (void **)&p)) != 0) { printf("alloc: %s\n", mb_strerror(rc)); return 1; }
    memset(p, 0x5a, n);
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != 0x5a) { printf("corrupt\n"); return 1; }
    mb_free(c, p);
    printf("ok %s\n", mb_backend_name(c));
    mb_close(c);
    return 0;
}
APP
flags=$(PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs mbclient) \
    || fail "pkg-config cannot read the installed mbclient.pc"
# A sanitizer build installs a sanitized library: the program needs the runtime too.
san=
if ldd "$lib" | grep -q libasan; then san="-fsanitize=address"; fi
if ldd "$lib" | grep -q libubsan; then san="$san -fsanitize=undefined"; fi
# shellcheck disable=SC2086
"$cc" $san -o "$dest/app" "$dest/app.c" $flags || fail "the program does not build against mbclient.pc ($flags)"

mkdir -p "$rt"
"$root/bin/moonbrightd" --foreground --config "$conf" --backend host --runtime-dir "$rt" \
    --budget 64M --log-level info 2>"$dest/daemon.log" &
pid=$!
i=0
until "$root/bin/mbctl" --runtime-dir "$rt" status >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 200 ] || fail "the installed moonbrightd did not answer"
    kill -0 "$pid" 2>/dev/null || fail "the installed moonbrightd exited"
    sleep 0.05
done
out=$(LD_LIBRARY_PATH=$(dirname "$lib") MOONBRIGHT_RUNTIME_DIR=$rt ASAN_OPTIONS=detect_leaks=0 "$dest/app") \
    || fail "the program failed: $out"
[ "$out" = "ok host" ] || fail "unexpected output: $out"
kill "$pid"
wait "$pid" || fail "moonbrightd exited with $?"
pid=
grep -q "serving device 0 .*config $conf\$" "$dest/daemon.log" \
    || fail "the start-up line does not name $conf: $(cat "$dest/daemon.log")"
echo "test_install: installed library, header, pkg-config file and daemon work"
