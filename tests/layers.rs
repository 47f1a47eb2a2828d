//! The layer rule of docs/ARCHITECTURE.md, checked against the source: the document's `## Layers`
//! section holds one fenced block per crate (` ```layers src `, ` ```layers loadgen/src `), one
//! line per layer, lowest first, each line naming modules (`runtime::backend`, `main`). A file
//! belongs to the longest entry that is a prefix of its module path. Rule 1: a file imports only
//! modules of its own line or an earlier one. Rule 2: no two files import each other, directly
//! or around a circle. Rule 3: a module split over several entries (`runtime::backend`, …,
//! `runtime`) reads the same seen as one room: nothing outside it both imports it and is
//! imported by it, directly or around a circle, and some one line could hold the whole room
//! (the highest layer it imports from outside is not above the lowest layer that imports it).
//! Without rule 3 a file could sit between two entries of a module and import the lower one
//! while the higher one imports it: each arrow points down, yet the module and the file depend
//! on each other. Reading the rules out of the document keeps the two from drifting apart.
//!
//! An import is any path into the crate, in a `use` (groups, `self`, `pub use` and globs
//! included) or inline in code: `crate::…`, `super::…`, `self::…`, a child module's name, and
//! in a binary beside a library the library's name (`azq::…` in src/main.rs). Paths into other
//! crates are not checked. Comments and string literals are skipped; inline `mod name { … }`
//! blocks (`#[cfg(test)] mod tests`) are followed so `super::` means what the compiler takes it
//! to mean. A path through a name a file imports (`super::Lifecycle`, where the parent says
//! `use crate::lifecycle::Lifecycle`; `crate::queue::Command` through queue/mod.rs's `pub use`)
//! leads to the file that defines it: a re-exporting mod.rs is a door, not a dependency of
//! everything behind it. A `#[path]` attribute on a module is refused: the file would not be
//! where its module path says (no file uses one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One ` ```layers ROOT ` block: a crate's source root and its layers, lowest first.
#[derive(Debug, PartialEq, Eq)]
struct Block {
    root: String,
    layers: Vec<Vec<String>>,
}

/// The ` ```layers ` blocks of a Markdown document.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut current: Option<Block> = None;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if let Some(block) = current.as_mut() {
            if trimmed.starts_with("```") {
                found.extend(current.take());
                continue;
            }
            let entries: Vec<String> = trimmed
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect();
            if !entries.is_empty() {
                block.layers.push(entries);
            }
        } else if let Some(info) = trimmed.strip_prefix("```layers") {
            current = Some(Block {
                root: info.trim().to_string(),
                layers: Vec::new(),
            });
        }
    }
    assert!(current.is_none(), "a ```layers block is not closed");
    found
}

/// A token of Rust source, with comments and literals left out.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// An identifier or keyword (a number too: harmless).
    Word(String),
    /// `::`.
    PathSeparator,
    /// Any other punctuation character.
    Punct(char),
}

/// The tokens of `source`: comments (nested block comments too), string, byte-string, raw-string
/// and char literals dropped; lifetimes are a `'` and a word.
fn tokens(source: &str) -> Vec<Token> {
    let characters: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    let mut at = 0;
    let word_part = |character: char| character.is_alphanumeric() || character == '_';
    while at < characters.len() {
        let character = characters[at];
        let next = characters.get(at + 1).copied();
        if character.is_whitespace() {
            at += 1;
        } else if character == '/' && next == Some('/') {
            while at < characters.len() && characters[at] != '\n' {
                at += 1;
            }
        } else if character == '/' && next == Some('*') {
            let mut depth = 0;
            while at < characters.len() {
                if characters[at] == '/' && characters.get(at + 1) == Some(&'*') {
                    depth += 1;
                    at += 2;
                } else if characters[at] == '*' && characters.get(at + 1) == Some(&'/') {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
        } else if character == '"' {
            at = skip_string(&characters, at + 1);
        } else if character == '\'' {
            // A char literal ('a', '\'', '\u{7f}', 'é'), or a lifetime or label ('a, 'static).
            if next == Some('\\') {
                at += 3;
                while at < characters.len() && characters[at] != '\'' {
                    at += 1;
                }
                at += 1;
            } else if characters.get(at + 2) == Some(&'\'') {
                at += 3;
            } else {
                found.push(Token::Punct('\''));
                at += 1;
            }
        } else if word_part(character) {
            let start = at;
            while at < characters.len() && word_part(characters[at]) {
                at += 1;
            }
            let word: String = characters[start..at].iter().collect();
            let hashes = characters[at..].iter().take_while(|&&c| c == '#').count();
            let raw_string = matches!(word.as_str(), "r" | "br" | "cr")
                && characters.get(at + hashes) == Some(&'"');
            if raw_string {
                at = skip_raw_string(&characters, at + hashes + 1, hashes);
            } else if matches!(word.as_str(), "b" | "c") && characters.get(at) == Some(&'"') {
                at = skip_string(&characters, at + 1);
            } else if word == "b" && characters.get(at) == Some(&'\'') {
                // A byte literal: b'a', b'\''.
                at += if characters.get(at + 1) == Some(&'\\') {
                    3
                } else {
                    2
                };
                while at < characters.len() && characters[at] != '\'' {
                    at += 1;
                }
                at += 1;
            } else if word == "r" && hashes == 1 {
                // A raw identifier: r#type.
                let start = at + 1;
                at = start;
                while at < characters.len() && word_part(characters[at]) {
                    at += 1;
                }
                found.push(Token::Word(characters[start..at].iter().collect()));
            } else {
                found.push(Token::Word(word));
            }
        } else if character == ':' && next == Some(':') {
            found.push(Token::PathSeparator);
            at += 2;
        } else {
            found.push(Token::Punct(character));
            at += 1;
        }
    }
    found
}

/// Where the string literal whose text starts at `at` ends (past its closing quote).
fn skip_string(characters: &[char], mut at: usize) -> usize {
    while at < characters.len() {
        match characters[at] {
            '\\' => at += 2,
            '"' => return at + 1,
            _ => at += 1,
        }
    }
    at
}

/// Where the raw string literal with `hashes` `#` whose text starts at `at` ends.
fn skip_raw_string(characters: &[char], mut at: usize, hashes: usize) -> usize {
    while at < characters.len() {
        if characters[at] == '"'
            && characters[at + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return at + 1 + hashes;
        }
        at += 1;
    }
    at
}

/// A path found in a file, with the module scope it was written in (the file's module path
/// followed by the inline modules around it).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reference {
    scope: Vec<String>,
    path: Vec<String>,
    /// For a leaf of a `use` that is not a glob: the name it brings into its scope (the last
    /// segment, or what follows `as`).
    imported_as: Option<String>,
}

fn word(tokens: &[Token], at: usize) -> Option<&str> {
    match tokens.get(at) {
        Some(Token::Word(word)) => Some(word),
        _ => None,
    }
}

/// Every path of `tokens` that starts with a word followed by `::`, and every leaf of every
/// `use` tree (`use a::{b, c::{self, d}}` gives `a::b`, `a::c`, `a::c::d`), each with the scope
/// of inline modules it is in. Which of them lead into the crate is for the caller to decide.
fn references(tokens: &[Token], file_module: &[String]) -> Vec<Reference> {
    let mut found = Vec::new();
    let mut scope: Vec<String> = file_module.to_vec();
    // Brace depth at which each inline module of `scope` (beyond the file's own path) closes.
    let mut module_depths: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut at = 0;
    while at < tokens.len() {
        match &tokens[at] {
            Token::Punct('{') => {
                depth += 1;
                at += 1;
            }
            Token::Punct('}') => {
                if module_depths.last() == Some(&depth) {
                    module_depths.pop();
                    scope.pop();
                }
                depth -= 1;
                at += 1;
            }
            Token::Word(keyword) if keyword == "mod" => {
                if let (Some(name), Some(Token::Punct('{'))) =
                    (word(tokens, at + 1), tokens.get(at + 2))
                {
                    scope.push(name.to_string());
                    depth += 1;
                    module_depths.push(depth);
                    at += 3;
                } else {
                    at += 1;
                }
            }
            Token::Word(keyword) if keyword == "use" => {
                at += 1;
                let mut leaves = Vec::new();
                use_tree(tokens, &mut at, Vec::new(), &mut leaves);
                found.extend(leaves.into_iter().map(|leaf| Reference {
                    scope: scope.clone(),
                    path: leaf.path,
                    imported_as: leaf.name,
                }));
            }
            Token::Word(first) => {
                let after_separator = at > 0 && tokens[at - 1] == Token::PathSeparator;
                let starts_path = tokens.get(at + 1) == Some(&Token::PathSeparator);
                // `pub(in crate::a)` names a visibility, not something used.
                let visibility = at >= 3
                    && word(tokens, at - 1) == Some("in")
                    && tokens[at - 2] == Token::Punct('(')
                    && word(tokens, at - 3) == Some("pub");
                if after_separator || !starts_path || visibility {
                    at += 1;
                    continue;
                }
                let mut path = vec![first.clone()];
                at += 1;
                while tokens.get(at) == Some(&Token::PathSeparator) {
                    match word(tokens, at + 1) {
                        Some(segment) => {
                            path.push(segment.to_string());
                            at += 2;
                        }
                        // `f::<T>` or `a::{…}` in a macro: the path ends here.
                        None => break,
                    }
                }
                found.push(Reference {
                    scope: scope.clone(),
                    path,
                    imported_as: None,
                });
            }
            _ => at += 1,
        }
    }
    found
}

/// A leaf of a use tree: the path it names, and the name it brings into scope (none for a glob).
struct Leaf {
    path: Vec<String>,
    name: Option<String>,
}

/// Reads one use tree at `at` below `prefix`, pushing its leaves; stops after the tree (at the
/// `,`, `}` or `;` that follows it).
fn use_tree(tokens: &[Token], at: &mut usize, prefix: Vec<String>, leaves: &mut Vec<Leaf>) {
    let mut path = prefix;
    let mut name = None;
    if tokens.get(*at) == Some(&Token::PathSeparator) {
        // `use ::name`: always another crate.
        path.push("::".to_string());
        *at += 1;
    }
    loop {
        match tokens.get(*at) {
            Some(Token::Word(segment)) => {
                path.push(segment.clone());
                *at += 1;
                if tokens.get(*at) == Some(&Token::PathSeparator) {
                    *at += 1;
                    continue;
                }
                name = Some(segment.clone());
                if word(tokens, *at) == Some("as") {
                    name = word(tokens, *at + 1).map(str::to_string);
                    *at += 2;
                }
            }
            Some(Token::Punct('{')) => {
                *at += 1;
                while let Some(token) = tokens.get(*at) {
                    match token {
                        Token::Punct('}') => {
                            *at += 1;
                            break;
                        }
                        Token::Punct(',') => *at += 1,
                        _ => use_tree(tokens, at, path.clone(), leaves),
                    }
                }
                return;
            }
            // A glob names the module itself.
            Some(Token::Punct('*')) => *at += 1,
            _ => {}
        }
        break;
    }
    if path.last().map(String::as_str) == Some("self") {
        path.pop();
        if name.as_deref() == Some("self") {
            name = path.last().cloned();
        }
    }
    if !path.is_empty() {
        leaves.push(Leaf { path, name });
    }
}

/// One source file of a crate.
#[derive(Debug)]
struct SourceFile {
    /// Relative to the repository, for messages.
    path: PathBuf,
    /// Its module path in the crate its `crate::` names (`[]` for the crate root; `["main"]` for a
    /// binary's main.rs beside a library).
    module: Vec<String>,
    /// A binary's root beside a library: its `crate::` is itself, the library is `library::`.
    separate_binary: bool,
    /// The paths it names (see `references`).
    references: Vec<Reference>,
    /// Says `#[path = …]`.
    has_path_attribute: bool,
}

/// The crate rooted at `root` (a directory holding lib.rs or main.rs): its files, and the name a
/// binary beside the library uses for it.
struct Crate {
    files: Vec<SourceFile>,
    library_name: Option<String>,
}

fn rust_files(directory: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

fn load_crate(repository: &Path, root: &str) -> Crate {
    let directory = repository.join(root);
    let has_library = directory.join("lib.rs").is_file();
    let library_name = has_library.then(|| {
        let manifest = std::fs::read_to_string(directory.join("../Cargo.toml"))
            .expect("the crate's Cargo.toml");
        let name = manifest
            .lines()
            .find_map(|line| line.trim().strip_prefix("name = "))
            .expect("a package name");
        name.trim_matches('"').replace('-', "_")
    });
    let mut paths = Vec::new();
    rust_files(&directory, &mut paths);
    let files = paths
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&directory)
                .expect("a file under the root");
            let mut module: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().map(String::as_str) == Some("mod") {
                module.pop();
            }
            let separate_binary = has_library && module == ["main"];
            if module == ["lib"] || (!has_library && module == ["main"]) {
                module.clear();
            }
            let text = std::fs::read_to_string(&path).expect("a readable file");
            SourceFile {
                path: path.strip_prefix(repository).unwrap_or(&path).to_path_buf(),
                references: references(&tokens(&text), &module),
                has_path_attribute: text.contains("#[path"),
                module,
                separate_binary,
            }
        })
        .collect();
    Crate {
        files,
        library_name,
    }
}

impl Crate {
    /// The file a path (relative to the crate root) leads into: the longest prefix of it that is
    /// a file's module, or, where the next segment is a name that file imports (`pub use` or
    /// not: children see their parent's imports), the file that import leads into. A `pub use`
    /// in a mod.rs is a door, not where the item lives. `hops` bounds the chain followed.
    fn file_of(&self, path: &[String], hops: usize) -> Option<usize> {
        let (file, length) = (0..=path.len()).rev().find_map(|length| {
            self.files
                .iter()
                .position(|file| !file.separate_binary && file.module == path[..length])
                .map(|file| (file, length))
        })?;
        let exported = path.get(length).and_then(|name| {
            self.files[file].references.iter().find(|reference| {
                reference.imported_as.as_ref() == Some(name)
                    && reference.scope == self.files[file].module
            })
        });
        match exported {
            Some(reexport) if hops > 0 => {
                let through = self.target(file, reexport, hops - 1);
                // Past the re-exported item: `crate::a::Item::Variant` is still `Item`.
                through.or(Some(file))
            }
            _ => Some(file),
        }
    }

    /// The file `reference`, written in file `from`, leads into, if it leads into this crate.
    fn target(&self, from: usize, reference: &Reference, hops: usize) -> Option<usize> {
        let file = &self.files[from];
        let (first, rest) = reference.path.split_first()?;
        if file.separate_binary {
            // A binary's root beside a library has no modules of its own here: its paths lead
            // to itself, or into the library by the library's name.
            return match first.as_str() {
                "crate" | "self" | "super" => Some(from),
                name if Some(name) == self.library_name.as_deref() => self.file_of(rest, hops),
                _ => None,
            };
        }
        let absolute: Vec<String> = match first.as_str() {
            "crate" => rest.to_vec(),
            "self" => [&reference.scope[..], rest].concat(),
            "super" => {
                let mut scope = reference.scope.clone();
                scope.pop();
                let mut rest = rest;
                while rest.first().map(String::as_str) == Some("super") {
                    scope.pop();
                    rest = &rest[1..];
                }
                [&scope[..], rest].concat()
            }
            // A child module named without a prefix (`use parse::Request;` in http/mod.rs).
            name => {
                let child = [&reference.scope[..], &[name.to_string()]].concat();
                if !self.files.iter().any(|file| file.module == child) {
                    return None;
                }
                [&reference.scope[..], &reference.path[..]].concat()
            }
        };
        self.file_of(&absolute, hops)
    }
}

/// How many imports in a row a path is followed through.
const REEXPORT_HOPS_MAX: usize = 8;

/// The problems the layer rule finds in one crate, as lines of text.
fn check(repository: &Path, block: &Block) -> Vec<String> {
    let krate = load_crate(repository, &block.root);
    let mut problems = Vec::new();
    // Layer of every entry.
    let mut entry_layers: BTreeMap<Vec<String>, usize> = BTreeMap::new();
    for (layer, entries) in block.layers.iter().enumerate() {
        for entry in entries {
            let path: Vec<String> = entry.split("::").map(str::to_string).collect();
            if entry_layers.insert(path, layer).is_some() {
                problems.push(format!("{}: `{entry}` is listed twice", block.root));
            }
        }
    }
    // Layer and entry of every file; lib.rs is implied.
    let mut entry_of_file: Vec<Option<(Vec<String>, usize)>> = Vec::new();
    let mut entries_used = BTreeSet::new();
    for file in &krate.files {
        if file.module.is_empty() && !file.path.ends_with("main.rs") {
            entry_of_file.push(None);
            continue;
        }
        let module = if file.module.is_empty() {
            vec!["main".to_string()]
        } else {
            file.module.clone()
        };
        let entry = (1..=module.len())
            .rev()
            .map(|length| module[..length].to_vec())
            .find_map(|prefix| entry_layers.get(&prefix).map(|&layer| (prefix, layer)));
        if entry.is_none() {
            problems.push(format!(
                "{}: module `{}` belongs to no layer",
                file.path.display(),
                module.join("::")
            ));
        }
        entries_used.extend(entry.as_ref().map(|(prefix, _)| prefix.clone()));
        entry_of_file.push(entry);
    }
    for entry in entry_layers.keys() {
        if !entries_used.contains(entry) {
            problems.push(format!(
                "{}: layer entry `{}` names no file",
                block.root,
                entry.join("::")
            ));
        }
    }
    // Rule 1, and the graph for rule 2.
    let mut edges: BTreeMap<usize, BTreeMap<usize, String>> = BTreeMap::new();
    for (from, file) in krate.files.iter().enumerate() {
        if file.has_path_attribute {
            problems.push(format!(
                "{}: a #[path] module; give the file its module's name, or teach tests/layers.rs",
                file.path.display()
            ));
        }
        for reference in &file.references {
            let Some(to) = krate.target(from, reference, REEXPORT_HOPS_MAX) else {
                continue;
            };
            if to == from {
                continue;
            }
            let written = reference.path.join("::");
            if let (Some((from_entry, from_layer)), Some((to_entry, to_layer))) =
                (&entry_of_file[from], &entry_of_file[to])
            {
                if to_layer > from_layer {
                    problems.push(format!(
                        "{} (`{}`, layer {}) imports `{written}` of {} (`{}`, layer {}): a \
                         higher layer",
                        file.path.display(),
                        from_entry.join("::"),
                        from_layer + 1,
                        krate.files[to].path.display(),
                        to_entry.join("::"),
                        to_layer + 1,
                    ));
                }
            }
            edges.entry(from).or_default().entry(to).or_insert(written);
        }
    }
    problems.extend(split_modules_read_as_one_room(
        &krate,
        block,
        &entry_of_file,
        &edges,
    ));
    // Rule 2: every strongly connected component of more than one file is a cycle.
    for component in cycles(krate.files.len(), &edges) {
        let mut lines = vec![format!(
            "{}: files that import each other in a loop:",
            block.root
        )];
        for &from in &component {
            for (to, written) in edges.get(&from).into_iter().flatten() {
                if component.contains(to) {
                    lines.push(format!(
                        "    {} -> {} (`{written}`)",
                        krate.files[from].path.display(),
                        krate.files[*to].path.display()
                    ));
                }
            }
        }
        problems.push(lines.join("\n"));
    }
    problems
}

/// Rule 3: every module with more than one entry in `block` (its first path segment names it)
/// seen as one room. Its files become one node: a cycle through that node is a file outside the
/// module that imports it and is imported by it; and the room needs a line no lower than every
/// layer it imports from outside and no higher than every layer that imports it.
fn split_modules_read_as_one_room(
    krate: &Crate,
    block: &Block,
    entry_of_file: &[Option<(Vec<String>, usize)>],
    edges: &BTreeMap<usize, BTreeMap<usize, String>>,
) -> Vec<String> {
    let mut entries_of_module: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in block.layers.iter().flatten() {
        let module = entry.split("::").next().unwrap_or_default();
        *entries_of_module.entry(module).or_default() += 1;
    }
    let mut problems = Vec::new();
    for (&room, _) in entries_of_module.iter().filter(|(_, &count)| count > 1) {
        let inside = |file: usize| {
            entry_of_file[file]
                .as_ref()
                .is_some_and(|(entry, _)| entry[0] == room)
        };
        let layer = |file: usize| entry_of_file[file].as_ref().map(|(_, layer)| *layer);
        // The room's node is one past the files; every edge in or out of it is kept once.
        let room_node = krate.files.len();
        let node = |file: usize| if inside(file) { room_node } else { file };
        let mut collapsed: BTreeMap<usize, BTreeMap<usize, String>> = BTreeMap::new();
        let mut highest_import: Option<(usize, String)> = None;
        let mut lowest_importer: Option<(usize, String)> = None;
        for (&from, targets) in edges {
            for (&to, written) in targets {
                let arrow = format!(
                    "{} -> {} (`{written}`)",
                    krate.files[from].path.display(),
                    krate.files[to].path.display()
                );
                if inside(from) && !inside(to) {
                    if let Some(to_layer) = layer(to) {
                        if highest_import.as_ref().is_none_or(|(at, _)| to_layer > *at) {
                            highest_import = Some((to_layer, arrow.clone()));
                        }
                    }
                }
                if !inside(from) && inside(to) {
                    if let Some(from_layer) = layer(from) {
                        if lowest_importer
                            .as_ref()
                            .is_none_or(|(at, _)| from_layer < *at)
                        {
                            lowest_importer = Some((from_layer, arrow.clone()));
                        }
                    }
                }
                if node(from) != node(to) {
                    collapsed
                        .entry(node(from))
                        .or_default()
                        .entry(node(to))
                        .or_insert(arrow);
                }
            }
        }
        if let (Some((highest, import)), Some((lowest, importer))) =
            (&highest_import, &lowest_importer)
        {
            if highest > lowest {
                problems.push(format!(
                    "{}: `{room}` seen as one room fits no line: it imports layer {} ({import}) \
                     and layer {} imports it ({importer})",
                    block.root,
                    highest + 1,
                    lowest + 1,
                ));
            }
        }
        for component in cycles(room_node + 1, &collapsed) {
            if !component.contains(&room_node) {
                continue; // a loop of files, which rule 2 reports
            }
            let mut lines = vec![format!(
                "{}: seen as one room, `{room}` and files outside it import each other:",
                block.root
            )];
            for &from in &component {
                for (to, arrow) in collapsed.get(&from).into_iter().flatten() {
                    if component.contains(to) {
                        lines.push(format!("    {arrow}"));
                    }
                }
            }
            problems.push(lines.join("\n"));
        }
    }
    problems
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
fn cycles(nodes: usize, edges: &BTreeMap<usize, BTreeMap<usize, String>>) -> Vec<Vec<usize>> {
    struct Search<'a> {
        edges: &'a BTreeMap<usize, BTreeMap<usize, String>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    impl Search<'_> {
        fn visit(&mut self, node: usize) {
            self.index[node] = Some(self.next);
            self.low[node] = self.next;
            self.next += 1;
            self.stack.push(node);
            self.on_stack[node] = true;
            let targets: Vec<usize> = self
                .edges
                .get(&node)
                .map(|targets| targets.keys().copied().collect())
                .unwrap_or_default();
            for target in targets {
                match self.index[target] {
                    None => {
                        self.visit(target);
                        self.low[node] = self.low[node].min(self.low[target]);
                    }
                    Some(index) if self.on_stack[target] => {
                        self.low[node] = self.low[node].min(index);
                    }
                    Some(_) => {}
                }
            }
            if Some(self.low[node]) == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        edges,
        index: vec![None; nodes],
        low: vec![0; nodes],
        on_stack: vec![false; nodes],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in 0..nodes {
        if search.index[node].is_none() {
            search.visit(node);
        }
    }
    search.found
}

#[test]
fn the_source_keeps_the_layers_of_the_architecture_document() {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let document = std::fs::read_to_string(repository.join("docs/ARCHITECTURE.md"))
        .expect("docs/ARCHITECTURE.md");
    let blocks = blocks(&document);
    // Every block present is checked, and both crates must have one.
    for root in ["src", "loadgen/src"] {
        assert!(
            blocks.iter().any(|block| block.root == root),
            "docs/ARCHITECTURE.md has no ```layers {root} block"
        );
    }
    let mut problems = Vec::new();
    for block in &blocks {
        assert!(
            repository.join(&block.root).is_dir(),
            "```layers {}: no such directory",
            block.root
        );
        problems.extend(check(repository, block));
    }
    assert!(
        problems.is_empty(),
        "the layer rule of docs/ARCHITECTURE.md is broken:\n{}",
        problems.join("\n")
    );
}

fn words(path: &str) -> Vec<String> {
    path.split("::").map(str::to_string).collect()
}

fn paths(source: &str) -> Vec<String> {
    references(&tokens(source), &[])
        .into_iter()
        .map(|reference| reference.path.join("::"))
        .collect()
}

#[test]
fn use_trees_give_every_leaf() {
    assert_eq!(
        paths("use crate::{a::{b, c::{self, d}}, e as f, g::*};"),
        [
            "crate::a::b",
            "crate::a::c",
            "crate::a::c::d",
            "crate::e",
            "crate::g"
        ]
    );
    assert_eq!(
        paths("pub(crate) use super::super::x; pub use self::y::Z;"),
        ["super::super::x", "self::y::Z"]
    );
    assert_eq!(
        paths("use std::io::{self, Read};"),
        ["std::io", "std::io::Read"]
    );
    assert_eq!(paths("use ::std::fmt;"), ["::::std::fmt"]);
    assert_eq!(paths("use {crate::a, crate::b};"), ["crate::a", "crate::b"]);
}

#[test]
fn inline_paths_are_found_and_their_tails_are_not_paths_of_their_own() {
    assert_eq!(
        paths("fn f() { let x = crate::a::b::c(1); Vec::<u8>::new(); super::d::E::<T>::new(); }"),
        ["crate::a::b::c", "Vec", "super::d::E"]
    );
    // `pub(crate)` and `pub(in crate::a)` are visibilities, not uses.
    assert_eq!(
        paths("pub(crate) fn f() {} pub(in crate::a) struct S;"),
        Vec::<String>::new()
    );
    // `$crate::` in a macro is the crate.
    assert_eq!(
        paths("macro_rules! m { () => { $crate::a::f() } }"),
        ["crate::a::f"]
    );
}

#[test]
fn comments_and_literals_hide_paths() {
    let source = r####"
        // use crate::a;
        /// crate::b::c
        /* crate::d /* nested crate::e */ crate::f */
        let s = "crate::g \" crate::h";
        let r = r#"crate::i " crate::j"#;
        let t = br##"crate::k"##;
        let u = b"crate::l";
        let c = '"'; let d = '\''; let e = b'"'; let l: &'static str = "";
        fn f<'a>(x: &'a str) -> &'a str { crate::m::n(x) }
        let r#type = crate::o;
    "####;
    assert_eq!(paths(source), ["crate::m::n", "crate::o"]);
}

#[test]
fn inline_modules_set_the_scope_of_super() {
    let found = references(
        &tokens("use super::a; #[cfg(test)] mod tests { use super::*; fn f() { super::b(); } }"),
        &words("x::y"),
    );
    let scopes: Vec<(String, String)> = found
        .into_iter()
        .map(|reference| (reference.scope.join("::"), reference.path.join("::")))
        .collect();
    assert_eq!(
        scopes,
        [
            ("x::y".to_string(), "super::a".to_string()),
            ("x::y::tests".to_string(), "super".to_string()),
            ("x::y::tests".to_string(), "super::b".to_string()),
        ]
    );
}

#[test]
fn paths_lead_to_the_file_of_their_longest_module_prefix_through_reexports() {
    let file = |path: &str, module: &str, text: &str| {
        let module = if module.is_empty() {
            Vec::new()
        } else {
            words(module)
        };
        SourceFile {
            path: PathBuf::from(path),
            references: references(&tokens(text), &module),
            has_path_attribute: false,
            module,
            separate_binary: path == "src/main.rs",
        }
    };
    let krate = Crate {
        files: vec![
            file("src/lib.rs", "", "pub mod a; pub mod c;"),
            file("src/main.rs", "main", ""),
            file(
                "src/a/mod.rs",
                "a",
                "mod b; pub use b::{Item, Other as Renamed}; pub(crate) use self::b::c::*; \
                 pub struct Own; pub use crate::c::Far; use crate::c::Near;",
            ),
            file(
                "src/a/b.rs",
                "a::b",
                "#[cfg(test)] mod tests { pub use super::Item; }",
            ),
            file("src/a/b/tests.rs", "a::b::tests", ""),
            file("src/c.rs", "c", ""),
        ],
        library_name: Some("azq".to_string()),
    };
    let target = |from: usize, scope: &str, path: &str| {
        let reference = Reference {
            scope: words(scope),
            path: words(path),
            imported_as: None,
        };
        let to = krate.target(from, &reference, REEXPORT_HOPS_MAX);
        to.map(|to| krate.files[to].path.display().to_string())
    };
    let c = |path: &str| target(5, "c", path);
    assert_eq!(c("crate::a::b::Item").as_deref(), Some("src/a/b.rs"));
    assert_eq!(c("crate::a::Own").as_deref(), Some("src/a/mod.rs"));
    assert_eq!(c("crate::a").as_deref(), Some("src/a/mod.rs"));
    // Re-exported names lead to where the item lives, aliases and paths past them included.
    assert_eq!(c("crate::a::Item::Variant").as_deref(), Some("src/a/b.rs"));
    assert_eq!(c("crate::a::Renamed").as_deref(), Some("src/a/b.rs"));
    assert_eq!(c("crate::a::Other"), Some("src/a/mod.rs".to_string()));
    assert_eq!(c("crate::a::Far").as_deref(), Some("src/c.rs"));
    // A re-export inside an inline module is not the file's.
    assert_eq!(
        target(2, "a", "b::tests::Item").as_deref(),
        Some("src/a/b/tests.rs")
    );
    assert_eq!(
        target(3, "a::b", "super::Item").as_deref(),
        Some("src/a/b.rs")
    );
    assert_eq!(
        target(3, "a::b", "super::Own").as_deref(),
        Some("src/a/mod.rs")
    );
    // A child sees its parent's private imports too.
    assert_eq!(
        target(3, "a::b", "super::Near").as_deref(),
        Some("src/c.rs")
    );
    assert_eq!(
        target(3, "a::b::tests", "super::Item").as_deref(),
        Some("src/a/b.rs")
    );
    assert_eq!(
        target(4, "a::b::tests", "super::super::c").as_deref(),
        Some("src/a/mod.rs")
    );
    assert_eq!(target(2, "a", "b::Item").as_deref(), Some("src/a/b.rs"));
    assert_eq!(target(2, "a", "std::Item"), None);
    assert_eq!(c("self::Item").as_deref(), Some("src/c.rs"));
    assert_eq!(
        target(1, "main", "azq::a::Item").as_deref(),
        Some("src/a/b.rs")
    );
    assert_eq!(
        target(1, "main", "crate::x").as_deref(),
        Some("src/main.rs")
    );
    assert_eq!(
        target(1, "main::tests", "super::x").as_deref(),
        Some("src/main.rs")
    );
    assert_eq!(target(1, "main", "std::x"), None);
    assert_eq!(c("crate::Item").as_deref(), Some("src/lib.rs"));
}

#[test]
fn blocks_are_read_from_markdown() {
    let markdown = "text\n```layers src\nlimits time   # ground\n\nerror http\nmain\n```\n\
                    ```rust\nnot a block\n```\n```layers loadgen/src\nplan\n```\n";
    assert_eq!(
        blocks(markdown),
        [
            Block {
                root: "src".to_string(),
                layers: vec![
                    vec!["limits".to_string(), "time".to_string()],
                    vec!["error".to_string(), "http".to_string()],
                    vec!["main".to_string()],
                ],
            },
            Block {
                root: "loadgen/src".to_string(),
                layers: vec![vec!["plan".to_string()]],
            },
        ]
    );
}

#[test]
fn the_check_finds_upward_imports_loops_and_files_outside_every_layer() {
    let repository = std::env::temp_dir().join(format!("azq-layers-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let path = repository.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        std::fs::write(path, text).expect("a written file");
    };
    write("Cargo.toml", "[package]\nname = \"demo-crate\"\n");
    write(
        "src/lib.rs",
        "pub mod low; pub mod high; pub mod loose; pub mod ring;",
    );
    // low imports high: upward. high imports low: fine, but together a loop.
    write("src/low.rs", "pub fn f() { crate::high::g() }");
    write("src/high.rs", "use crate::low; pub fn g() {}");
    write("src/loose.rs", "// belongs to no layer");
    // Within one layer, a loop around three files.
    write("src/ring/mod.rs", "mod a; mod b; use a::A;");
    write("src/ring/a.rs", "pub struct A; use super::b::B;");
    write(
        "src/ring/b.rs",
        "pub struct B; #[cfg(test)] mod tests { use super::super::Z; }",
    );
    write("src/main.rs", "use demo_crate::low::f; fn main() { f() }");
    let block = Block {
        root: "src".to_string(),
        layers: vec![
            words("low"),
            vec!["ring".to_string(), "gone".to_string()],
            words("high"),
        ],
    };
    let mut problems = check(&repository, &block);
    std::fs::remove_dir_all(&repository).expect("the temporary crate removed");
    problems.sort();
    let expected = [
        "src/loose.rs: module `loose` belongs to no layer",
        "src/low.rs (`low`, layer 1) imports `crate::high::g` of src/high.rs (`high`, layer 3): \
         a higher layer",
        "src/main.rs: module `main` belongs to no layer",
        "src: files that import each other in a loop:\n    \
         src/high.rs -> src/low.rs (`crate::low`)\n    \
         src/low.rs -> src/high.rs (`crate::high::g`)",
        "src: files that import each other in a loop:\n    \
         src/ring/a.rs -> src/ring/b.rs (`super::b::B`)\n    \
         src/ring/b.rs -> src/ring/mod.rs (`super::super::Z`)\n    \
         src/ring/mod.rs -> src/ring/a.rs (`a::A`)",
        "src: layer entry `gone` names no file",
    ];
    assert_eq!(problems, expected);
}

/// The arrow issue 41 found: `settings` sat between `runtime`'s entries, importing the lower
/// ones (`runtime::select`) while the higher ones imported it. Every arrow pointed down, so
/// rules 1 and 2 passed; seen as one room, `runtime` and `settings` depend on each other.
#[test]
fn a_split_module_must_read_the_same_as_one_room() {
    let repository = std::env::temp_dir().join(format!("azq-layers-room-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let path = repository.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        std::fs::write(path, text).expect("a written file");
    };
    write("Cargo.toml", "[package]\nname = \"demo-crate\"\n");
    write(
        "src/lib.rs",
        "pub mod room; pub mod between; pub mod side; pub mod under;",
    );
    // room/mod.rs (layer 5) imports `between` (layer 2), which imports room::low (layer 1).
    write(
        "src/room/mod.rs",
        "pub mod low; pub mod top; use crate::between::B;",
    );
    write("src/room/low.rs", "pub struct L;");
    // room::top (layer 4) imports `under` (layer 3), and `side` (layer 2) imports room::low:
    // the room would have to sit at layer 3 or above and at layer 2 or below.
    write("src/room/top.rs", "use crate::under::U;");
    write("src/between.rs", "pub struct B; use crate::room::low::L;");
    write("src/side.rs", "use crate::room::low::L;");
    write("src/under.rs", "pub struct U;");
    let block = Block {
        root: "src".to_string(),
        layers: vec![
            vec!["room::low".to_string()],
            vec!["between".to_string(), "side".to_string()],
            vec!["under".to_string()],
            vec!["room::top".to_string()],
            vec!["room".to_string()],
        ],
    };
    let mut problems = check(&repository, &block);
    std::fs::remove_dir_all(&repository).expect("the temporary crate removed");
    problems.sort();
    let expected = [
        "src: `room` seen as one room fits no line: it imports layer 3 \
         (src/room/top.rs -> src/under.rs (`crate::under::U`)) and layer 2 imports it \
         (src/between.rs -> src/room/low.rs (`crate::room::low::L`))",
        "src: seen as one room, `room` and files outside it import each other:\n    \
         src/between.rs -> src/room/low.rs (`crate::room::low::L`)\n    \
         src/room/mod.rs -> src/between.rs (`crate::between::B`)",
    ];
    assert_eq!(problems, expected);
}
