//! Where `-o` and `--in-place` write: regular files atomically, symlinks through to their
//! target, pipes and devices directly, and no temporary file left behind for ever.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use predicates::str::contains;

use crate::support::{dir_listing, entries, example_playbook_copy, json_file, memdedup, require_model};

/// `memdedup --model-dir <empty dir> playbook dedup --fail-open --quiet`: writes the
/// playbook unchanged, without needing the model.
fn pass_through() -> (tempfile::TempDir, assert_cmd::Command) {
    let empty = tempfile::tempdir().unwrap();
    let mut cmd = memdedup();
    cmd.arg("--model-dir").arg(empty.path()).args(["playbook", "dedup", "--fail-open", "--quiet"]);
    (empty, cmd)
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

#[test]
fn defect_2_output_to_a_fifo_is_written_through() {
    let (dir, file) = example_playbook_copy();
    let fifo = dir.path().join("out.fifo");
    mkfifo(&fifo);
    let (sender, received) = std::sync::mpsc::channel();
    {
        let fifo = fifo.clone();
        std::thread::spawn(move || sender.send(std::fs::read(fifo).expect("the FIFO is readable")));
    }
    let (_empty, mut cmd) = pass_through();
    cmd.arg(&file).arg("-o").arg(&fifo).timeout(std::time::Duration::from_secs(60)).assert().success();
    // A reader left waiting means the FIFO was never opened for writing (but replaced).
    let received = received.recv_timeout(std::time::Duration::from_secs(30)).expect("the reader got data");
    assert_eq!(received, std::fs::read(&file).unwrap(), "the reader got the whole playbook");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still a FIFO");
    assert_eq!(dir_listing(dir.path()), ["out.fifo", "playbook.json"], "no temporary file");
}

#[test]
fn defect_2_output_to_dev_stdout_is_written_through() {
    let (_dir, file) = example_playbook_copy();
    let (_empty, mut cmd) = pass_through();
    let assert = cmd.arg(&file).args(["-o", "/dev/stdout"]).assert().success();
    assert_eq!(assert.get_output().stdout, std::fs::read(&file).unwrap());
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
}

#[test]
fn defect_2_output_to_dev_full_fails_clearly() {
    let (_dir, file) = example_playbook_copy();
    let (_empty, mut cmd) = pass_through();
    cmd.arg(&file)
        .args(["-o", "/dev/full"])
        .assert()
        .code(1)
        .stderr(contains("cannot write /dev/full"))
        .stderr(contains("No space left on device"));
    let meta = std::fs::symlink_metadata("/dev/full").unwrap();
    assert!(meta.file_type().is_char_device(), "/dev/full is still a device");
}

#[test]
fn defect_2_in_place_on_a_symlink_replaces_its_target() {
    require_model();
    let (dir, real) = example_playbook_copy();
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("playbook.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let before = entries(&json_file(&real)).len();

    memdedup().args(["playbook", "dedup", "--in-place", "--quiet"]).arg(&link).assert().success();

    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link is still a link");
    assert_eq!(std::fs::read_link(&link).unwrap(), real);
    assert!(entries(&json_file(&real)).len() < before, "the target was deduplicated");
    assert_eq!(dir_listing(dir.path()), ["playbook.json"]);
    assert_eq!(dir_listing(links.path()), ["playbook.json"]);

    // A relative link whose target does not exist yet: -o creates the target.
    let sub = links.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let relative = sub.join("out.json");
    std::os::unix::fs::symlink("../created.json", &relative).unwrap();
    let (_empty, mut cmd) = pass_through();
    cmd.arg(&real).arg("-o").arg(&relative).assert().success();
    assert!(std::fs::symlink_metadata(&relative).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(links.path().join("created.json")).unwrap(), std::fs::read(&real).unwrap());
}

#[test]
fn defect_2_stale_temporary_files_of_killed_runs_are_removed() {
    let (dir, file) = example_playbook_copy();
    // A process that has exited: its pid names no running process.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = format!(".playbook.json.memdedup-{dead}-0.tmp");
    let live = format!(".playbook.json.memdedup-{}-0.tmp", std::process::id());
    for name in [&stale, &live, &".other.json.memdedup-1-0.tmp".to_owned(), &"notes.tmp".to_owned()] {
        std::fs::write(dir.path().join(name), "half a playbook").unwrap();
    }
    let (_empty, mut cmd) = pass_through();
    cmd.arg("--in-place").arg(&file).assert().success();
    let listing = dir_listing(dir.path());
    assert!(!listing.contains(&stale), "the dead run's temporary file is removed: {listing:?}");
    assert!(listing.contains(&live), "a running process's temporary file is kept: {listing:?}");
    assert!(listing.iter().any(|n| n == "notes.tmp") && listing.iter().any(|n| n.starts_with(".other.json")));
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(crate::support::EXAMPLE_PLAYBOOK).unwrap());
}
