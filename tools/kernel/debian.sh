#!/usr/bin/env bash
# Debian's stock kernel (sid's current 7.x, CONFIG_RUST=y) for out-of-tree Rust modules.
# Its headers package carries no Rust metadata, so this script prepares it from Debian's
# own source package with the exact toolchain the kernel was built with, run in a sid
# root (debootstrap) where the kernel's headers and source packages are installed, by
# the DKMS package's own PRE_BUILD step (dkms/pre-build.sh): the prepared tree lies
# where lite-rs-dkms looks for it on a node, /var/cache/lite-rs-dkms/<release>. Everything
# lives in $LITE_CACHE/debian; versions are resolved from sid's package lists each run,
# never hard-coded.
#
#   tools/kernel/debian.sh [prepare]     everything below; print the prepared build dir
#                                        (its path inside the sid root)
#   tools/kernel/debian.sh fetch         what prepare downloads and installs, without the
#                                        build (make test runs it beside a kernel build)
#   tools/kernel/debian.sh resolve       print the resolved package versions
#   tools/kernel/debian.sh stock         download + unpack the packages; print their root
#   tools/kernel/debian.sh guest         bzImage + the modules the virtual cluster needs
#   tools/kernel/debian.sh hello         build a scratch Rust module, compare its vermagic
#   tools/kernel/debian.sh run CMD...    run CMD in the sid root (the current directory,
#                                        $LITE_CACHE/debian/work and $DEBIAN_BIND bound
#                                        at their host paths)
#   tools/kernel/debian.sh make ARGS...  make -C <prepared dir> <its kmake-flags> ARGS in
#                                        the sid root, e.g. `make M=$PWD modules`
# Environment: DEBIAN_KERNEL_LINE (7), DEBIAN_SUITE (sid), DEBIAN_MIRROR (the mirror the
# host's apt uses), DEBIAN_LISTS_MAX_AGE (seconds between list refreshes, 21600),
# DEBIAN_OVERLAY (run/make: a directory whose upper/ takes every change the command
# makes to the sid root, which stays as it was, e.g. to install packages into a copy).
# The checks and the preparation that DKMS does on a node too are tools/kernel/rust-kbuild.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/env.sh
. "$here/../env.sh"

line=${DEBIAN_KERNEL_LINE:-7}
suite=${DEBIAN_SUITE:-sid}
flavour=amd64
deb=$LITE_CACHE/debian
work=$deb/work
root=$deb/root
log() { echo "debian: $*" >&2; }
die() { echo "debian: $*" >&2; exit 1; }

usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
cmd=${1:-prepare}
[ $# -gt 0 ] && shift
case "$cmd" in
  prepare|fetch|resolve|stock|guest|hello|run|make) ;;
  -h|--help|help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount namespaces)"
mkdir -p "$deb" "$work"
# One preparer at a time; `run`/`make` only read what `prepare` made.
[ "$cmd" = run ] || { exec 9>"$deb/.lock"; flock 9; }

need_host() {  # host tools this needs: Debian 12 packages
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v xz >/dev/null || missing+=(xz-utils)
  command -v depmod >/dev/null || missing+=(kmod)
  ((${#missing[@]} == 0)) && return
  log "installing host packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# ---- 1. resolve versions from sid's package lists (a private list dir) ----
mirror=${DEBIAN_MIRROR:-$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
  | grep -m1 -E '/debian/?$' || true)}
[ -n "$mirror" ] || mirror=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -m1 -E '/debian/?$' || true)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list{,.d}: set DEBIAN_MIRROR"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
apt_opts=(-o "Dir::Etc::sourcelist=$deb/apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent
  -o "Dir::State::Lists=$deb/apt/lists" -o "Dir::Cache=$deb/apt/cache" -o Dir::State::status=/dev/null
  -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false)
sapt() { apt-get "${apt_opts[@]}" "$@"; }
scache() { apt-cache "${apt_opts[@]}" "$@"; }

update_lists() {
  mkdir -p "$deb/apt/lists/partial" "$deb/apt/cache"
  local trust="[trusted=yes]"
  [ -f "$keyring" ] && trust="[signed-by=$keyring]"
  echo "deb $trust $mirror $suite main" > "$deb/apt/sources.list.new"
  local stamp=$deb/apt/updated max=${DEBIAN_LISTS_MAX_AGE:-21600}
  if cmp -s "$deb/apt/sources.list.new" "$deb/apt/sources.list" && [ -f "$stamp" ] \
     && (( $(date +%s) - $(stat -c %Y "$stamp") < max )); then
    rm "$deb/apt/sources.list.new"; return
  fi
  mv "$deb/apt/sources.list.new" "$deb/apt/sources.list"
  log "updating $suite's package lists from $mirror"
  sapt update -q >/dev/null 2>"$deb/apt/update.err" || { cat "$deb/apt/update.err" >&2; die "apt-get update failed"; }
  touch "$stamp"
}

# Candidate versions of every package resolve() may ask for, read in one apt-cache call.
declare -A cand=()
load_candidates() {
  local p v
  while read -r p v; do cand[$p]=$v; done < <(scache policy "$@" 2>/dev/null \
    | awk '/^[^ ].*:$/ {p = substr($0, 1, length($0) - 1)} /Candidate:/ && $2 != "(none)" {print p, $2}')
}
candidate() { echo "${cand[$1]:-}"; }

resolve() {
  update_lists
  # The newest linux-headers-<line>.x.y+debN-amd64 in the lists: its ABI names the rest.
  abi=$(scache pkgnames linux-headers- | grep -E "^linux-headers-${line}\.[0-9]+\.[0-9]+[^-]*-${flavour}$" \
        | sed -E "s/^linux-headers-(.*)-${flavour}$/\1/" | sort -V | tail -1)
  [ -n "$abi" ] || die "no linux-headers-${line}.*-${flavour} in $suite"
  release=$abi-$flavour
  load_candidates "linux-headers-$release" "linux-binary-unsigned-$release" "linux-image-$release-unsigned" \
    "linux-image-$release" "linux-headers-$abi-common" "linux-kbuild-$abi" "linux-source-${abi%.*}" \
    "linux-base-$release" "linux-modules-$release" rustc rust-src bindgen
  kver=$(candidate "linux-headers-$release")
  majmin=$(echo "$abi" | grep -oE '^[0-9]+\.[0-9]+')
  image=linux-binary-unsigned-$release
  [ -n "$(candidate "$image")" ] || image=linux-image-$release-unsigned
  [ -n "$(candidate "$image")" ] || image=linux-image-$release
  pkgs=("$image" "linux-headers-$release" "linux-headers-$abi-common" "linux-kbuild-$abi" "linux-source-$majmin")
  for p in "linux-base-$release" "linux-modules-$release"; do  # split out of the image since 7.x
    [ -n "$(candidate "$p")" ] && pkgs+=("$p")
  done
  for p in "${pkgs[@]}"; do
    v=$(candidate "$p")
    [ "$v" = "$kver" ] || die "$p is at '${v:-missing}', not $kver: $suite is mid-upload, retry later"
  done
  rustc_v=$(candidate rustc); rustsrc_v=$(candidate rust-src); bindgen_v=$(candidate bindgen)
  if [ -z "$rustc_v" ] || [ -z "$rustsrc_v" ] || [ -z "$bindgen_v" ]; then die "rustc/rust-src/bindgen missing in $suite"; fi
  stock=$work/stock-$release-$kver
  kbuild=/var/cache/lite-rs-dkms/$release/build   # in the sid root
}

print_resolved() {
  echo "suite $suite ($mirror), kernel line $line.x:"
  echo "  kernel release  $release (packages at $kver)"
  for p in "${pkgs[@]}"; do printf '  %-42s %s\n' "$p" "$kver"; done
  printf '  %-42s %s\n' rustc "$rustc_v" rust-src "$rustsrc_v" bindgen "$bindgen_v"
}

# ---- downloads and the unpacked stock packages ----
download() {
  mkdir -p "$deb/debs"
  local want=() p f
  for p in "${pkgs[@]}"; do
    f=$(find "$deb/debs" -maxdepth 1 -name "${p}_${kver//:/%3a}_*.deb" | head -1)
    [ -n "$f" ] || want+=("$p=$kver")
  done
  if ((${#want[@]})); then
    log "downloading ${want[*]}"
    local t0=$SECONDS
    (cd "$deb/debs" && sapt download -q "${want[@]}" >/dev/null 2>"$deb/debs/download.err") \
      || { cat "$deb/debs/download.err" >&2; die "download failed"; }
    log "downloaded $(du -ch "$deb"/debs/*_"${kver//:/%3a}"_*.deb | tail -1 | cut -f1) in $((SECONDS - t0)) s"
  fi
  # Packages of other versions are dead weight.
  for f in "$deb"/debs/*.deb; do
    case "$f" in *_"${kver//:/%3a}"_*) ;; *) rm -f "$f" ;; esac
  done
}

unpack_stock() {
  [ -f "$stock/.done" ] && return
  download
  log "unpacking the stock packages into $stock"
  rm -rf "$stock" && mkdir -p "$stock"
  local p
  for p in "${pkgs[@]}"; do
    case "$p" in linux-source-*) continue ;; esac
    dpkg-deb -x "$deb/debs/${p}_${kver//:/%3a}_"*.deb "$stock"
  done
  ln -s usr/lib "$stock/lib"
  local mods=$stock/usr/lib/modules/$release
  [ -f "$mods/modules.dep" ] || depmod -b "$stock" "$release"
  for f in "$mods"/vmlinuz.unsigned "$mods"/vmlinuz "$stock/boot/vmlinuz-$release"; do
    [ -f "$f" ] && { ln -sf "${f#"$stock"/}" "$stock/bzImage"; break; }
  done
  [ -e "$stock/bzImage" ] || die "no vmlinuz in ${pkgs[*]}"
  for old in "$work"/stock-*; do [ "$old" = "$stock" ] || rm -rf "$old"; done
  touch "$stock/.done"
}

headers() { echo "$stock/usr/src/linux-headers-$release"; }
cfg() { sed -n "s/^$1=\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$(headers)/.config"; }

# ---- 2. the sid root with the kernel's exact toolchain ----
# Runs "$@" chrooted in the sid root, in a private mount namespace (nothing outlives
# it) where the work dir, $DEBIAN_BIND and $cwd (default /) have their host paths.
# With DEBIAN_OVERLAY, the root is an overlay of it whose changes go to that directory.
in_root() {
  local binds=("$work" "$here") d dir=${cwd:-/} top=$root ov=${DEBIAN_OVERLAY:-}
  for d in ${DEBIAN_BIND:-} "$dir"; do
    case "$d" in /|"$root"|"$root"/*|"$work"|"$work"/*) ;; *) binds+=("$(realpath "$d")") ;; esac
  done
  if [ -n "$ov" ]; then
    ov=$(realpath -m "$ov") && mkdir -p "$ov"/{upper,work,merged} && top=$ov/merged
  fi
  # shellcheck disable=SC2016  # expanded by the inner bash
  unshare --mount --propagation private -- bash -c '
    set -e; root=$1; n=$2; lower=$3; ov=$4; shift 4
    [ -z "$ov" ] || mount -t overlay overlay -o "lowerdir=$lower,upperdir=$ov/upper,workdir=$ov/work" "$root"
    for ((i = 0; i < n; i++)); do mkdir -p "$root$1"; mount --bind "$1" "$root$1"; shift; done
    mount -t proc proc "$root/proc"; mount --bind /dev "$root/dev"
    cwd=$1; shift
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      TERM=dumb bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"' _ "$top" "${#binds[@]}" "$root" "$ov" "${binds[@]}" "$dir" "$@"
}

make_root() {
  if [ ! -f "$root/.debootstrapped" ]; then
    log "debootstrap $suite into $root (once, ~1 min, ~230 MB)"
    rm -rf "$root.tmp"
    local t0=$SECONDS
    nice -n 19 debootstrap --variant=minbase --keyring="$keyring" "$suite" "$root.tmp" "$mirror" \
      >"$deb/debootstrap.log" 2>&1 || { tail -20 "$deb/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$root" && mv "$root.tmp" "$root"
    log "debootstrapped in $((SECONDS - t0)) s"
    touch "$root/.debootstrapped"
  fi
  gccver=$(cfg CONFIG_CC_VERSION_TEXT | grep -oE 'gcc-[0-9]+' | head -1)
  [ -n "$gccver" ] || die "CONFIG_CC_VERSION_TEXT='$(cfg CONFIG_CC_VERSION_TEXT)': not a Debian gcc-NN"
  toolchain=(rustc rust-src bindgen "$gccver" gcc make flex bison bc python3 libelf-dev libssl-dev
             dwarves cpio kmod xz-utils openssl)
  # What a node of the packages' test runs (vmtests/packages.py boots an overlay of
  # this root with systemd as init): systemd, udev, dkms (the packages' dependencies),
  # linux-source (which lite-rs-dkms depends on), iproute2 (rdma link), pkgconf for
  # liblite.pc, the stock kernel's modules.
  toolchain+=(systemd-sysv udev dbus dkms linux-source iproute2 pkgconf libc6-dev procps util-linux passwd)
  # The kernel's own packages that a module build needs, as a node has them installed.
  local p f kdebs=()
  for p in "linux-headers-$release" "linux-headers-$abi-common" "linux-kbuild-$abi" "linux-source-$majmin" \
      "linux-modules-$release"; do
    f=$(ls "$deb/debs/${p}_${kver//:/%3a}_"*.deb 2>/dev/null) && kdebs+=("$f")
  done
  local stamp="${toolchain[*]} $rustc_v $rustsrc_v $bindgen_v ${kdebs[*]##*/}"
  if [ "$(cat "$root/.toolchain" 2>/dev/null)" != "$stamp" ]; then
    log "installing the toolchain into the sid root: ${toolchain[*]}"
    local t0=$SECONDS
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    # As the host's apt does (a mirror that serves a frozen snapshot has an expired
    # Release). Not `apt-config dump | grep -q`: grep's early exit fails the pipe.
    local valid_until=""
    eval "$(apt-config shell valid_until Acquire::Check-Valid-Until)"
    [ "$valid_until" = false ] \
      && echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99lite-host"
    in_root apt-get update -q >/dev/null
    # Another kernel's packages (an older stamp) go first.
    local old=()
    # shellcheck disable=SC2016  # dpkg-query's format, not the shell's
    mapfile -t old < <(in_root dpkg-query -W -f '${Package} ${Version}\n' 'linux-headers-*' 'linux-kbuild-*' \
      'linux-source-*' 'linux-modules-*' 2>/dev/null | awk -v v="$kver" '$2 != "" && $2 != v {print $1}')
    ((${#old[@]} == 0)) || in_root env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${old[@]}" >/dev/null
    DEBIAN_BIND=$deb/debs in_root env DEBIAN_FRONTEND=noninteractive nice -n 19 apt-get install -y -q \
      --no-install-recommends "${toolchain[@]}" "${kdebs[@]}" >"$deb/toolchain.log" 2>&1 \
      || { tail -20 "$deb/toolchain.log" >&2; die "toolchain install failed"; }
    in_root apt-get clean
    log "toolchain installed in $((SECONDS - t0)) s"
    echo "$stamp" > "$root/.toolchain"
  fi
}

# The kernel's config names the compilers it was built with; the root must have them.
check_toolchain() {
  in_root "$here/rust-kbuild.sh" check "$(headers)" >/dev/null || die "the sid root's toolchain is not the kernel's (above).
  Wait until $suite's kernel, rustc and $gccver agree again, or set DEBIAN_MIRROR to a
  snapshot of the archive (snapshot.debian.org) that has all three."
  log "toolchain matches the kernel: $(cfg CONFIG_RUSTC_VERSION_TEXT); $(cfg CONFIG_CC_VERSION_TEXT)"
}

# ---- 3. the Rust metadata: a prepared build dir from Debian's own source ----
# DKMS's PRE_BUILD step, run from a copy (it leaves kmake-args beside itself): it checks
# the toolchain and prepares the tree once per kernel, then returns in a second.
prepare_kbuild() {
  local t0=$SECONDS pre=$work/pre-build
  rm -rf "$pre" && mkdir -p "$pre/dkms" "$pre/tools/kernel"
  cp "$here/../../dkms/pre-build.sh" "$pre/dkms/"
  cp "$here/rust-kbuild.sh" "$pre/tools/kernel/"
  in_root "$pre/dkms/pre-build.sh" "$release" "/usr/lib/modules/$release/build" >&2
  [ -f "$root$kbuild/kmake-flags" ] || die "dkms/pre-build.sh left no $kbuild/kmake-flags"
  rm -rf "$work"/kbuild-* "$work"/linux-*   # where trees were prepared before
  log "prepared in $((SECONDS - t0)) s: $kbuild in the sid root"
}

# ---- 3b. proof: a scratch Rust module built against it ----
hello() {
  local d=$work/hello
  rm -rf "$d" && mkdir -p "$d"
  cat > "$d/lite_hello.rs" <<'EOF'
// SPDX-License-Identifier: GPL-2.0
//! Scratch check (tools/kernel/debian.sh hello): a Rust module for the stock kernel.
use kernel::prelude::*;

module! {
    type: LiteHello,
    name: "lite_hello",
    authors: ["LITE-RS"],
    description: "out-of-tree Rust build check for a stock kernel",
    license: "GPL",
}

struct LiteHello;

impl kernel::Module for LiteHello {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("lite_hello: loaded\n");
        Ok(LiteHello)
    }
}

impl Drop for LiteHello {
    fn drop(&mut self) {
        pr_info!("lite_hello: unloaded\n");
    }
}
EOF
  echo 'obj-m := lite_hello.o' > "$d/Kbuild"
  local t0=$SECONDS
  # shellcheck disable=SC2046  # kmake-flags is a list of make arguments
  cwd=$d in_root nice -n 19 make -s -C "$kbuild" $(cat "$root$kbuild/kmake-flags") M="$d" modules >&2 || die "the hello module did not build"
  local ours theirs ref
  ref=$(find "$stock/usr/lib/modules/$release/kernel" -name 'rdma_rxe.ko*' | head -1)
  ours=$(modinfo -F vermagic "$d/lite_hello.ko")
  theirs=$(modinfo -F vermagic "$ref")
  log "hello built in $((SECONDS - t0)) s: vermagic '$ours'; stock rdma_rxe: '$theirs'"
  [ "$ours" = "$theirs" ] || die "vermagic differs"
  echo "$d/lite_hello.ko"
}

# ---- 4. what the virtual cluster boots: the stock bzImage and a few of its modules ----
# Drivers the 6.12 guest kernel has built in that the stock kernel has as modules, and
# the RDMA stack; their dependencies come from the package's modules.dep.
GUEST_MODULES=(virtio_net 9pnet_virtio 9p rdma_rxe ib_uverbs ib_umad rdma_ucm)
guest_dir() {
  local g=$work/guest-$release-$kver
  if [ ! -f "$g/.done" ]; then
    rm -rf "$g" && mkdir -p "$g"
    local from=$stock/usr/lib/modules/$release to=$g/modroot/lib/modules/$release
    mkdir -p "$to"
    cp "$from"/modules.{order,builtin,builtin.modinfo} "$to"/
    # modules.dep lists each module's dependencies, deepest last: load those first.
    local order=() m path
    declare -A seen=()
    add() {
      local rel=$1 dep
      [ -n "${seen[$rel]:-}" ] && return
      seen[$rel]=1
      while read -r dep; do add "$dep"; done < <(awk -v m="$rel:" '$1 == m {for (i = NF; i > 1; i--) print $i}' "$from/modules.dep")
      order+=("$rel")
    }
    for m in "${GUEST_MODULES[@]}"; do
      path=$(modinfo -b "$stock" -k "$release" -n "$m" 2>/dev/null) || die "no module $m in the stock kernel"
      path=${path#*/modules/"$release"/}
      [ "$path" = "(builtin)" ] && continue
      add "$path"
    done
    for m in "${order[@]}"; do  # busybox's modprobe reads plain .ko
      mkdir -p "$to/$(dirname "$m")"
      case "$m" in *.xz) xz -dc "$from/$m" > "$to/${m%.xz}" ;; *) cp "$from/$m" "$to/$m" ;; esac
    done
    depmod -b "$g/modroot" "$release"
    for m in "${order[@]}"; do m=${m##*/}; m=${m%%.ko*}; echo "${m//-/_}"; done > "$g/modules.load"
    cp -L "$stock/bzImage" "$g/bzImage"
    for old in "$work"/guest-*; do [ "$old" = "$g" ] || rm -rf "$old"; done
    touch "$g/.done"
  fi
  echo "$g"
}

case "$cmd" in
  run) [ -f "$root/.toolchain" ] || die "no sid root yet: run $0 prepare"
       cwd=$PWD in_root "$@" ;;
  make) resolve; [ -f "$root$kbuild/kmake-flags" ] || die "not prepared: run $0 prepare"
        # shellcheck disable=SC2046
        cwd=$PWD in_root make -C "$kbuild" $(cat "$root$kbuild/kmake-flags") "$@" ;;
  resolve) resolve; print_resolved ;;
  stock) need_host; resolve; unpack_stock; echo "$stock" ;;
  guest) need_host; resolve; unpack_stock; guest_dir ;;
  fetch)
    need_host; resolve; unpack_stock; make_root; check_toolchain ;;
  prepare|hello)
    need_host; resolve; print_resolved >&2
    unpack_stock; make_root; check_toolchain; prepare_kbuild
    if [ "$cmd" = hello ]; then hello; else echo "$kbuild"; fi ;;
esac
