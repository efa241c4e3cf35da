#!/usr/bin/env bash
# LITE-RS's user space for nodes, built and installed the way the Debian packages ship
# it (debian/rules runs both steps; `make install` too): lite-admin and lite-bench with
# man pages made from their --help, liblite (liblite.so.0, liblite.a, liblite.h and
# liblite.pc) and the system files of dist/ (systemd units, udev rule, sysusers.d,
# modules-load.d, modprobe.d, /etc/lite/lite.conf).
#
#   tools/install.sh build      cargo build --release --locked of liblite, lite-admin and
#                               lite-bench (offline if CARGO_NET_OFFLINE=true), liblite's
#                               static link flags, the man pages (help2man); in
#                               $CARGO_TARGET_DIR (default target/)
#   tools/install.sh install [--destdir DIR] [--prefix /usr/local] [--libdir PREFIX/lib]
#                               [--sysconfdir /etc] [--unitdir DIR] [--udevrulesdir DIR]
#                               [--sysusersdir DIR] [--modulesloaddir DIR] [--modprobedir DIR]
#                               copy what `build` made into DIR; without DIR, into this
#                               system, then ldconfig, the lite group (systemd-sysusers)
#                               and a reload of systemd and udev.
#                               For PREFIX /usr, the system files go where this system's
#                               systemd and udev look (their pkg-config variables: on
#                               Debian 12, units and rules under /lib); for another
#                               PREFIX, to PREFIX/lib/{systemd/system,sysusers.d,
#                               modules-load.d}, and udev rules to /etc/udev/rules.d
#                               (udev reads nothing under /usr/local). The files meant
#                               to be edited, lite/lite.conf and modprobe.d/lite.conf, go
#                               to SYSCONFDIR and are kept if already there
#   tools/install.sh dkms [--destdir DIR]
#                               the module's source and dkms.conf in DIR/usr/src/lite-rs-
#                               VERSION/ (dkms/source-tree.sh); without DIR, dkms then
#                               builds and installs lite.ko for the running kernel
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "install: $*" >&2; exit 1; }

cargo=${CARGO:-cargo}
target=${CARGO_TARGET_DIR:-$top/target}
release=$target/release
out=$target/install   # what `build` makes besides cargo's own outputs
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
[ -n "$version" ] || die "no version in $top/Cargo.toml"
tools=(lite-admin lite-bench)

build() {
  command -v help2man >/dev/null || die "help2man is not installed (Debian package help2man)"
  cd "$top"
  "$cargo" build --release --locked -p liblite -p lite-admin -p lite-bench
  # What a program linked with liblite.a also needs (Rust's std): pkg-config --static.
  local note
  note=$("$cargo" rustc --release --locked -p liblite --lib -- --print native-static-libs 2>&1 \
    | sed -n 's/.*native-static-libs: //p' | tail -1)
  [ -n "$note" ] || die "rustc printed no native-static-libs for liblite"
  mkdir -p "$out/man"
  echo "$note" > "$out/libs-private"
  local t
  for t in "${tools[@]}"; do
    help2man --no-info --version-string="$version" --name="$("$release/$t" --help | head -1)" \
      --output="$out/man/$t.1" "$release/$t"
  done
}

# A directory systemd's or udev's pkg-config file names, else FALLBACK.
pcvar() {
  pkg-config --variable="$2" "$1" 2>/dev/null | grep . || echo "$3"
}

install_files() {
  local destdir="" prefix=/usr/local libdir="" sysconfdir=/etc unitdir="" udevrulesdir=""
  local sysusersdir="" modulesloaddir="" modprobedir=""
  while (($#)); do
    (($# >= 2)) || { usage >&2; exit 2; }
    case "$1" in
      --destdir) destdir=$2 ;;
      --prefix) prefix=$2 ;;
      --libdir) libdir=$2 ;;
      --sysconfdir) sysconfdir=$2 ;;
      --unitdir) unitdir=$2 ;;
      --udevrulesdir) udevrulesdir=$2 ;;
      --sysusersdir) sysusersdir=$2 ;;
      --modulesloaddir) modulesloaddir=$2 ;;
      --modprobedir) modprobedir=$2 ;;
      *) usage >&2; exit 2 ;;
    esac
    shift 2
  done
  libdir=${libdir:-$prefix/lib}
  if [ "$prefix" = /usr ]; then
    unitdir=${unitdir:-$(pcvar systemd systemdsystemunitdir /usr/lib/systemd/system)}
    udevrulesdir=${udevrulesdir:-$(pcvar udev udevdir /usr/lib/udev)/rules.d}
    sysusersdir=${sysusersdir:-$(pcvar systemd sysusersdir /usr/lib/sysusers.d)}
    modulesloaddir=${modulesloaddir:-$(pcvar systemd modulesloaddir /usr/lib/modules-load.d)}
  else
    unitdir=${unitdir:-$prefix/lib/systemd/system}
    udevrulesdir=${udevrulesdir:-/etc/udev/rules.d}
    sysusersdir=${sysusersdir:-$prefix/lib/sysusers.d}
    modulesloaddir=${modulesloaddir:-$prefix/lib/modules-load.d}
  fi
  modprobedir=${modprobedir:-$sysconfdir/modprobe.d}
  [ -f "$out/libs-private" ] || die "nothing built: run $0 build first"
  local d=$destdir t soname
  for t in "${tools[@]}"; do
    install -D -m 755 "$release/$t" "$d$prefix/bin/$t"
    install -D -m 644 "$out/man/$t.1" "$d$prefix/share/man/man1/$t.1"
  done

  # liblite.so.VERSION, and the links: liblite.so.0 (its soname, for programs) and
  # liblite.so (for the linker's -llite).
  soname=$(objdump -p "$release/liblite.so" | awk '$1 == "SONAME" {print $2}')
  [ "$soname" = liblite.so.0 ] || die "liblite.so's soname is '$soname', not liblite.so.0 (liblite/build.rs)"
  install -D -m 644 "$release/liblite.so" "$d$libdir/liblite.so.$version"
  ln -sf "liblite.so.$version" "$d$libdir/$soname"
  ln -sf "$soname" "$d$libdir/liblite.so"
  install -D -m 644 "$release/liblite.a" "$d$libdir/liblite.a"
  install -D -m 644 "$top/liblite/include/liblite.h" "$d$prefix/include/liblite.h"
  # pkg-config paths relative to ${prefix} where they are below it, so that
  # PKG_CONFIG_SYSROOT_DIR relocates them.
  local pcdir=$d$libdir/pkgconfig
  mkdir -p "$pcdir"
  sed -e "s|@prefix@|$prefix|" -e "s|@libdir@|${libdir/#$prefix/\$\{prefix\}}|" \
    -e "s|@includedir@|\${prefix}/include|" -e "s|@version@|$version|" \
    -e "s|@libs_private@|$(cat "$out/libs-private")|" \
    "$top/liblite/liblite.pc.in" > "$pcdir/liblite.pc"
  chmod 644 "$pcdir/liblite.pc"

  local dist=$top/dist f
  mkdir -p "$d$unitdir"
  for f in "$dist"/systemd/*.service; do
    # The units run lite-admin from where it is installed.
    t=$d$unitdir/$(basename "$f")
    sed "s|/usr/bin/lite-admin|$prefix/bin/lite-admin|g" "$f" > "$t"
    chmod 644 "$t"
  done
  install -D -m 644 "$dist"/udev/90-lite.rules "$d$udevrulesdir/90-lite.rules"
  install -D -m 644 "$dist"/sysusers.d/lite.conf "$d$sysusersdir/lite.conf"
  install -D -m 644 "$dist"/modules-load.d/lite.conf "$d$modulesloaddir/lite.conf"
  # The node's settings: never replaced once there (an operator's edits).
  for f in "$dist/modprobe.d/lite.conf:$modprobedir" "$dist/lite.conf:$sysconfdir/lite"; do
    t=$d${f#*:}/lite.conf
    if [ -e "$t" ]; then echo "install: keeping $t" >&2; else install -D -m 644 "${f%%:*}" "$t"; fi
  done
  [ -z "$destdir" ] || return 0
  # Installed on this system: what the packages' scripts do.
  ldconfig
  if command -v systemd-sysusers >/dev/null; then systemd-sysusers "$sysusersdir/lite.conf"; fi
  if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
  if [ -d /run/udev ]; then udevadm control --reload; fi
}

# What packaging does with dh_dkms, for a node without packages.
install_dkms() {
  local destdir=""
  case "${1:-}" in
    --destdir) (($# == 2)) || { usage >&2; exit 2; }; destdir=$2 ;;
    "") ;;
    *) usage >&2; exit 2 ;;
  esac
  local src=$destdir/usr/src/lite-rs-$version
  rm -rf "$src"
  "$top/dkms/source-tree.sh" "$src"
  sed "s/#MODULE_VERSION#/$version/" "$top/dkms/dkms.conf" > "$src/dkms.conf"
  [ -z "$destdir" ] || return 0
  command -v dkms >/dev/null || die "dkms is not installed: install it, then run dkms install lite-rs/$version"
  # A previous registration of this version would refuse the add.
  dkms remove "lite-rs/$version" --all >/dev/null 2>&1 || true
  dkms install "lite-rs/$version"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  build) build ;;
  install) install_files "$@" ;;
  dkms) install_dkms "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
