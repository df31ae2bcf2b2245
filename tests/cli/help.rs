//! `--help` for every command.

use predicates::str::contains;

use crate::support::memdedup;

#[test]
fn help_works_for_every_command() {
    let commands: [&[&str]; 22] = [
        &[],
        &["playbook"],
        &["playbook", "dedup"],
        &["scan"],
        &["similarity"],
        &["check"],
        &["add"],
        &["capture"],
        &["list"],
        &["show"],
        &["stats"],
        &["reembed"],
        &["dedup"],
        &["merges"],
        &["undo"],
        &["eval"],
        &["calibrate"],
        &["facts", "extract"],
        &["serve"],
        &["mcp"],
        &["hook"],
        &["hook", "pre-compact"],
    ];
    for command in commands {
        memdedup().args(command).arg("--help").assert().success().stdout(contains("Usage: memdedup")).stderr("");
    }
}

#[test]
fn top_level_help_points_at_the_model_fetch() {
    memdedup().arg("--help").assert().success().stdout(contains("cargo xtask fetch-model"));
}
