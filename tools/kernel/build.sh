#!/usr/bin/env bash
# Build the guest kernel (Linux 6.12 from Debian's linux-source-6.12, Rust enabled,
# with the testbed's patches in tools/kernel/patches/) into a cache outside the
# repository, keyed by kernel version, patches, variant and config.
#   tools/kernel/build.sh [release|debug]       build if needed, print the output dir
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../env.sh"
usage="usage: $0 [release|debug]   build the guest kernel if needed and print its output directory
  release: guest.config; debug: guest.config + debug.config (KASAN, lockdep, kmemleak)
  cache: \$LITE_CACHE (default ~/.cache/lite-rs), one directory per version, variant and config"
variant=${1:-release}
case "$variant" in
  release|debug) ;;
  -h|--help) echo "$usage"; exit 0 ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

tarball=/usr/src/linux-source-6.12.tar.xz
[ -f "$tarball" ] || { echo "kernel: $tarball missing; run tools/deps.sh" >&2; exit 1; }
version=$(dpkg-query -W -f='${Version}' linux-source-6.12)
fragments=("$here/guest.config")
[ "$variant" = debug ] && fragments+=("$here/debug.config")
patches=("$here"/patches/*.patch)
patched=$(cat "${patches[@]}" | sha256sum | cut -c1-8)
key=$( (echo "$version"; /usr/bin/rustc --version; cat "${fragments[@]}" "${patches[@]}") | sha256sum | cut -c1-12)
src=$LITE_CACHE/linux-$version-$patched
out=$LITE_CACHE/kernel-$version-$variant-$key
if [ -f "$out/done" ]; then echo "$out"; exit 0; fi

log() { echo "kernel: $*" >&2; }
if [ ! -f "$src/.extracted" ]; then
  log "extracting $tarball and applying ${#patches[@]} patch(es) (once)"
  rm -rf "$src" && mkdir -p "$src"
  tar -xf "$tarball" -C "$src" --strip-components=1
  for p in "${patches[@]}"; do patch -s -d "$src" -p1 < "$p"; done
  touch "$src/.extracted"
  # Trees with other patch sets are dead weight.
  for old in "$LITE_CACHE"/linux-"$version"*; do
    [ "$old" = "$src" ] || rm -rf "$old"
  done
fi

mkflags=(LLVM=1 RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc "BINDGEN=$LITE_TOOLBIN/bindgen")
rm -rf "$out" && mkdir -p "$out/build"
# merge_config.sh's inner make calls ignore RUSTC=, so Debian's rustc must come first in PATH.
export PATH="$LITE_TOOLBIN:$PATH"
log "configuring $variant ($out)"
make -s -C "$src" O="$out/build" "${mkflags[@]}" tinyconfig >&2
(cd "$src" && KCONFIG_CONFIG="$out/build/.config" scripts/kconfig/merge_config.sh -m -O "$out/build" \
  "$out/build/.config" kernel/configs/kvm_guest.config "${fragments[@]}" >/dev/null)
make -s -C "$src" O="$out/build" "${mkflags[@]}" olddefconfig >&2
# tinyconfig silently drops options whose dependencies are missing: check every line took.
bad=0
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*) opt=${line%%=*}; want=${line#*=} ;;
    "# CONFIG_"*" is not set") opt=${line#"# "}; opt=${opt%% *}; want=n ;;
    *) continue ;;
  esac
  got=$(grep -E "^$opt=|^# $opt is not set" "$out/build/.config" || true)
  case "$got" in "$opt=$want") ;; "# $opt is not set") [ "$want" = n ] || { log "config: $opt wanted $want, not set"; bad=1; } ;;
    "") [ "$want" = n ] || { log "config: $opt wanted $want, missing"; bad=1; } ;;
    *) log "config: $opt wanted $want, got ${got#*=}"; bad=1 ;; esac
done < <(cat "${fragments[@]}")
[ $bad = 0 ] || { log "config fragment did not apply"; exit 1; }
make -s -C "$src" O="$out/build" "${mkflags[@]}" rustavailable >&2

log "building $variant kernel (cold build takes several minutes on 2 cores)"
start=$(date +%s)
make -s -C "$src" O="$out/build" "${mkflags[@]}" -j"$(nproc)" bzImage modules >&2
make -s -C "$src" O="$out/build" "${mkflags[@]}" modules_install INSTALL_MOD_PATH="$out/modroot" INSTALL_MOD_STRIP=1 >&2
cp "$out/build/arch/x86/boot/bzImage" "$out/bzImage"
log "built in $(( $(date +%s) - start )) s"
touch "$out/done"
# Builds for older configs of this variant are dead weight: keep only this one.
for old in "$LITE_CACHE"/kernel-*-"$variant"-*; do
  [ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out"
