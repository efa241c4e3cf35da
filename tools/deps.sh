#!/usr/bin/env bash
# Install everything LITE-RS needs on a fresh Debian 12 machine, idempotently:
# Debian packages (skipped when present) and bindgen-cli into the cache dir.
set -euo pipefail
RUFF_VERSION=0.17.6
PYTEST_VERSION=8.4.2
case "${1:-}" in
  -h|--help) echo "usage: $0   install the Debian packages and bindgen-cli LITE-RS needs (idempotent)"; exit 0 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/env.sh
. "$here/env.sh"

packages=(
  rustc-web rust-web-src rust-web-clippy clang lld llvm libclang-dev
  bc flex bison libelf-dev libssl-dev cpio kmod patch
  linux-source-6.12 qemu-system-x86 busybox-static iproute2
  rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest libibverbs-dev
  vde2 socat python3 python3-matplotlib python3-pytest
  # systemd-analyze: make test-host verifies the units in dist/systemd/
  systemd
  # make deb: the Debian packages (debian/), their lintian check, man pages, pkg-config
  debhelper dh-dkms dkms lintian help2man pkgconf
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$LITE_TOOLBIN/bindgen" ]; then
  echo "deps: installing bindgen-cli 0.69.5 into $LITE_CACHE"
  cargo install bindgen-cli --version 0.69.5 --locked --root "$LITE_CACHE" -q
fi
# The kernel and our module must be built by Debian's rustc, not rustup's.
ln -sf /usr/bin/rustc "$LITE_TOOLBIN/rustc"
ln -sf /usr/bin/rustdoc "$LITE_TOOLBIN/rustdoc"
# The tools run under the first python3 in PATH, which may not be Debian's (pyenv):
# give that one matplotlib too.
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  echo "deps: installing matplotlib for $(command -v python3)"
  python3 -m pip install --quiet matplotlib
fi
# make lint's Rust linters, with rustup's toolchain.
if ! cargo clippy --version >/dev/null 2>&1 || ! cargo fmt --version >/dev/null 2>&1; then
  echo "deps: adding clippy and rustfmt to the Rust toolchain"
  rustup component add clippy rustfmt
fi
# The Python tools' tests (make test-host, tools/vmtest.py) run under pytest.
if ! python3 -c 'import pytest' 2>/dev/null; then
  echo "deps: installing pytest $PYTEST_VERSION for $(command -v python3)"
  python3 -m pip install --quiet "pytest==$PYTEST_VERSION"
fi
# make lint's Python linter.
if ! python3 -m ruff --version 2>/dev/null | grep -q "^ruff $RUFF_VERSION$"; then
  echo "deps: installing ruff $RUFF_VERSION for $(command -v python3)"
  python3 -m pip install --quiet "ruff==$RUFF_VERSION"
fi
