//! What the request log (`--debug FILE`) must never hold: a credential that works. A line is
//! passed through `redact_credentials` before it is written, which replaces with `REDACTED`
//! the value of a SAS `sig` (as a query parameter, `sig=…`, and as a line of a SharedKey
//! string-to-sign's canonicalized resource, `sig:…`), the signature of an `Authorization:
//! SharedKey account:SIG` or `SharedKeyLite` header, and a `Bearer` token. Everything else of
//! the line (the SAS's other fields, a string-to-sign, which no one can sign without the key)
//! stays, so the log still shows why a request was refused.
//!
//! It is a plain scan of the line, not a parse: a log line mixes a request target, text and a
//! string-to-sign escaped by `{:?}`, and a value is cut at the first byte that cannot be part of
//! a percent-encoded or base64 signature. Redacting too much is harmless; too little is not.

use std::borrow::Cow;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "REDACTED";

/// Where a credential's value starts after a marker, and what may precede the marker.
#[derive(Clone, Copy)]
enum Marker {
    /// `sig=` or `sig:`: the value follows at once.
    Signature,
    /// `SharedKey ` or `SharedKeyLite `: `account:` comes first, then the value.
    SharedKey,
    /// `Bearer `: the token follows.
    Bearer,
}

/// The markers, lowercase (the scan compares ASCII-case-insensitively).
const MARKERS: [(&str, Marker); 5] = [
    ("sig=", Marker::Signature),
    ("sig:", Marker::Signature),
    ("sharedkeylite ", Marker::SharedKey),
    ("sharedkey ", Marker::SharedKey),
    ("bearer ", Marker::Bearer),
];

/// Whether a byte can belong to a word that a marker would then be the tail of (`config:` is
/// not `sig:`).
fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.' | b'%')
}

/// Whether a byte ends a credential's value: a query's next parameter, white space, quotes,
/// `{:?}`'s escapes, separators of headers and lists.
fn ends_value(byte: u8) -> bool {
    byte.is_ascii_whitespace() || matches!(byte, b'&' | b'"' | b'\'' | b'\\' | b',' | b';' | b'#')
}

/// Whether the marker found at `at` of `line` starts a credential: nothing of a word before
/// it, or it follows an escaped newline (`\n` written by `{:?}`, the canonicalized resource's
/// line break).
fn marker_starts_here(line: &[u8], at: usize) -> bool {
    at == 0
        || !is_word_byte(line[at - 1])
        || (at >= 2 && line[at - 2] == b'\\' && line[at - 1] == b'n')
}

/// `line` with every credential value replaced by `REDACTED` (borrowed when there was none).
pub fn redact_credentials(line: &str) -> Cow<'_, str> {
    let bytes = line.as_bytes();
    let lower = line.to_ascii_lowercase();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (needle, marker) in MARKERS {
        for (at, _) in lower.match_indices(needle) {
            if !marker_starts_here(bytes, at) {
                continue;
            }
            let mut start = at + needle.len();
            if let Marker::SharedKey = marker {
                // `account:`: an account name is letters and digits.
                let name_end = start
                    + bytes[start..]
                        .iter()
                        .take_while(|byte| byte.is_ascii_alphanumeric())
                        .count();
                if bytes.get(name_end) != Some(&b':') {
                    continue;
                }
                start = name_end + 1;
            }
            let end = start
                + bytes[start..]
                    .iter()
                    .take_while(|&&byte| !ends_value(byte))
                    .count();
            if end > start {
                ranges.push((start, end));
            }
        }
    }
    if ranges.is_empty() {
        return Cow::Borrowed(line);
    }
    ranges.sort_unstable();
    let mut redacted = String::with_capacity(line.len());
    let mut written = 0;
    for (start, end) in ranges {
        // Ranges never overlap today; were one inside another, it would add nothing.
        if end <= written {
            continue;
        }
        let start = start.max(written);
        redacted.push_str(&line[written..start]);
        redacted.push_str(REDACTED);
        written = end;
    }
    redacted.push_str(&line[written..]);
    Cow::Owned(redacted)
}

#[cfg(test)]
mod tests {
    use super::redact_credentials;

    #[test]
    fn credentials_table() {
        let cases = [
            // A SAS in a request target, first, middle and last; upper case too.
            (
                "GET /a/q/messages?sv=2026-10-06&sp=r&sig=abc%2Bdef%3D HTTP",
                "GET /a/q/messages?sv=2026-10-06&sp=r&sig=REDACTED HTTP",
            ),
            ("/a/q?sig=abc&sp=r", "/a/q?sig=REDACTED&sp=r"),
            ("/a/q?SIG=abc", "/a/q?SIG=REDACTED"),
            // A SharedKey string-to-sign as `{:?}` writes it: the resource's `sig:` line.
            (
                "signed \"GET\\n\\n/a/q\\nsig:c2lnbmF0dXJl\\nsp:r\"",
                "signed \"GET\\n\\n/a/q\\nsig:REDACTED\\nsp:r\"",
            ),
            // Authorization headers, however quoted.
            (
                "Authorization: SharedKey devstoreaccount1:Zm9vYmFy+/9=",
                "Authorization: SharedKey devstoreaccount1:REDACTED",
            ),
            (
                "Authorization: SharedKeyLite acct:Zm9v, next",
                "Authorization: SharedKeyLite acct:REDACTED, next",
            ),
            (
                "authorization=\"Bearer eyJ0.eyJ1.c2ln\"",
                "authorization=\"Bearer REDACTED\"",
            ),
            // Two in one line.
            ("?sig=a SharedKey b:c", "?sig=REDACTED SharedKey b:REDACTED"),
        ];
        for (line, expected) in cases {
            assert_eq!(redact_credentials(line), expected, "{line}");
        }
        // What is not a credential stays as it is, borrowed.
        for line in [
            "shard 0 GET /devstoreaccount1/q?comp=metadata -> ok",
            "config:x signature mismatch; signed \"GET\\n/a/q\\ncomp:list\"",
            "msig=1 and design:2 and SharedKey without-colon",
            "a SAS field sig is missing",
            "?sig=&sp=r",
        ] {
            assert!(
                matches!(redact_credentials(line), std::borrow::Cow::Borrowed(_)),
                "{line}"
            );
        }
    }
}
