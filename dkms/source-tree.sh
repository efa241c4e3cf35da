#!/usr/bin/env bash
# Copy what dkms builds lite.ko from into DEST (/usr/src/lite-rs-<version>/, or a
# package's staging copy of it), keeping the repository's layout: Kbuild, the module's
# sources (lite/, without the host-test crate lite/host), the ABI it shares with user
# space (uapi/src/abi), include/ when it exists, the bindings bindgen made of
# lite/helpers.h (so that nodes need no bindgen for them) and the PRE_BUILD, POST_BUILD
# and MAKE steps. The caller installs dkms.conf.
#
#   dkms/source-tree.sh DEST
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") echo "usage: $0 DEST (see --help)" >&2; exit 2 ;;
esac
dest=$1
cd "$(dirname "$0")/.."
[ -f lite/helpers_ffi.rs ] || { echo "$0: no lite/helpers_ffi.rs: run make lite/helpers_ffi.rs" >&2; exit 1; }
files=(Kbuild dkms/pre-build.sh dkms/post-build.sh dkms/kmake.mk tools/kernel/rust-kbuild.sh)
roots=(lite uapi/src/abi)
[ -d include ] && roots+=(include)   # the headers of the kernel API other modules call
mapfile -t -O ${#files[@]} files < <(find "${roots[@]}" -path lite/host -prune -o -type f \
  \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) -print | sort)
for f in "${files[@]}"; do
  install -D -m 644 "$f" "$dest/$f"
done
chmod 755 "$dest/dkms/pre-build.sh" "$dest/dkms/post-build.sh" "$dest/tools/kernel/rust-kbuild.sh"
