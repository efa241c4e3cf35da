//! The checked-in C headers must be what cbindgen makes of the Rust sources today:
//! `lite_uapi.h` (the ABI) and `liblite.h` (the C ABI of this library).
//! `LITE_BLESS=1 cargo test -p liblite --test c_headers` (or `make headers`) rewrites them.

use std::path::Path;

fn check_header(crate_dir: &Path, source: &str, header: &str) {
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join(source))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen failed on {source}: {e}"))
        .write(&mut generated);
    let path = crate_dir.join(header);
    if std::env::var_os("LITE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(current == generated, "{} is stale: run `make headers` and commit the result", path.display());
}

#[test]
fn uapi_header_is_fresh() {
    let uapi = Path::new(env!("CARGO_MANIFEST_DIR")).join("../uapi");
    check_header(&uapi, "src/abi/mod.rs", "include/lite_uapi.h");
}

#[test]
fn liblite_header_is_fresh() {
    check_header(Path::new(env!("CARGO_MANIFEST_DIR")), "src/capi/mod.rs", "include/liblite.h");
}
