//! The kernel API's header (include/lite/kapi.h) repeats the few ABI constants a
//! module needs, since kernel code cannot include the user-space headers: they
//! must stay the ABI's.

use lite_uapi::*;

fn defined(header: &str, name: &str) -> u32 {
    let line = header
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(name) && line.starts_with("#define"))
        .unwrap_or_else(|| panic!("{name} is not defined in kapi.h"));
    let value = line.split_whitespace().nth(2).expect("a value").trim_end_matches('u');
    value.parse().unwrap_or_else(|_| panic!("{name}: {value} is not a number"))
}

#[test]
fn kapi_header_constants_are_the_abis() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../include/lite/kapi.h");
    let header = std::fs::read_to_string(path).expect("include/lite/kapi.h");
    assert_eq!(defined(&header, "LITE_KAPI_PERM_READ"), LITE_PERM_READ);
    assert_eq!(defined(&header, "LITE_KAPI_PERM_WRITE"), LITE_PERM_WRITE);
    assert_eq!(defined(&header, "LITE_KAPI_PERM_MASTER"), LITE_PERM_MASTER);
    assert_eq!(defined(&header, "LITE_KAPI_NAME_MAX") as usize, LiteMalloc::default().name.len() - 1);
}
