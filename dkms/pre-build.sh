#!/usr/bin/env bash
# DKMS's PRE_BUILD for lite-rs (dkms.conf): before anything is compiled, check that this
# system can build lite.ko for kernel KVER the way that kernel was built (its exact rustc
# and C compiler), make the Rust metadata its headers lack from the distribution's kernel
# source (Debian's headers ship none), and leave in kmake-args, in the build directory,
# the make arguments that MAKE[0] builds with. Anything missing stops it with the
# packages to install.
#
#   dkms/pre-build.sh KVER KDIR     (dkms.conf passes $kernelver $kernel_source_dir)
#
# A prepared tree is kept per kernel in $LITE_DKMS_CACHE/KVER (default
# /var/cache/lite-rs-dkms; about 2 GB: the kernel's source and its prepared build), so
# that rebuilding the module (a new lite-rs version) takes seconds; trees of kernels
# whose headers are gone are removed.
set -euo pipefail
shopt -s nullglob
me=lite-rs-dkms
die() { echo "$me: $*" >&2; exit 1; }
log() { echo "$me: $*" >&2; }
case "${1:-}" in
  -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
[ $# = 2 ] || die "usage: $0 KVER KDIR (see --help)"
kver=$1 kdir=$2
build=$(cd "$(dirname "$0")/.." && pwd)
kbuild=$build/tools/kernel/rust-kbuild.sh
rm -f "$build/kmake-args"

flags=$("$kbuild" check "$kdir")
if "$kbuild" has-metadata "$kdir"; then
  echo "-C $kdir $flags" > "$build/kmake-args"
  log "building against $kdir: $flags"
  exit 0
fi

# No Rust metadata in the headers: make it from the kernel's own source, which must be
# exactly the kernel's (the Rust symbols' hashes are checked against its Module.symvers).
[[ $kver =~ ^([0-9]+)\.([0-9]+) ]] || die "cannot read the kernel line from '$kver'"
line=${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
tarball=""
for t in /usr/src/linux-source-"$line".tar.{xz,bz2,gz}; do
  [ -f "$t" ] && { tarball=$t; break; }
done
[ -n "$tarball" ] || die "the headers of kernel $kver carry no Rust metadata (rust/*.rmeta), so it is made
  from the kernel's own source, which is not installed: install linux-source-$line (Debian;
  the linux-source metapackage follows new kernel lines), or headers that carry the
  metadata (Ubuntu: linux-lib-rust-$kver)."
identity="$kver $flags $(stat -c '%s %Y' "$tarball") $(sha256sum < "$kdir/.config" | cut -c1-16)"
if command -v dpkg-query >/dev/null; then
  hpkg=$(dpkg-query -S "$(realpath "$kdir")" 2>/dev/null | head -1 | cut -d: -f1 || true)
  spkg=$(dpkg-query -S "$tarball" 2>/dev/null | cut -d: -f1 || true)
  if [ -n "$hpkg" ] && [ -n "$spkg" ]; then
    hv=$(dpkg-query -W -f '${Version}' "$hpkg"); sv=$(dpkg-query -W -f '${Version}' "$spkg")
    [ "$hv" = "$sv" ] || die "$spkg is at $sv, but kernel $kver ($hpkg) is at $hv: the source must be
  the kernel's own. Install $spkg=$hv (snapshot.debian.org keeps older versions), or
  boot the kernel that matches $sv."
    identity+=" $sv"
  fi
fi

cache=${LITE_DKMS_CACHE:-/var/cache/lite-rs-dkms}
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
for old in "$cache"/*/; do
  old=$(basename "$old")
  [ -e "/lib/modules/$old/build" ] || { log "removing the prepared tree of removed kernel $old"; rm -rf "${cache:?}/$old"; }
done
tree=$cache/$kver
if [ "$(cat "$tree/identity" 2>/dev/null)" != "$identity" ] || [ ! -f "$tree/build/kmake-flags" ]; then
  log "preparing the Rust metadata of $kver from $tarball into $tree (once per kernel; several minutes)"
  t0=$SECONDS
  rm -rf "$tree"
  mkdir -p "$tree"
  "$kbuild" prepare "$kdir" "$tarball" "$tree/src" "$tree/build"
  echo "$identity" > "$tree/identity"
  log "prepared in $((SECONDS - t0)) s"
fi
echo "-C $tree/build $(cat "$tree/build/kmake-flags")" > "$build/kmake-args"
log "building against $tree/build: $(cat "$tree/build/kmake-flags")"
