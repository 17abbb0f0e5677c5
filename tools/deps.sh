#!/bin/sh
# tools/deps.sh: install the Debian packages MoonBright builds and tests with.
# Installs only what is missing; needs root (or sudo) when something is.
set -eu
pkgs="build-essential cmake pkgconf libzmq3-dev libprotobuf-c-dev protobuf-c-compiler
libsystemd-dev libcmocka-dev clang libclang-rt-dev python3"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
