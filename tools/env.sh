# Sourced by every tools/ script: where caches live and which compilers to use.
LITE_CACHE=${LITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lite-rs}
LITE_TOOLBIN=$LITE_CACHE/bin
mkdir -p "$LITE_TOOLBIN"
export LITE_CACHE LITE_TOOLBIN
# rustup installs cargo under ~/.cargo/bin, which a non-login shell may not have in PATH.
[ -d "$HOME/.cargo/bin" ] && case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) PATH="$PATH:$HOME/.cargo/bin"; export PATH;; esac
