# MAKE[0] of dkms.conf: build lite.ko with the make arguments dkms/pre-build.sh left in
# kmake-args for this kernel (-C <its tree> ARCH= CC= RUSTC= KERNELRELEASE=). dkms fixes
# MAKE when it reads dkms.conf, before PRE_BUILD has run: hence this file, which reads
# them when make runs. dkms runs it in the build directory, as
# `make -jN KERNELRELEASE=<kernel> -f dkms/kmake.mk`; the -j and the variables reach the
# kernel's make through MAKEFLAGS.
args := $(shell cat kmake-args 2>/dev/null)
ifeq ($(args),)
$(error no kmake-args: dkms/pre-build.sh did not pass for this kernel (its messages are above; dkms before 3.1.5 goes on after a failed PRE_BUILD))
endif

modules:
	$(MAKE) $(args) M=$(CURDIR) modules
