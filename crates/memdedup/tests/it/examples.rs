//! The facade's examples run and print what the README shows, and the README quotes
//! them as they are.

use std::path::PathBuf;
use std::process::Command;

/// The example binary `name`, which `cargo test` builds next to the test binaries.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    assert!(path.is_file(), "{} is missing: `cargo test -p memdedup` builds it", path.display());
    path
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md")
}

/// The fenced block of `lang` after the first line of `text` holding `marker`.
fn block_after(text: &str, marker: &str, lang: &str) -> String {
    let from = text.find(marker).unwrap_or_else(|| panic!("{marker:?} is not in the README"));
    let fence = format!("```{lang}\n");
    let start = text[from..].find(&fence).map(|i| from + i + fence.len()).expect("a fenced block after it");
    let end = text[start..].find("```").map(|i| start + i).expect("the block ends");
    text[start..end].to_owned()
}

#[test]
fn check_before_store_is_quoted_verbatim_and_prints_what_the_readme_shows() {
    let source = include_str!("../../examples/check_before_store.rs");
    let code: String = source.lines().skip_while(|l| l.starts_with("//!")).skip_while(|l| l.is_empty()).fold(
        String::new(),
        |mut acc, l| {
            acc.push_str(l);
            acc.push('\n');
            acc
        },
    );
    let readme = readme();
    let marker = "Check before store, from `crates/memdedup/examples/check_before_store.rs`";
    assert_eq!(block_after(&readme, marker, "rust"), code, "the README quotes the example as it is");
    let shown = block_after(&readme, marker, "text");

    let model = memdedup::ModelDir::locate(None).and_then(|dir| dir.check().map(|()| dir));
    if let Err(e) = model {
        panic!("this test needs the local model ({e}); run `cargo xtask fetch-model` first");
    }
    let out = Command::new(example("check_before_store")).output().expect("the example runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), shown);
}
