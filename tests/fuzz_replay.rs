//! Replays the committed fuzz inputs on stable Rust, so that CI (`cargo test`) catches a
//! regression without nightly or cargo-fuzz: every file under fuzz/regressions/<target>/ (inputs
//! that once crashed or broke a property) and fuzz/seeds/<target>/ (a small minimised corpus)
//! goes through the same property check the fuzz target runs; then a short, seeded mutation run
//! over the seeds (a few hundred inputs per target) looks a little beyond them. See
//! fuzz/README.md.
//!
//! It is also the property test of the shard's state: `ShardState` against the naive model of
//! the `shard_state` target on long command sequences from fixed seeds (one model serves the
//! fuzzer and this test); and it holds the `storage_format` seeds to reaching the log boundaries
//! a reader once lost records at, which a seed pick by coverage would not keep.

#[path = "../fuzz/src/checks/mod.rs"]
mod checks;

use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use azq::queue::record::RECORD_HEADER_BYTES;
use azq::random::SplitMix64;

/// The files of one input directory, sorted so failures list in a stable order; none when the
/// directory does not exist (a target without regressions).
fn inputs(directory: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on `data`; the panic message if it panics.
fn run(check: checks::Check, data: &[u8]) -> Option<String> {
    let panic = panic::catch_unwind(AssertUnwindSafe(|| check(data))).err()?;
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    Some(message.to_string())
}

/// Runs `check` on every input of `kind` (`regressions` or `seeds`) of every target; returns
/// how many ran and the failures.
fn replay(kind: &str) -> (usize, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind);
    let mut ran = 0;
    let mut failures = Vec::new();
    for &(target, check) in checks::TARGETS {
        for path in inputs(&root.join(target)) {
            let data = match std::fs::read(&path) {
                Ok(data) => data,
                // A running fuzzer replaces corpus files as it shrinks them.
                Err(_) if kind == "corpus" => continue,
                Err(error) => panic!("{}: {error}", path.display()),
            };
            ran += 1;
            if let Some(message) = run(check, &data) {
                failures.push(format!("{}: {message}", path.display()));
            }
        }
    }
    (ran, failures)
}

#[test]
fn regressions_pass() {
    let (_ran, failures) = replay("regressions");
    assert!(
        failures.is_empty(),
        "regressions failing:\n{}",
        failures.join("\n")
    );
}

/// A whole local corpus (fuzz/corpus/<target>/, git-ignored, left by `cargo fuzz run`) when
/// `AZQ_FUZZ_CORPUS=1`: after a check changes, every input a long run found is checked again
/// on stable, without a fuzzing build.
#[test]
fn local_corpus_passes_when_asked() {
    if std::env::var_os("AZQ_FUZZ_CORPUS").is_none() {
        return;
    }
    let (ran, failures) = replay("corpus");
    eprintln!("replayed {ran} corpus inputs");
    assert!(
        failures.is_empty(),
        "corpus inputs failing:\n{}",
        failures.join("\n")
    );
}

#[test]
fn seeds_pass() {
    let (ran, failures) = replay("seeds");
    assert!(ran > 0, "no seed corpus under fuzz/seeds");
    assert!(
        failures.is_empty(),
        "seeds failing:\n{}",
        failures.join("\n")
    );
}

/// The writer-mode seeds of `storage_format` (fuzz/scripts/writer_seeds.py) make the real log
/// end flushes 1, 2 and 3 bytes short of a block boundary with another flush after them in the
/// same segment, and split a record header across a boundary at every byte: the boundaries
/// random sizes seldom reach and coverage does not steer to, where a reader once lost every
/// record after such a flush (commit 631e836). Guards against a seed pick that drops them.
#[test]
fn storage_format_seeds_reach_the_log_boundaries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/storage_format");
    let mut paddings_followed = BTreeSet::new();
    let mut header_splits = BTreeSet::new();
    for path in inputs(&root) {
        let data = std::fs::read(&path).expect("a readable input");
        if let Some(boundaries) = checks::storage_format::writer_boundaries(&data) {
            paddings_followed.extend(boundaries.paddings_followed);
            header_splits.extend(boundaries.header_splits);
        }
    }
    for padding in 1..=3 {
        assert!(
            paddings_followed.contains(&padding),
            "no seed ends a flush {padding} bytes short of a block boundary before another flush"
        );
    }
    let every_split: BTreeSet<usize> = (1..RECORD_HEADER_BYTES).collect();
    assert_eq!(
        header_splits, every_split,
        "record headers split across a block boundary"
    );
}

/// Mutated inputs per target: enough to step off the seeds, few enough for a debug build.
const MUTATIONS_PER_TARGET: usize = 300;

/// One libFuzzer-style mutation of `data`: flip, set, insert or erase bytes, or splice in part
/// of `other` (another seed of the same target).
fn mutate(rng: &mut fastrand::Rng, data: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..rng.usize(1..=4) {
        let at = rng.usize(..=data.len());
        match rng.u8(..5) {
            0 if at < data.len() => data[at] ^= 1 << rng.u8(..8),
            1 if at < data.len() => data[at] = rng.u8(..),
            2 => data.insert(at, rng.u8(..)),
            3 if at < data.len() => {
                let end = rng.usize(at..=data.len().min(at + 16));
                data.drain(at..end);
            }
            _ if !other.is_empty() => {
                let start = rng.usize(..other.len());
                let end = rng.usize(start..=other.len().min(start + 64));
                data.splice(at..at, other[start..end].iter().copied());
            }
            _ => {}
        }
    }
}

#[test]
fn mutated_seeds_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("seeds");
    let mut failures = Vec::new();
    for &(target, check) in checks::TARGETS {
        let seeds: Vec<Vec<u8>> = inputs(&root.join(target))
            .iter()
            .map(|path| std::fs::read(path).expect("a readable input"))
            .collect();
        if seeds.is_empty() {
            continue;
        }
        // A fixed seed per target: a failure reproduces, and its input is printed in full.
        let seed = target.bytes().fold(0xf022_u64, |hash, byte| {
            hash.wrapping_mul(31) ^ u64::from(byte)
        });
        let mut rng = fastrand::Rng::with_seed(seed);
        for _ in 0..MUTATIONS_PER_TARGET {
            let mut data = seeds[rng.usize(..seeds.len())].clone();
            let other = &seeds[rng.usize(..seeds.len())];
            mutate(&mut rng, &mut data, other);
            if let Some(message) = run(check, &data) {
                failures.push(format!("{target} on {data:?}: {message}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "mutated seeds failing (copy the input into fuzz/regressions/<target>/):\n{}",
        failures.join("\n")
    );
}

/// Random sequences checked against the shard model: six per mode.
const MODEL_SEEDS: u64 = 24;
/// Bytes of each sequence: about two thousand commands, the most one input runs.
const MODEL_INPUT_BYTES: usize = 24 * 1024;

/// The model input of `seed`: its mode byte (`seed % 4`: timer lag on bit 0, the settings
/// commands on bit 1) and then SplitMix64's stream.
fn model_input(seed: u64) -> Vec<u8> {
    let mut stream = SplitMix64::new(seed);
    let mut bytes = Vec::with_capacity(MODEL_INPUT_BYTES);
    bytes.push((seed % 4) as u8);
    while bytes.len() < MODEL_INPUT_BYTES {
        bytes.extend_from_slice(&stream.next_u64().to_le_bytes());
    }
    bytes
}

#[test]
fn shard_state_matches_its_model() {
    for seed in 0..MODEL_SEEDS {
        let data = model_input(seed);
        if let Some(message) = run(checks::shard_state::check, &data) {
            panic!(
                "shard state diverged from the model with seed {seed} (mode {}): {message}",
                data[0]
            );
        }
    }
}
