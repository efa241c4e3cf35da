//! liblite.so exports exactly the functions `liblite.h` declares: the header is the C ABI
//! that `liblite.so.0` promises, no more (a stray `#[no_mangle]` would become ABI by
//! accident) and no less (a declared function the library lacks would fail programs at
//! link or load time).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The functions `liblite.h` declares: at the start of a line, a return type and a name
/// followed by `(`.
fn declared() -> BTreeSet<String> {
    let header = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/liblite.h")).unwrap();
    header
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_alphabetic()) && !l.starts_with("typedef"))
        .filter_map(|l| l.split_once('('))
        .filter_map(|(decl, _)| decl.rsplit([' ', '*']).next())
        .map(str::to_owned)
        .collect()
}

/// What the cdylib cargo built for this test run (beside the test, in target/<profile>/deps)
/// exports: its defined dynamic symbols.
fn exported() -> BTreeSet<String> {
    let lib: PathBuf = std::env::current_exe().unwrap().with_file_name("liblite.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(&lib)
        .output()
        .unwrap_or_else(|e| panic!("nm (binutils) on {}: {e}", lib.display()));
    assert!(out.status.success(), "nm {}: {}", lib.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn shared_library_exports_exactly_the_header() {
    let declared = declared();
    let exported = exported();
    assert!(declared.len() > 20, "parsed only {declared:?} from liblite.h");
    let missing: Vec<_> = declared.difference(&exported).collect();
    let extra: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "liblite.so and liblite.h differ: declared but not exported {missing:?}; exported but not declared {extra:?}"
    );
}
