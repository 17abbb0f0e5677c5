#!/bin/sh
# tools/gpu/fetch-deps.sh: download the Debian packages (headers, libraries,
# protoc-c, pkgconf) a GPU host without network access needs to build and
# test MoonBright, into DIR (default .gpudeps, ignored by git). Run it where
# Debian's archive is reachable (apt-get update once first); carry DIR to the
# GPU host and unpack it there with tools/gpu/use-deps.sh.
#   fetch-deps.sh [DIR]
set -eu
dir=${1:-.gpudeps}
mkdir -p "$dir"
cd "$dir"
# The runtime libraries beside the -dev packages: the GPU host has neither.
pkgs="libzmq5 libzmq3-dev libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler libprotoc32 libprotobuf32
libcmocka0 libcmocka-dev libsystemd-dev libsystemd0 pkgconf pkgconf-bin libpkgconf3"
missing=""
for p in $pkgs; do
  ls "${p}"_*.deb >/dev/null 2>&1 && continue
  apt-get download "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] || { echo "fetch-deps: could not download:$missing (apt-get update first?)" >&2; exit 1; }
echo "fetch-deps: $(ls -1 ./*.deb | wc -l) packages in $dir"
