#!/bin/sh
# tools/install.sh: the one command that installs MoonBright on this machine
# and shows it working: dependencies, build, install (/usr/local), start the
# service (systemctl start moonbrightd where systemd runs, else moonbrightd
# directly), then a short demo workload and the daemon's status.
set -eu
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
prefix=${PREFIX:-/usr/local}

sh tools/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build build -j"$(nproc)"
$SUDO cmake --install build >/dev/null
$SUDO ldconfig
conf=$("$prefix/bin/moonbrightd" --help | sed -n 's/.*(default \(.*moonbrightd\.conf\),.*/\1/p')
echo "install: binaries in $prefix/bin, library in $prefix/lib, config $conf"

if [ -d /run/systemd/system ]; then
  echo "install: starting the service with systemctl"
  $SUDO systemd-sysusers >/dev/null 2>&1 || true
  $SUDO systemd-tmpfiles --create >/dev/null 2>&1 || true
  $SUDO systemctl daemon-reload
  $SUDO systemctl restart moonbrightd
  sleep 1
else
  echo "install: systemd is not running here; starting moonbrightd directly"
  if [ -f /run/moonbright/gpu0.lock ] && "$prefix/bin/mbctl" status >/dev/null 2>&1; then
    $SUDO kill "$(cat /run/moonbright/gpu0.lock)" && sleep 1
  fi
  $SUDO mkdir -p /run/moonbright /var/log/moonbright
  # Returns once the daemon is serving; its log goes to the file.
  $SUDO sh -c "'$prefix/bin/moonbrightd' --device 0 2>>/var/log/moonbright/gpu0.log"
  echo "install: moonbrightd running (log: /var/log/moonbright/gpu0.log)"
fi

echo
echo "== demo: two tenants allocate stitched buffers through the daemon =="
"$prefix/bin/mbdemo" inference
"$prefix/bin/mbdemo" training
echo
echo "== mbctl status =="
"$prefix/bin/mbctl" status
