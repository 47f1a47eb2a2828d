//! The order in which SharedKey canonicalises `x-ms-*` headers: the Azure service's culture-aware
//! collation (.NET, en-US), which the official SDKs imitate with weight tables. It is not byte
//! order: `-` and `'` are ignored on the first pass and only break ties, and symbols sort before
//! digits, which sort before letters (`x-ms-meta-a_b` < `x-ms-meta-a1` < `x-ms-meta-ab` <
//! `x-ms-meta-a-b`).
//!
//! The SDKs compare in three passes over a sort key: primary weights (which character), a case
//! pass, and a final pass that only weighs `'` and `-`. The SDKs lowercase header names before
//! sorting, so the case pass can never decide; `compare_header_names` folds ASCII case on the fly
//! (no lowercased copies) and skips that pass.

use std::cmp::Ordering;

/// The weight of "this name has ended" on every pass: lower than any character's weight, so a
/// name sorts before any longer name it is a prefix of.
const END_WEIGHT: u16 = 1;

/// Symbols with a primary weight, in their collation order; all sort before digits and letters.
/// The order is the en-US one the SDK tables encode (`+` comes last). Symbols absent from this
/// list, and every non-ASCII byte, are ignorable: no header name is built from them.
const SYMBOLS_IN_ORDER: &[u8] = b"!#$%&*.^_`|~+";

/// First primary weight of each class; the gaps keep the classes apart.
const SYMBOL_WEIGHT_FIRST: u16 = 2;
const DIGIT_WEIGHT_FIRST: u16 = 0x100;
const LETTER_WEIGHT_FIRST: u16 = 0x200;

/// Primary weight of `byte`: which character it is, case folded. 0 means ignorable on this pass.
fn primary_weight(byte: u8) -> u16 {
    match byte {
        b'0'..=b'9' => DIGIT_WEIGHT_FIRST + u16::from(byte - b'0'),
        b'a'..=b'z' => LETTER_WEIGHT_FIRST + u16::from(byte - b'a'),
        b'A'..=b'Z' => LETTER_WEIGHT_FIRST + u16::from(byte - b'A'),
        _ => match SYMBOLS_IN_ORDER.iter().position(|&symbol| symbol == byte) {
            Some(rank) => SYMBOL_WEIGHT_FIRST + rank as u16,
            None => 0,
        },
    }
}

/// Final-pass weight of `byte`: only the apostrophe and the hyphen carry one (apostrophe first);
/// every other byte is 0 here.
fn final_weight(byte: u8) -> u16 {
    match byte {
        b'\'' => 2,
        b'-' => 3,
        _ => 0,
    }
}

/// Compares two header names the way the Azure service sorts canonicalised headers, ignoring
/// ASCII case. A total order; `Equal` only for names that differ at most in case (or in bytes
/// that HTTP forbids in header names).
pub fn compare_header_names(left: &[u8], right: &[u8]) -> Ordering {
    compare_primary(left, right).then_with(|| compare_final(left, right))
}

/// First pass: the names' sequences of primary weights, ignorable bytes skipped, compared
/// lexicographically (a prefix sorts first).
fn compare_primary(left: &[u8], right: &[u8]) -> Ordering {
    let left_weights = left
        .iter()
        .map(|&byte| primary_weight(byte))
        .filter(|&w| w != 0);
    let right_weights = right
        .iter()
        .map(|&byte| primary_weight(byte))
        .filter(|&w| w != 0);
    left_weights.cmp(right_weights)
}

/// Final pass, reached only when the primary weights tie. Unlike the first pass it walks both
/// names position by position without skipping, an ended name weighing `END_WEIGHT`, and the
/// first differing weight decides. Unweighted bytes (0) sort below the end of a name and below
/// `'` and `-`, so at the first position where the names differ, the name without a hyphen
/// there sorts first (`ab` < `a-b`: the hyphen came earlier in `a-b`).
fn compare_final(left: &[u8], right: &[u8]) -> Ordering {
    let weight_at = |name: &[u8], position: usize| match name.get(position) {
        Some(&byte) => final_weight(byte),
        None => END_WEIGHT,
    };
    (0..left.len().max(right.len()))
        .map(|position| weight_at(left, position).cmp(&weight_at(right, position)))
        .find(|ordering| ordering.is_ne())
        .unwrap_or(Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(names: &[&str]) -> Vec<String> {
        let mut names: Vec<&str> = names.to_vec();
        names.sort_by(|left, right| compare_header_names(left.as_bytes(), right.as_bytes()));
        names.into_iter().map(str::to_string).collect()
    }

    /// The three vectors of azure-queue-contract.md, produced by the SDKs. Each is sorted from
    /// every rotation and from reverse order, so the result cannot depend on the input order.
    #[test]
    fn contract_vectors() {
        let vectors: &[&[&str]] = &[
            &[
                "x-ms-meta-a",
                "x-ms-meta-a_b",
                "x-ms-meta-a1",
                "x-ms-meta-ab",
                "x-ms-meta-a-b",
            ],
            &[
                "x-ms-meta-a_c",
                "x-ms-meta-a0",
                "x-ms-meta-ab",
                "x-ms-meta-a-c",
                "x-ms-meta-b",
            ],
            &[
                "x-ms-client-request-id",
                "x-ms-date",
                "x-ms-meta-alpha",
                "x-ms-meta-alpha2",
                "x-ms-meta-zeta",
                "x-ms-version",
            ],
        ];
        for expected in vectors {
            for rotation in 0..expected.len() {
                let mut input = expected.to_vec();
                input.rotate_left(rotation);
                assert_eq!(sorted(&input), *expected);
                input.reverse();
                assert_eq!(sorted(&input), *expected);
            }
        }
    }

    #[test]
    fn pairwise_table() {
        use Ordering::*;
        let cases: &[(&str, &str, Ordering)] = &[
            ("a", "a", Equal),
            ("x-ms-Date", "x-ms-date", Equal),
            ("a", "b", Less),
            ("a", "ab", Less),
            ("a_", "a0", Less),
            ("a9", "aa", Less),
            ("a!", "a_", Less),
            ("a~", "a+", Less),
            ("a+", "a0", Less),
            ("ab", "a-b", Less),
            ("a-b", "a-c", Less),
            ("a'b", "a-b", Less),
            ("a-b", "ab-", Greater),
            ("a-", "a", Greater),
            ("a--b", "a-b", Greater),
            ("-ab", "a-b", Greater),
        ];
        for &(left, right, expected) in cases {
            assert_eq!(
                compare_header_names(left.as_bytes(), right.as_bytes()),
                expected,
                "{left} vs {right}"
            );
            assert_eq!(
                compare_header_names(right.as_bytes(), left.as_bytes()),
                expected.reverse(),
                "{right} vs {left}"
            );
        }
    }

    /// Sorting must not depend on input order: compare is a total order on a set of names built
    /// from the characters that matter (checked for transitivity on every triple).
    #[test]
    fn total_order_on_small_alphabet() {
        let alphabet = ["", "a", "b", "-", "_", "1", "'"];
        let mut names = Vec::new();
        for first in alphabet {
            for second in alphabet {
                for third in alphabet {
                    names.push(format!("{first}{second}{third}"));
                }
            }
        }
        names.sort();
        names.dedup();
        for left in &names {
            for right in &names {
                let forward = compare_header_names(left.as_bytes(), right.as_bytes());
                let backward = compare_header_names(right.as_bytes(), left.as_bytes());
                assert_eq!(forward, backward.reverse(), "{left:?} vs {right:?}");
                assert_eq!(
                    forward == Ordering::Equal,
                    left == right,
                    "{left:?} vs {right:?}"
                );
            }
        }
        let mut sorted_names = names.clone();
        sorted_names.sort_by(|l, r| compare_header_names(l.as_bytes(), r.as_bytes()));
        for window in sorted_names.windows(2) {
            assert_eq!(
                compare_header_names(window[0].as_bytes(), window[1].as_bytes()),
                Ordering::Less
            );
        }
        for (left_index, left) in sorted_names.iter().enumerate() {
            for right in &sorted_names[left_index + 1..] {
                assert_eq!(
                    compare_header_names(left.as_bytes(), right.as_bytes()),
                    Ordering::Less,
                    "{left:?} vs {right:?}"
                );
            }
        }
    }
}
