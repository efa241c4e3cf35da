//! The checked-in C header must match what cbindgen makes of the C ABI today.
//! `LITE_BLESS=1 cargo test -p liblite` (or `make headers`) rewrites it.

use std::path::Path;

#[test]
fn c_header_is_fresh() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/capi.rs"))
        .generate()
        .expect("cbindgen failed on capi.rs")
        .write(&mut generated);
    let path = crate_dir.join("include/liblite.h");
    if std::env::var_os("LITE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(current == generated, "{} is stale: run `make headers` and commit the result", path.display());
}
