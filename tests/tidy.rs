//! House-style checks that rustfmt and clippy do not make, run by `cargo test` over every Rust
//! file of the repository (as glommio's tests/linters.rs does): no line with more than 100
//! characters outside its string literals (rustfmt leaves long comments and some macros alone;
//! only a literal that cannot be broken may make a line wider), and no leftover `dbg!`, `todo!`
//! or `unimplemented!` in code.

use std::path::{Path, PathBuf};

/// The widest line allowed, in characters, as rustfmt's `max_width`.
const LINE_CHARS_MAX: usize = 100;
/// Macros that mark unfinished work or debugging and must not be committed.
const FORBIDDEN_MACROS: [&str; 3] = ["dbg!(", "todo!(", "unimplemented!("];
/// Directories holding Rust code, relative to the repository root.
const ROOTS: [&str; 5] = ["src", "tests", "benches", "loadgen", "fuzz"];
/// Directories never read: build output and tools' caches.
const SKIPPED: [&str; 4] = ["target", "node_modules", "corpus", "artifacts"];

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a readable directory entry").path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if path.is_dir() {
            if !SKIPPED.contains(&name) && !name.starts_with('.') {
                rust_files(&path, files);
            }
        } else if name.ends_with(".rs") {
            files.push(path);
        }
    }
}

/// Where a line-by-line scan of Rust source stands at the end of a line: inside a string
/// literal (normal, or raw with `hashes` `#` signs) or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lexer {
    Code,
    Text,
    RawText { hashes: usize },
}

/// What a character of a line is part of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Code,
    /// A string literal, its quotes included.
    Literal,
    Comment,
}

/// Scans `line` from state `state`; returns the state at its end and what each character is
/// part of.
fn scan(line: &str, mut state: Lexer) -> (Lexer, Vec<Part>) {
    let characters: Vec<char> = line.chars().collect();
    let mut parts = vec![Part::Code; characters.len()];
    let mut at = 0;
    while at < characters.len() {
        let character = characters[at];
        match state {
            Lexer::Code => {
                if character == '/' && characters.get(at + 1) == Some(&'/') {
                    parts[at..].fill(Part::Comment);
                    break;
                }
                if character == '\'' {
                    // A char literal such as '"' or '\'' (a lifetime has no closing quote
                    // within three characters).
                    let end = if characters.get(at + 1) == Some(&'\\') {
                        at + 3
                    } else {
                        at + 2
                    };
                    if characters.get(end) == Some(&'\'') {
                        at = end + 1;
                        continue;
                    }
                }
                if character == 'r' && !is_identifier_part(characters.get(at.wrapping_sub(1))) {
                    let hashes = characters[at + 1..]
                        .iter()
                        .take_while(|&&next| next == '#')
                        .count();
                    if characters.get(at + 1 + hashes) == Some(&'"') {
                        parts[at..=at + 1 + hashes].fill(Part::Literal);
                        at += 2 + hashes;
                        state = Lexer::RawText { hashes };
                        continue;
                    }
                }
                if character == '"' {
                    parts[at] = Part::Literal;
                    state = Lexer::Text;
                }
            }
            Lexer::Text => {
                parts[at] = Part::Literal;
                if character == '\\' {
                    if at + 1 < characters.len() {
                        parts[at + 1] = Part::Literal;
                    }
                    at += 2;
                    continue;
                }
                if character == '"' {
                    state = Lexer::Code;
                }
            }
            Lexer::RawText { hashes } => {
                parts[at] = Part::Literal;
                let closes = character == '"'
                    && characters[at + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&next| next == '#')
                        .count()
                        == hashes;
                if closes {
                    parts[at + 1..=at + hashes].fill(Part::Literal);
                    at += 1 + hashes;
                    state = Lexer::Code;
                    continue;
                }
            }
        }
        at += 1;
    }
    (state, parts)
}

fn is_identifier_part(character: Option<&char>) -> bool {
    character.is_some_and(|character| character.is_alphanumeric() || *character == '_')
}

/// The problems of one file, as `path:line: what`.
fn problems(path: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut state = Lexer::Code;
    for (index, line) in text.lines().enumerate() {
        let (next, parts) = scan(line, state);
        // A literal that cannot be broken may push a line past the limit; nothing else may.
        let width_outside_literals = parts.iter().filter(|&&part| part != Part::Literal).count();
        if width_outside_literals > LINE_CHARS_MAX {
            found.push(format!(
                "{}:{}: {width_outside_literals} characters outside string literals, more than \
                 {LINE_CHARS_MAX}",
                path.display(),
                index + 1,
            ));
        }
        let code: String = line
            .chars()
            .zip(&parts)
            .map(|(character, &part)| if part == Part::Code { character } else { ' ' })
            .collect();
        for forbidden in FORBIDDEN_MACROS {
            if code.contains(forbidden) {
                found.push(format!("{}:{}: {forbidden}…)", path.display(), index + 1));
            }
        }
        state = next;
    }
    found
}

#[test]
fn every_rust_file_is_tidy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for directory in ROOTS {
        rust_files(&root.join(directory), &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("a readable Rust file");
            problems(path.strip_prefix(root).unwrap_or(path), &text)
        })
        .collect();
    assert!(found.is_empty(), "untidy lines:\n{}", found.join("\n"));
}

#[test]
fn the_scan_knows_literals_from_code() {
    let wide = "x".repeat(LINE_CHARS_MAX);
    let path = Path::new("example.rs");
    // Long only inside a string literal (one line, or continued from the line before): fine.
    assert!(problems(path, &format!("let text = \"{wide}\";")).is_empty());
    assert!(problems(path, &format!("let text = \"\\\n{wide}\";")).is_empty());
    assert!(problems(path, &format!("let text = r#\"{wide}\"#;")).is_empty());
    // Long in code or in a comment, or after a literal that closed: reported.
    assert_eq!(problems(path, &format!("let {wide} = 1;")).len(), 1);
    assert_eq!(problems(path, &format!("// {wide}")).len(), 1);
    assert_eq!(problems(path, &format!("f(\"a\", {wide});")).len(), 1);
    assert_eq!(
        problems(path, &format!("let c = '\"'; let {wide} = 1;")).len(),
        1
    );
    // Leftover macros in code are reported; in a string or a comment they are text.
    assert_eq!(problems(path, "dbg!(value);").len(), 1);
    assert_eq!(problems(path, "todo!()").len(), 1);
    assert!(problems(path, "let text = \"todo!(\";").is_empty());
    assert!(problems(path, "// never dbg!(x) here").is_empty());
}
