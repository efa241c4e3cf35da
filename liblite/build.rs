//! liblite.so's ELF soname. Cargo sets none for a cdylib (rust-lang/cargo#5045): programs
//! linked against it would then depend on the bare `liblite.so`, which only the -dev
//! package ships. With it they depend on `liblite.so.0`, the file the liblite0 package
//! ships. The 0 is the C ABI's major version: a change to `liblite.h` that breaks programs
//! built against the previous one bumps it, and the package's name with it.
const SONAME: &str = "liblite.so.0";

fn main() {
    // Only the cdylib: the staticlib and the rlib have no soname.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    println!("cargo:rerun-if-changed=build.rs");
}
