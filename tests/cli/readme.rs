//! The README's command examples run: every `$ memdedup …` line of a `text` block in
//! README.md is run from the repository root (with `memory.db` in a temporary directory)
//! and must print what the README shows after it. `…` and `...` stand for any text;
//! spaces and line breaks are not compared (the README wraps long JSON lines); lines
//! starting with ` WARN` are log lines (stderr) and are not compared.

use std::path::PathBuf;

use crate::support::{memdedup, require_model, text};

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
    let mut examples: Vec<Example> = Vec::new();
    let mut in_text = false;
    let mut current: Option<Example> = None;
    for (index, line) in readme.lines().enumerate() {
        if line.starts_with("```") {
            examples.extend(current.take());
            in_text = line == "```text";
            continue;
        }
        if !in_text {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            examples.extend(current.take());
            current = words(command).filter(|w| w.first().is_some_and(|w| w == "memdedup")).map(|w| Example {
                line: index + 1,
                args: w[1..].to_vec(),
                expected: String::new(),
            });
        } else if let Some(example) = &mut current
            && !line.starts_with(" WARN")
        {
            example.expected.push_str(line);
            example.expected.push('\n');
        }
    }
    examples
}

/// Whether `actual` shows `expected`: its pieces between `…`/`...`, without whitespace,
/// in order.
fn shows(actual: &str, expected: &str) -> Result<(), String> {
    let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let actual = squeeze(actual);
    let mut from = 0;
    for piece in expected.split(['…']).flat_map(|p| p.split("...")) {
        let piece = squeeze(piece);
        if piece.is_empty() {
            continue;
        }
        match actual[from..].find(&piece) {
            Some(at) => from += at + piece.len(),
            None => return Err(piece),
        }
    }
    Ok(())
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
        let stdout = text(&output.stdout);
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
