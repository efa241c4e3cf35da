# Sourced by every tools/ script: where caches live and which compilers to use.
LITE_CACHE=${LITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lite-rs}
LITE_TOOLBIN=$LITE_CACHE/bin
mkdir -p "$LITE_TOOLBIN"
export LITE_CACHE LITE_TOOLBIN
