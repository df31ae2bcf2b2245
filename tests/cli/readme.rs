//! The README's command examples run: every `$ memdedup …` line of a `text` block in
//! README.md is run from the repository root (with `memory.db` in a temporary directory)
//! and must print what the README shows after it. `…` and `...` stand for any text;
//! spaces and line breaks are not compared (the README wraps long JSON lines); lines
//! starting with ` WARN` are log lines (stderr) and are not compared.

use std::path::PathBuf;

use crate::support::{memdedup, require_model, shows, text};

/// One example: the command's words and the output the README shows.
struct Example {
    line: usize,
    args: Vec<String>,
    expected: String,
}

fn readme() -> (PathBuf, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    (root, readme)
}

/// `line` split into words as a POSIX shell would for the README's commands: double and
/// single quotes group, `#` outside quotes starts a comment. `None` for a pipeline or
/// redirection, which the test does not run.
fn words(line: &str) -> Option<Vec<String>> {
    let (mut words, mut word, mut quote, mut in_word) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, '|' | '<' | '>') => return None,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The `$ memdedup …` examples of the README's `text` blocks.
fn examples(readme: &str) -> Vec<Example> {
    doc_examples(readme, "```text").0
}

/// The `$ memdedup …` examples of `doc`'s blocks opening with `fence`, and the files the
/// blocks write with `$ cat NAME` followed by the file's lines.
fn doc_examples(doc: &str, fence: &str) -> (Vec<Example>, Vec<(String, String)>) {
    let mut examples: Vec<Example> = Vec::new();
    let mut files: Vec<(String, String)> = Vec::new();
    let mut in_block = false;
    let mut current: Option<Example> = None;
    let mut file: Option<(String, String)> = None;
    for (index, line) in doc.lines().enumerate() {
        if line.starts_with("```") {
            examples.extend(current.take());
            files.extend(file.take());
            in_block = line == fence;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            examples.extend(current.take());
            files.extend(file.take());
            if let Some(name) = command.strip_prefix("cat ") {
                file = Some((name.trim().to_owned(), String::new()));
                continue;
            }
            current = words(command).filter(|w| w.first().is_some_and(|w| w == "memdedup")).map(|w| Example {
                line: index + 1,
                args: w[1..].to_vec(),
                expected: String::new(),
            });
        } else if let Some((_, content)) = &mut file {
            content.push_str(line);
            content.push('\n');
        } else if let Some(example) = &mut current
            && !line.starts_with(" WARN")
        {
            example.expected.push_str(line);
            example.expected.push('\n');
        }
    }
    (examples, files)
}

#[test]
fn readme_words_split_like_a_shell() {
    assert_eq!(
        words(r#"memdedup similarity "a b" 'c d' e   # comment"#),
        Some(vec!["memdedup".into(), "similarity".into(), "a b".into(), "c d".into(), "e".into()])
    );
    assert_eq!(words("extract | memdedup capture -"), None);
    assert!(shows("{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"a\":1,…\"c\":3}").is_ok());
    assert_eq!(shows("{\"a\": 1}", "{\"a\":2}"), Err("{\"a\":2}".to_owned()));
    // A printed probability may differ a little from one CPU to another.
    assert!(shows("P(duplicate) 0.551 at cosine 0.9850: x", "P(duplicate) 0.556 at cosine 0.9850: …").is_ok());
    assert!(shows("{\"score\":0.09673412}", "{\"score\":0.0967…").is_ok());
    assert!(shows("{\"p\":0.52752864}", "{\"p\":0.52695423}").is_ok());
    assert!(shows("P 0.550 here", "P 0.556 here").is_err(), "six units off");
    assert!(shows("P 0.556 there", "P 0.556 here").is_err(), "the words still count");
    assert!(shows("at 0.93", "at 0.92").is_err(), "two digits: exact");
    assert!(shows("P 0.55", "P 0.556").is_err(), "fewer digits than shown");
}

#[test]
fn readme_examples_print_what_the_readme_shows() {
    require_model();
    let (root, readme) = readme();
    let examples = examples(&readme);
    assert!(examples.len() >= 8, "only {} examples found", examples.len());
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("memory.db").display().to_string();
    let mut failures = Vec::new();
    for example in &examples {
        // `serve` and `mcp` run until stopped; tests/cli/serve.rs runs the HTTP examples.
        if example.args.iter().any(|a| a == "serve" || a == "mcp") {
            continue;
        }
        let args: Vec<String> =
            example.args.iter().map(|a| if a == "memory.db" { db.clone() } else { a.clone() }).collect();
        let output = memdedup().args(&args).current_dir(&root).output().expect("memdedup runs");
        let stdout = as_on_a_terminal(&output);
        if let Err(piece) = shows(&stdout, &example.expected) {
            failures.push(format!(
                "README.md:{} `memdedup {}`: {piece:?} is not in what it printed:\n{stdout}{}",
                example.line,
                example.args.join(" "),
                text(&output.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// docs/CLI.md and docs/HTTP.md state the local judge's built-in floors as the parameter
/// file compiled into the binary has them (defect 19).
#[test]
fn defect_19_docs_state_the_local_judges_built_in_floors() {
    let (root, _) = readme();
    let params: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("crates/dedup-core/src/local_judge/params.json")).expect("params.json"),
    )
    .expect("params.json is JSON");
    let duplicate = params["duplicate_floor"].as_f64().expect("duplicate_floor");
    let related = params["related_floor"].as_f64().expect("related_floor");
    let shown = format!("{duplicate:.2} built in");
    for doc in ["docs/CLI.md", "docs/HTTP.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("the doc");
        let stated: Vec<&str> =
            text.match_indices(" built in").map(|(i, _)| &text[i.saturating_sub(4)..i + 9]).collect();
        assert!(!stated.is_empty(), "{doc} states no built-in floor");
        for s in &stated {
            assert_eq!(*s, shown, "{doc} says ({s}), the built-in duplicate_floor is {duplicate}");
        }
        for (i, _) in text.match_indices(" and nothing sets the texts apart") {
            let floor = &text[i.saturating_sub(4)..i];
            assert_eq!(floor, format!("{duplicate:.2}"), "{doc}: an example reason with another floor");
        }
    }
    let cli = std::fs::read_to_string(root.join("docs/CLI.md")).expect("docs/CLI.md");
    let example = format!("`{{\"duplicate_floor\": {duplicate}, \"related_floor\": {related}, \"vetoes\": [");
    assert!(cli.contains(&example), "docs/CLI.md shows the built-in parameters: {example}");
}

/// docs/CLI.md's `console` examples run from the repository root, with the files their
/// `$ cat` lines show written first and `memory.db` in a temporary directory, and print
/// what the docs show (defect 19).
#[test]
fn defect_19_cli_md_console_examples_print_what_the_docs_show() {
    require_model();
    let (root, _) = readme();
    let doc = std::fs::read_to_string(root.join("docs/CLI.md")).expect("docs/CLI.md");
    let (examples, files) = doc_examples(&doc, "```console");
    assert!(examples.len() >= 3, "only {} console examples found", examples.len());
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, content) in &files {
        std::fs::write(dir.path().join(name), content).expect("writable");
    }
    let db = dir.path().join("memory.db").display().to_string();
    let mut failures = Vec::new();
    for example in &examples {
        let args: Vec<String> = example
            .args
            .iter()
            .map(|a| match files.iter().find(|(name, _)| name == a) {
                Some((name, _)) => dir.path().join(name).display().to_string(),
                None if a == "memory.db" => db.clone(),
                // Another database of the examples: its own file in the same directory.
                None if a.ends_with(".db") && !a.contains('/') => dir.path().join(a).display().to_string(),
                None => a.clone(),
            })
            .collect();
        let output = memdedup().args(&args).current_dir(&root).output().expect("memdedup runs");
        let stdout = as_on_a_terminal(&output);
        if let Err(piece) = shows(&stdout, &example.expected) {
            failures.push(format!(
                "docs/CLI.md:{} `memdedup {}`: {piece:?} is not in what it printed:\n{stdout}{}",
                example.line,
                example.args.join(" "),
                text(&output.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What a command shows in a terminal for a doc example: its stdout, and for a command
/// that fails, the error it prints on stderr too.
fn as_on_a_terminal(output: &std::process::Output) -> String {
    let mut shown = text(&output.stdout);
    if !output.status.success() {
        shown.push_str(&text(&output.stderr));
    }
    shown
}
