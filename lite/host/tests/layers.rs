//! The module's folders are layers: each may name (`crate::x`) only those below it.
//! Read from the sources themselves, so a new upward import fails `cargo test`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// From the bottom up; the units of one layer do not name each other either.
const LAYERS: &[&[&str]] = &[
    &["errno", "ffi", "uapi"],
    &["compat"],
    &["iobuf", "kvec", "uarg", "workqueue"],
    &["verbs"],
    &["qos"],
    &["net"],
    &["lmr"],
    &["locks", "rpc"],
    &["node"],
    &["client"],
    &["chardev", "kapi", "lite_main"],
];

fn layer_of(unit: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&unit))
}

/// Every `crate::name` in `source`, comments left out.
fn named_units(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
        // `use crate::{a, b}` names several at once.
        if let Some(at) = code.find("crate::{") {
            let inner = &code[at + "crate::{".len()..];
            for part in inner.split(['{', '}', ',']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The upward or sideways names of the file of `unit`, as "unit -> name".
fn violations(unit: &str, source: &str) -> Vec<String> {
    let Some(own) = layer_of(unit) else {
        return vec![format!("{unit}: in no layer (add it to LAYERS)")];
    };
    named_units(source)
        .into_iter()
        .filter(|name| name != unit)
        .filter(|name| layer_of(name).map_or(true, |layer| layer >= own))
        .map(|name| format!("{unit} -> {name}"))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable module tree") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_folder_names_one_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut found = Vec::new();
    let mut checked = 0;
    for file in files {
        let rel = file.strip_prefix(&root).expect("under the module");
        let first = rel
            .components()
            .next()
            .expect("a path")
            .as_os_str()
            .to_string_lossy()
            .into_owned();
        // The host crate and bindgen's output are not module layers.
        if first == "host" || first == "helpers_ffi.rs" {
            continue;
        }
        let unit = first.trim_end_matches(".rs").to_string();
        let source = fs::read_to_string(&file).expect("readable source");
        for v in violations(&unit, &source) {
            found.push(format!("{}: {v}", rel.display()));
        }
        checked += 1;
    }
    assert!(
        checked > 50,
        "found only {checked} module files under {}",
        root.display()
    );
    assert!(
        found.is_empty(),
        "imports against the layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_upward_sideways_and_grouped_imports() {
    assert_eq!(
        violations("net", "use crate::lmr::LmrNode;"),
        ["net -> lmr"]
    );
    assert_eq!(
        violations("rpc", "use crate::{locks::LockNode, net::Peer};"),
        ["rpc -> locks"]
    );
    assert_eq!(
        violations("lmr", "let x = crate::node::Lite::new(1);"),
        ["lmr -> node"]
    );
    assert!(violations(
        "lmr",
        "use crate::net::Peer; // crate::node is only mentioned"
    )
    .is_empty());
    assert!(violations("node", "use crate::{lmr::LmrNode, net::Network};").is_empty());
    assert_eq!(
        violations("newfolder", ""),
        ["newfolder: in no layer (add it to LAYERS)"]
    );
}
