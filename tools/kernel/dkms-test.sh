#!/usr/bin/env bash
# DKMS end to end on Debian's stock kernel, as an operator's node does it: the sid root
# of tools/kernel/debian.sh (left as it is: every change goes to an overlay in
# build/dkms-test/) gets dkms and the stock kernel's headers, modules and linux-source
# packages, then lite-rs-dkms from build/deb/ (make deb), whose postinst has dkms build
# and install lite.ko for that kernel: the PRE_BUILD check, the Rust metadata made from
# linux-source, the module. Then the module's vermagic must be the stock kernel's, and a
# rebuild (dkms remove, dkms install) shows what a new lite-rs version costs once the
# kernel's tree is prepared. Prints each step's time. Builds the module twice, so
# several minutes of CPU.
#
#   tools/kernel/dkms-test.sh        (make test-dkms)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
# shellcheck source=tools/env.sh
. "$here/../env.sh"
case "${1:-}" in
  -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
die() { echo "dkms-test: $*" >&2; exit 1; }
log() { echo "dkms-test: $*" >&2; }

debs=$LITE_CACHE/debian/debs
ov=$top/build/dkms-test
pkg=$(find "$top/build/deb" -maxdepth 1 -name 'lite-rs-dkms_*_all.deb' 2>/dev/null | head -1)
[ -n "$pkg" ] || die "no build/deb/lite-rs-dkms_*.deb: run make deb"
version=$(dpkg-deb -f "$pkg" Version)

"$here/debian.sh" prepare >/dev/null   # the sid root and the stock kernel's packages
release=$("$here/debian.sh" resolve | sed -n 's/^  kernel release  *\([^ ]*\) .*/\1/p')
[ -n "$release" ] || die "debian.sh resolve named no kernel release"
# Everything of the stock kernel but its image: dkms builds against the headers and
# installs into the modules' tree.
kpkgs=()
while IFS= read -r f; do kpkgs+=("$f"); done < <(find "$debs" -maxdepth 1 -name '*.deb' \
  ! -name 'linux-binary-*' ! -name 'linux-image-*' | sort)

rm -rf "$ov" "$ov.log"
in_root() { DEBIAN_OVERLAY=$ov DEBIAN_BIND="$debs $top/build/deb" "$here/debian.sh" run "$@"; }
apt() { in_root env DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends "$@"; }

t0=$SECONDS
{ apt update && apt install dkms "${kpkgs[@]}"; } >>"$ov.log" 2>&1 \
  || { tail -30 "$ov.log" >&2; die "installing dkms and the kernel's packages failed (log: $ov.log)"; }
log "dkms and kernel $release's headers, modules and linux-source installed in $((SECONDS - t0)) s"

t0=$SECONDS
apt install "$pkg" 2>&1 | tee -a "$ov.log" | grep -E 'lite-rs|[Bb]uild|DKMS|[Ee]rror' >&2 || true
cold=$((SECONDS - t0))
status=$(in_root dkms status -m lite-rs -v "$version" -k "$release")
grep -q ': installed' <<<"$status" \
  || { in_root sh -c "cat /var/lib/dkms/lite-rs/$version/build/make.log" 2>/dev/null | tail -40 >&2
       die "lite-rs is not installed for $release after the package's postinst: '$status' (log: $ov.log)"; }
log "installing lite-rs-dkms built and installed lite.ko for $release in $cold s (Rust metadata prepared from linux-source, then the module)"

ours=$(in_root modinfo -k "$release" -F vermagic lite)
theirs=$(in_root modinfo -k "$release" -F vermagic rdma_rxe)
[ "$ours" = "$theirs" ] || die "lite.ko's vermagic '$ours' is not the stock kernel's '$theirs'"
log "lite.ko ($(in_root modinfo -k "$release" -n lite)) has the stock kernel's vermagic: $ours"

t0=$SECONDS
in_root dkms remove -m lite-rs -v "$version" -k "$release" >>"$ov.log" 2>&1
in_root dkms install -m lite-rs -v "$version" -k "$release" >>"$ov.log" 2>&1 \
  || { tail -30 "$ov.log" >&2; die "the rebuild failed (log: $ov.log)"; }
log "rebuilt and reinstalled with the prepared tree in $((SECONDS - t0)) s"
log "the prepared tree: $(du -sh "$ov/upper/var/cache/lite-rs-dkms" | cut -f1) in /var/cache/lite-rs-dkms"
