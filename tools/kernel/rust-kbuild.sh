#!/usr/bin/env bash
# Building an out-of-tree Rust module against a distribution's kernel: the checks and the
# preparation that tools/kernel/debian.sh (in its sid root) and the DKMS package's
# PRE_BUILD step (dkms/pre-build.sh, on a node) share. A Rust module must be built by
# the exact rustc the kernel was built with (its .rmeta files and symbol hashes depend
# on it), and needs the kernel's Rust metadata (rust/*.rmeta), which some headers
# packages (Debian's) do not ship: it is then made from the kernel's own source.
#
#   rust-kbuild.sh rust-on KDIR      exit 0 if KDIR's kernel has CONFIG_RUST on; else say
#                                    so, and which kernels have it
#   rust-kbuild.sh check KDIR        find the rustc and C compiler KDIR's config names
#                                    (CONFIG_RUSTC_VERSION_TEXT, CONFIG_CC_VERSION_TEXT);
#                                    print the make arguments that build with them
#   rust-kbuild.sh has-metadata KDIR exit 0 if KDIR has the Rust metadata, made by the
#                                    kernel's rustc
#   rust-kbuild.sh prepare HEADERS SOURCE SRCDIR OUT
#                                    make the metadata HEADERS lacks: unpack SOURCE (the
#                                    kernel's source tarball) into SRCDIR, modules_prepare
#                                    it with HEADERS' config into OUT, check that OUT's Rust
#                                    symbols are the ones the kernel exports; OUT/kmake-flags
#                                    then holds the make arguments for a module build in OUT
#
# KDIR and HEADERS are a kernel build tree: /lib/modules/<release>/build, or Debian's
# headers package's /usr/src/linux-headers-<release>. Missing tools stop it with the
# Debian/Ubuntu packages that provide them.
set -euo pipefail

me=rust-kbuild
die() { echo "$me: $*" >&2; exit 1; }
log() { echo "$me: $*" >&2; }
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# A value of KDIR's kernel config; quotes stripped.
cfg() {
  sed -n "s/^$2=\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$1/.config"
}

rust_on() {
  local kdir=$1 release
  [ -f "$kdir/.config" ] || die "no kernel config in $kdir: install the kernel's headers package (Debian: linux-headers-<release>)"
  [ "$(cfg "$kdir" CONFIG_RUST)" = y ] && return
  release=$(cat "$kdir/include/config/kernel.release" 2>/dev/null || echo "${kdir}")
  cat >&2 <<EOF
$me: kernel $release is built without Rust (CONFIG_RUST is off), so it cannot load
  LITE-RS, a Rust module. Kernels that have CONFIG_RUST on:
    - Debian sid/forky's stock kernels (7.x; tested: 7.2.13+deb14-amd64)
    - Ubuntu's kernels since 23.04 (with linux-lib-rust-<release>; untested)
    - a kernel you build with CONFIG_RUST=y (tested: 6.12 LTS)
  Debian 12 and 13's 6.12 kernels have it off.
EOF
  return 1
}

# The rustc whose --version is exactly the kernel's CONFIG_RUSTC_VERSION_TEXT: `rustc`,
# or a versioned one as Ubuntu ships them (rustc-1.80, /usr/lib/rust-1.80/bin/rustc).
find_rustc() {
  local kdir=$1 want code majmin c found=() seen=""
  want=$(cfg "$kdir" CONFIG_RUSTC_VERSION_TEXT)
  [ -n "$want" ] || die "$kdir/.config has no CONFIG_RUSTC_VERSION_TEXT"
  code=$(cfg "$kdir" CONFIG_RUSTC_VERSION)               # 109701 for 1.97.1
  majmin=$((code / 100000)).$((code / 100 % 1000))
  for c in "${RUSTC:-}" rustc "rustc-$majmin" "/usr/lib/rust-$majmin/bin/rustc"; do
    { [ -n "$c" ] && command -v "$c" >/dev/null; } || continue
    local got
    got=$("$c" --version 2>/dev/null || true)
    if [ "$got" = "$want" ]; then command -v "$c"; return; fi
    found+=("$c: ${got:-does not run}")
  done
  ((${#found[@]})) && seen=$(printf '\n    %s' "${found[@]}")
  die "the kernel was built with $want; no rustc here is that one.${seen:+ Found:$seen}
  Install that exact rustc and its rust-src: Debian: rustc and rust-src at the version
  of the suite the kernel comes from; Ubuntu: rustc-$majmin and rust-$majmin-src."
}

# The library source the kernel builds core from must be that rustc's own.
check_rust_src() {
  local rustc=$1 sysroot lib owner v1 v2
  sysroot=$("$rustc" --print sysroot)
  lib=$sysroot/lib/rustlib/src/rust/library/core/src/lib.rs
  [ -f "$lib" ] || die "no Rust library source for $rustc ($lib): install rust-src (Ubuntu: rust-<version>-src)"
  command -v dpkg-query >/dev/null || return 0
  owner=$(dpkg-query -S "$(realpath "$lib")" 2>/dev/null | cut -d: -f1) || return 0
  v1=$(dpkg-query -W -f '${source:Version}' "$owner")
  v2=$(dpkg-query -W -f '${source:Version}' "$(dpkg-query -S "$(realpath "$rustc")" | cut -d: -f1)")
  [ "$v1" = "$v2" ] || die "$owner ($v1) is not from the same rustc as $rustc ($v2): install the matching rust-src"
}

# The C compiler CONFIG_CC_VERSION_TEXT names, as make arguments. gcc: its first word
# (x86_64-linux-gnu-gcc-16 on Debian, which also gives CROSS_COMPILE); clang: LLVM=1.
# The version text must match; a different package revision of the same version only
# warns, as kbuild itself does for C.
cc_args() {
  local kdir=$1 want cc got num
  want=$(cfg "$kdir" CONFIG_CC_VERSION_TEXT)
  if [ "$(cfg "$kdir" CONFIG_CC_IS_CLANG)" = y ]; then
    cc=clang
  else
    cc=${want%% *}
  fi
  command -v "$cc" >/dev/null || die "the kernel was built with '$want'; $cc is not installed.
  Install it: Debian: ${cc#*-linux-gnu-} (the kernel's headers package depends on ${cc#*-linux-gnu-}-for-host)."
  got=$("$cc" --version | head -1)
  if [ "$got" != "$want" ]; then
    if [ "$cc" = clang ]; then num=$(cfg "$kdir" CONFIG_CLANG_VERSION); else num=$(cfg "$kdir" CONFIG_GCC_VERSION); fi
    local v
    v=$("$cc" -dumpfullversion -dumpversion 2>/dev/null | awk -F. '{printf "%d%02d%02d", $1, $2, $3}')
    [ "$v" = "$num" ] || die "the kernel was built with '$want'; $cc is '$got'. Install the kernel's compiler."
    log "warning: the kernel was built with '$want', $cc is '$got' (same version)"
  fi
  if [ "$cc" = clang ]; then
    echo "LLVM=1"
  else
    local cross=""
    case "$cc" in *-gcc*) cross=${cc%gcc*} ;; esac
    echo "${cross:+CROSS_COMPILE=$cross }CC=$cc HOSTCC=$cc"
  fi
}

karch() {
  local a
  for a in X86:x86 ARM64:arm64 RISCV:riscv LOONGARCH:loongarch; do
    [ "$(cfg "$1" "CONFIG_${a%%:*}")" = y ] && { echo "${a#*:}"; return; }
  done
  die "$1: an architecture the kernel's Rust support does not cover"
}

# Everything a module build against KDIR (or a tree prepared with its config) passes to
# make: the kernel's own compilers and release string.
kmake_args() {
  local kdir=$1 arch cc rustc release
  arch=$(karch "$kdir"); cc=$(cc_args "$kdir"); rustc=$(find_rustc "$kdir")
  release=$(cat "$kdir/include/config/kernel.release")
  echo "ARCH=$arch $cc RUSTC=$rustc HOSTRUSTC=$rustc KERNELRELEASE=$release"
}

has_metadata() {
  local kdir=$1 f want
  for f in rust/libcore.rmeta rust/libkernel.rmeta rust/libmacros.so; do
    [ -f "$kdir/$f" ] || return 1
  done
  # The rmeta header names the rustc that wrote it: metadata from another rustc is as
  # good as none.
  want=$(cfg "$kdir" CONFIG_RUSTC_VERSION_TEXT)
  head -c 1024 "$kdir/rust/libcore.rmeta" | grep -qaF "$want" && return
  log "$kdir/rust/libcore.rmeta was not made by $want, the kernel's rustc"
  return 1
}

# What modules_prepare needs besides the compilers, as command:Debian package.
PREPARE_TOOLS=(make:make flex:flex bison:bison bc:bc perl:perl pahole:dwarves xz:xz-utils
  bindgen:bindgen python3:python3)
need_prepare_tools() {
  local t missing=()
  for t in "${PREPARE_TOOLS[@]}"; do
    command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
  done
  # Headers the kernel's host tools compile against.
  [ -f /usr/include/gelf.h ] || missing+=(libelf-dev)
  [ -f /usr/include/openssl/opensslv.h ] || missing+=(libssl-dev)
  ((${#missing[@]} == 0)) || die "preparing the kernel's Rust metadata needs: ${missing[*]} (Debian/Ubuntu packages)"
}

prepare() {
  local headers=$1 source=$2 src=$3 out=$4 flags rustc want got bindgen
  rust_on "$headers"
  need_prepare_tools
  flags=$(kmake_args "$headers")
  rustc=$(find_rustc "$headers")
  check_rust_src "$rustc"
  want=$(cfg "$headers" CONFIG_BINDGEN_VERSION_TEXT); got=$(bindgen --version 2>/dev/null | head -1 || true)
  [ "$want" = "$got" ] || log "warning: the kernel's bindings were made by '$want', this system has '$got'"
  bindgen=$(command -v bindgen)
  if [ ! -f "$src/.extracted" ]; then
    log "unpacking $source into $src"
    rm -rf "$src" && mkdir -p "$src"
    nice -n 19 tar -xf "$source" -C "$src" --strip-components=1
    touch "$src/.extracted"
  fi
  rm -rf "$out" && mkdir -p "$out"
  cp "$headers/.config" "$out/.config"
  log "preparing $out (modules_prepare: scripts, headers and the rust/ crates; several minutes)"
  # shellcheck disable=SC2086  # flags is a list of make arguments
  nice -n 19 make -s -C "$src" O="$out" $flags BINDGEN="$bindgen" olddefconfig >&2
  if ! diff -q "$headers/.config" "$out/.config" >/dev/null; then
    diff "$headers/.config" "$out/.config" | grep '^[<>] CONFIG' >&2 || true
    die "olddefconfig changed the kernel's config (above): the toolchain differs from the kernel's"
  fi
  # shellcheck disable=SC2086
  nice -n 19 make -s -C "$src" O="$out" $flags BINDGEN="$bindgen" -j"$(nproc)" modules_prepare \
    >"$out.log" 2>&1 || { tail -30 "$out.log" >&2; die "modules_prepare failed (log: $out.log)"; }
  [ "$(cat "$out/include/config/kernel.release")" = "$(cat "$headers/include/config/kernel.release")" ] \
    || die "$out's kernel.release is not the headers' $(cat "$headers/include/config/kernel.release")"
  # The kernel's symbol table (CRCs, exporters) and its BTF base for module BTF.
  cp "$headers/Module.symvers" "$out/Module.symvers"
  [ -f "$headers/vmlinux" ] && cp "$headers/vmlinux" "$out/vmlinux"
  # A module build needs the same arguments on make's command line (the top Makefile
  # re-invokes itself with -f, so a wrapper Makefile's settings would be lost).
  echo "$flags" > "$out/kmake-flags"
  check_rust_exports "$out"
}

# The Rust symbols our rust/ objects define must be exactly those the kernel exports
# (same crate hashes, hence same rustc and flags): else modules would not link against
# it at load time.
check_rust_exports() {
  local out=$1 ours theirs missing
  ours=$(nm --defined-only -g "$out"/rust/*.o 2>/dev/null | awk '$3 ~ /^_R/ {print $3}' | sort -u)
  theirs=$(awk '$2 ~ /^_R/ {print $2}' "$out/Module.symvers" | sort -u)
  [ -n "$theirs" ] || die "the kernel's Module.symvers exports no Rust symbol"
  missing=$(comm -13 <(echo "$ours") <(echo "$theirs"))
  log "Rust exports: $(echo "$theirs" | wc -l) in the kernel, $(echo -n "$missing" | grep -c '' || true) of them not defined by our rust/ build"
  [ -z "$missing" ] || die "our rust/ crates differ from the kernel's (symbol hashes): $(echo "$missing" | head -3 | tr '\n' ' ')"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  rust-on) [ $# = 1 ] || { usage >&2; exit 2; }; rust_on "$1" ;;
  check) [ $# = 1 ] || { usage >&2; exit 2; }; rust_on "$1"; kmake_args "$1" ;;
  has-metadata) [ $# = 1 ] || { usage >&2; exit 2; }; has_metadata "$1" ;;
  prepare) [ $# = 4 ] || { usage >&2; exit 2; }; prepare "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
