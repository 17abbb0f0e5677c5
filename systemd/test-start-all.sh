#!/bin/sh
# test-start-all.sh: moonbrightd-start-all against a fake /dev, fake configs
# and a systemctl stand-in that records its arguments.
#   test-start-all.sh PATH/TO/moonbrightd-start-all
set -eu
script=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/dev"
cat > "$tmp/systemctl" <<'STUB'
#!/bin/sh
echo "$*" >> "$STUB_LOG"
case $1 in
list-units) printf '%s\n' $STUB_RUNNING | sed 's/$/ loaded active running x/' ;;
is-active) case " $STUB_FAILED " in *" $3 "*) exit 3 ;; esac ;;
start) [ -z "$STUB_FAILED" ] ;;
esac
STUB
chmod +x "$tmp/systemctl"
export MOONBRIGHT_DEV_DIR="$tmp/dev" SYSTEMCTL="$tmp/systemctl" STUB_LOG="$tmp/log"
export STUB_RUNNING="" STUB_FAILED=""
fails=0

check() {   # check NAME EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then
        echo "ok: $1"
    else
        echo "FAIL: $1: expected '$2', got '$3'"
        fails=$((fails + 1))
    fi
}
list() { "$script" list "$@" | tr '\n' ' ' | sed 's/ $//'; }

check "no GPU, no config: device 0" "0" "$(list "$tmp/none.conf")"
touch "$tmp/dev/nvidia0" "$tmp/dev/nvidia1" "$tmp/dev/nvidia2" "$tmp/dev/nvidiactl" "$tmp/dev/nvidia-uvm"
check "three GPUs, no config: all" "0 1 2" "$(list "$tmp/none.conf")"
printf 'budget = 1G\n# devices = 7\n' > "$tmp/a.conf"
check "config without devices: all" "0 1 2" "$(list "$tmp/a.conf")"
printf 'devices = all   # every one\n' > "$tmp/b.conf"
check "devices = all" "0 1 2" "$(list "$tmp/b.conf")"
printf 'scrub = on\n devices=3, 5 # two\n[tenant a]\ndevices = 9\n' > "$tmp/c.conf"
check "devices = 3, 5" "3 5" "$(list "$tmp/c.conf")"
printf 'devices = 1 x\n' > "$tmp/d.conf"
if "$script" list "$tmp/d.conf" > /dev/null 2>&1; then r=accepted; else r=rejected; fi
check "bad device rejected" "rejected" "$r"
if "$script" bogus > /dev/null 2>&1; then r=accepted; else r=rejected; fi
check "bad action rejected" "rejected" "$r"

: > "$tmp/log"
"$script" start "$tmp/c.conf" > /dev/null
check "start" "start moonbrightd@3.service moonbrightd@5.service" "$(cat "$tmp/log")"

: > "$tmp/log"
STUB_FAILED="moonbrightd@5.service" "$script" start "$tmp/c.conf" > /dev/null 2>&1 && r=0 || r=$?
check "start with one GPU failing succeeds" "0" "$r"
: > "$tmp/log"
STUB_FAILED="moonbrightd@3.service moonbrightd@5.service" "$script" start "$tmp/c.conf" \
    > /dev/null 2>&1 && r=0 || r=$?
check "start with every GPU failing fails" "1" "$r"

: > "$tmp/log"
STUB_RUNNING="moonbrightd@1.service moonbrightd@3.service" "$script" stop "$tmp/c.conf"
check "stop" "stop moonbrightd@1.service moonbrightd@3.service" "$(grep -v list-units "$tmp/log")"

: > "$tmp/log"
STUB_RUNNING="moonbrightd@1.service moonbrightd@3.service" "$script" reload "$tmp/c.conf" > /dev/null
check "reload" "stop moonbrightd@1.service|start moonbrightd@3.service moonbrightd@5.service" \
    "$(grep -v list-units "$tmp/log" | tr '\n' '|' | sed 's/|$//')"

[ "$fails" -eq 0 ]
