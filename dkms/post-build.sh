#!/bin/sh
# POST_BUILD of dkms.conf: keep what another module builds against beside the lite.ko
# dkms has just built, in DIR (dkms's $dkms_tree/lite-rs/<version>/<kernel>/<arch>):
# Module.symvers, whose symbols and CRCs modpost needs (KBUILD_EXTRA_SYMBOLS), and the
# kernel API's header, include/lite/kapi.h. dkms runs it in the build directory, which
# it removes afterwards; DIR goes with the module (dkms remove, mktarball, ldtarball),
# and dkms links it as /var/lib/dkms/lite-rs/kernel-<kernel>-<arch> while installed
# (docs/kernel-api.md).
#
#   dkms/post-build.sh DIR
set -eu
dir=${1:?usage: dkms/post-build.sh DIR}
install -m 644 Module.symvers "$dir/Module.symvers"
install -D -m 644 include/lite/kapi.h "$dir/include/lite/kapi.h"
