#!/usr/bin/env bash
# The Debian packages of LITE-RS (debian/, docs/install.md), built and checked.
#
#   tools/deb.sh [build]   build lite-rs-dkms, lite-rs-tools, liblite0 and liblite-dev
#                          into build/deb/ from a copy of the tree as it is (committed or
#                          not), then run lintian on them, which must report no error
#                          (its whole report: build/deb/lintian.txt)
#   tools/deb.sh check     what a user of the packages relies on, from the built .debs:
#                          liblite.so's soname; a C program (apps/c-hello) built with
#                          `pkg-config --cflags --libs liblite` against the -dev package
#                          links the shared library by its soname; the DKMS source is
#                          complete and its dkms.conf versioned; lite-rs-tools has the
#                          units, rules and files where systemd, udev and kmod look
#   tools/deb.sh next VERSION DIR
#                          the packages of build/deb/ again, at VERSION, into DIR: the
#                          same build under a later version, for the upgrade test
#                          (vmtests/packages.py); DKMS sees another module version
#
# `make lite/helpers_ffi.rs` must have run (make deb does). Cargo builds offline into
# target/deb in the tree (with debug information for the -dbgsym packages) with the
# rustc on PATH: dpkg's build-dependency check is skipped because that rustc may be
# rustup's, which dpkg does not know.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/deb
die() { echo "deb: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
# rustup's cargo may be missing from a non-login PATH.
[ -d "$HOME/.cargo/bin" ] && PATH=$PATH:$HOME/.cargo/bin

version=$(dpkg-parsechangelog -l "$top/debian/changelog" -S Version)
arch=$(dpkg-architecture -q DEB_HOST_ARCH)
multiarch=$(dpkg-architecture -q DEB_HOST_MULTIARCH)

build() {
  local t0=$SECONDS src f
  for f in dpkg-buildpackage dh dh_dkms lintian help2man; do
    command -v "$f" >/dev/null || die "$f is missing: run tools/deps.sh"
  done
  [ -f "$top/lite/helpers_ffi.rs" ] || die "no lite/helpers_ffi.rs: run make lite/helpers_ffi.rs"
  src=$out/lite-rs-$version
  rm -rf "$out" && mkdir -p "$src"
  # The files git would commit (tracked and new, not ignored) that exist now, plus the
  # generated bindings the DKMS source ships.
  (cd "$top" && git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
    | cpio --quiet -0 -pdm "$src" && cp lite/helpers_ffi.rs "$src/lite/")
  (cd "$src" && CARGO_TARGET_DIR=$top/target/deb dpkg-buildpackage -b -us -uc -d) >"$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log" >&2; die "dpkg-buildpackage failed (log: $out/build.log)"; }
  local rc=0
  lintian --fail-on error --display-info --tag-display-limit 0 "$out/lite-rs_${version}_$arch.changes" \
    >"$out/lintian.txt" 2>&1 || rc=$?
  cat "$out/lintian.txt"
  [ "$rc" = 0 ] || die "lintian reported errors (above)"
  rm -rf "$src"
  ls -s --block-size=K "$out"/*.deb
  echo "deb: built and linted in $((SECONDS - t0)) s: $out"
}

check() {
  local t d
  tmp=$(mktemp -d)   # global: the EXIT trap runs after check has returned
  trap 'rm -rf "$tmp"' EXIT
  for d in liblite0 liblite-dev lite-rs-tools; do
    dpkg-deb -x "$out/${d}_${version}_$arch.deb" "$tmp/root"
  done
  dpkg-deb -x "$out/lite-rs-dkms_${version}_all.deb" "$tmp/root"
  local lib=$tmp/root/usr/lib/$multiarch
  [ "$(objdump -p "$lib/liblite.so.0" | awk '$1 == "SONAME" {print $2}')" = liblite.so.0 ] \
    || die "liblite.so.0 has no soname liblite.so.0"

  # As a user would, against the installed header and library only.
  local flags
  flags=$(PKG_CONFIG_SYSROOT_DIR=$tmp/root PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_LIBDIR=/nonexistent \
    pkg-config --cflags --libs liblite)
  # shellcheck disable=SC2086  # flags is a list of compiler arguments
  cc -O2 -Wall -Wextra -Werror "$top/apps/c-hello/hello.c" $flags -lpthread -o "$tmp/hello"
  readelf -d "$tmp/hello" | grep -q 'NEEDED.*\[liblite\.so\.0\]' || die "hello does not need liblite.so.0"
  LD_LIBRARY_PATH=$lib ldd "$tmp/hello" | grep -q "liblite.so.0 => $lib/liblite.so.0" \
    || die "hello does not load $lib/liblite.so.0"

  local dkms=$tmp/root/usr/src/lite-rs-$version
  grep -qx "PACKAGE_VERSION=\"$version\"" "$dkms/dkms.conf" || die "dkms.conf is not at version $version"
  for t in Kbuild lite/lite_main.rs lite/helpers_ffi.rs uapi/src/abi/mod.rs dkms/pre-build.sh \
      dkms/post-build.sh include/lite/kapi.h tools/kernel/rust-kbuild.sh; do
    [ -f "$dkms/$t" ] || die "the DKMS source has no $t"
  done
  for t in pre-build.sh post-build.sh; do
    [ -x "$dkms/dkms/$t" ] || die "dkms/$t is not executable (dkms would skip it)"
  done
  # Units and rules are under /lib when built on Debian 12 (its systemd's and udev's
  # directories), under /usr/lib later: the same place on a merged-/usr system.
  for t in usr/bin/lite-admin usr/bin/lite-bench usr/share/man/man1/lite-admin.1.gz \
      lib/systemd/system/lite-agent.service lib/systemd/system/lite-manager.service \
      lib/udev/rules.d/90-lite.rules usr/lib/sysusers.d/lite.conf \
      usr/lib/modules-load.d/lite.conf etc/modprobe.d/lite.conf etc/lite/lite.conf; do
    [ -e "$tmp/root/$t" ] || [ -e "$tmp/root/usr/$t" ] || die "lite-rs-tools has no /$t"
  done
  echo "deb: the packages check out (soname, pkg-config, C program, DKMS source, system files)"
}

# Each package unpacked, its version (and the DKMS module's, in dkms.conf, the source
# directory's name and the maintainer scripts dh_dkms wrote) set to $1, packed again.
next_version() {
  local new=$1 dir=$2 deb pkg d f
  [[ $new =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || die "not a Debian version: '$new'"
  rm -rf "$dir" && mkdir -p "$dir"
  for deb in "$out"/*_"$version"_*.deb; do
    case "$deb" in *-dbgsym_*) continue ;; esac
    pkg=$(basename "$deb"); pkg=${pkg%%_*}
    d=$dir/$pkg.tree
    dpkg-deb -R "$deb" "$d"
    sed -i -e "s/^Version: .*/Version: $new/" -e "s/(= $version)/(= $new)/g" "$d/DEBIAN/control"
    if [ -d "$d/usr/src/lite-rs-$version" ]; then
      mv "$d/usr/src/lite-rs-$version" "$d/usr/src/lite-rs-$new"
      sed -i "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$new\"/" "$d/usr/src/lite-rs-$new/dkms.conf"
      sed -i "s|usr/src/lite-rs-$version/|usr/src/lite-rs-$new/|" "$d/DEBIAN/md5sums"
      (cd "$d" && md5sum "usr/src/lite-rs-$new/dkms.conf") > "$d/md5.new"
      grep -v " usr/src/lite-rs-$new/dkms.conf\$" "$d/DEBIAN/md5sums" >> "$d/md5.new"
      mv "$d/md5.new" "$d/DEBIAN/md5sums"
      for f in "$d"/DEBIAN/{postinst,prerm,postrm,preinst}; do
        [ -f "$f" ] && sed -i "s/^DKMS_VERSION=$version\$/DKMS_VERSION=$new/" "$f"
      done
    fi
    dpkg-deb -b --root-owner-group "$d" "$dir" >/dev/null
    rm -rf "$d"
  done
  ls "$dir"
}

case "${1:-build}" in
  build) build ;;
  check) check ;;
  next) [ $# = 3 ] || { usage >&2; exit 2; }; next_version "$2" "$3" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
