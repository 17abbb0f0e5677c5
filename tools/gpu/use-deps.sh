# tools/gpu/use-deps.sh: source it on a GPU host without network access:
#   . tools/gpu/use-deps.sh [DIR]          (bash; in sh: MB_GPUDEPS=DIR . tools/gpu/use-deps.sh)
# Unpacks the packages tools/gpu/fetch-deps.sh downloaded into DIR (default
# $MB_GPUDEPS, else .gpudeps) under /tmp/mbdeps, without installing them, and points the
# compiler, linker, pkg-config, CMake and the loader there. Then build and
# test as usual (tools/gpu_check.sh).
_mb_dir=${1:-${MB_GPUDEPS:-.gpudeps}}
_mb_root=/tmp/mbdeps
if ! ls "$_mb_dir"/*.deb >/dev/null 2>&1; then
  echo "use-deps: no .deb files in $_mb_dir (run tools/gpu/fetch-deps.sh where the archive is reachable)" >&2
else
  mkdir -p "$_mb_root"
  for _mb_f in "$_mb_dir"/*.deb; do dpkg -x "$_mb_f" "$_mb_root"; done
  _mb_lib=$_mb_root/usr/lib/x86_64-linux-gnu
  # libzmq.pc names private requirements (krb5-gssapi, libsodium, openpgm,
  # norm, libbsd) that dynamic linking does not need: empty stand-ins keep
  # pkg-config from refusing libzmq.
  mkdir -p "$_mb_root/stubpc"
  for _mb_p in krb5-gssapi libsodium openpgm-5.3 norm libbsd; do
    printf 'Name: %s\nDescription: stand-in\nVersion: 99\n' "$_mb_p" >"$_mb_root/stubpc/$_mb_p.pc"
  done
  export CMAKE_PREFIX_PATH=$_mb_root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export PKG_CONFIG_PATH=$_mb_lib/pkgconfig:$_mb_root/stubpc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$_mb_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$_mb_lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH=$_mb_root/usr/include${CPATH:+:$CPATH}
  export PATH=$_mb_root/usr/bin:$PATH
  echo "use-deps: $(ls -1 "$_mb_dir"/*.deb | wc -l) packages unpacked under $_mb_root"
fi
unset _mb_dir _mb_root _mb_f _mb_lib _mb_p
