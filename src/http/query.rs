//! Query strings: splitting `a=1&b=2` into pairs and percent-decoding names and values, once
//! per request into a `Query` that routing, validation and SAS verification all read.
//! Decoding borrows when nothing is encoded, so the common case does not allocate.

use std::borrow::Cow;

use smallvec::SmallVec;

/// The decoded query parameters of one request, in the order sent; inline up to four (an
/// operation's own parameters are at most three, and most requests have none), so only a query
/// that also carries a SAS (eight or more parameters) allocates.
#[derive(Debug, Default)]
pub struct Query<'r> {
    pairs: SmallVec<[(Cow<'r, str>, Cow<'r, str>); 4]>,
}

impl<'r> Query<'r> {
    /// Decodes a raw query string; `None` when a pair has a broken `%` escape or is not UTF-8.
    pub fn parse(raw: &'r [u8]) -> Option<Query<'r>> {
        let pairs = pairs(raw).collect::<Option<SmallVec<_>>>()?;
        Some(Query { pairs })
    }

    /// The first value of parameter `name` (names compare case-insensitively, as Azure does).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(pair_name, _)| pair_name.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_ref())
    }

    /// Every `(name, value)` pair, decoded, in the order sent.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs
            .iter()
            .map(|(name, value)| (name.as_ref(), value.as_ref()))
    }
}

/// Iterates the `name=value` pairs of a raw query string, percent-decoded (`+` is a space).
/// A pair without `=` has an empty value; empty pairs (`a=1&&b=2`) are skipped.
/// Returns `None` for a pair whose decoding is not UTF-8 or has a broken `%` escape.
pub fn pairs(raw: &[u8]) -> impl Iterator<Item = Option<(Cow<'_, str>, Cow<'_, str>)>> {
    raw.split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(at) => (&pair[..at], &pair[at + 1..]),
                None => (pair, &b""[..]),
            };
            Some((percent_decode(name)?, percent_decode(value)?))
        })
}

/// Percent-decodes `raw` (`+` becomes a space). `None` when an escape is broken or the result is
/// not UTF-8.
pub fn percent_decode(raw: &[u8]) -> Option<Cow<'_, str>> {
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        return std::str::from_utf8(raw).ok().map(Cow::Borrowed);
    }
    let mut decoded = Vec::with_capacity(raw.len());
    let mut at = 0;
    while at < raw.len() {
        match raw[at] {
            b'%' => {
                let high = hex_value(*raw.get(at + 1)?)?;
                let low = hex_value(*raw.get(at + 2)?)?;
                decoded.push(high << 4 | low);
                at += 3;
            }
            b'+' => {
                decoded.push(b' ');
                at += 1;
            }
            byte => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(decoded).ok().map(Cow::Owned)
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(raw: &str) -> Vec<Option<(String, String)>> {
        pairs(raw.as_bytes())
            .map(|pair| pair.map(|(name, value)| (name.into_owned(), value.into_owned())))
            .collect()
    }

    #[test]
    fn query_finds_names_case_insensitively() {
        let query = Query::parse(b"Comp=list&comp=other&prefix=a%20b").unwrap();
        assert_eq!(query.get("comp"), Some("list"));
        assert_eq!(query.get("PREFIX"), Some("a b"));
        assert_eq!(query.get("marker"), None);
        assert_eq!(query.pairs().count(), 3);
        assert!(Query::parse(b"a=%zz").is_none());
    }

    #[test]
    fn pairs_table() {
        let some = |name: &str, value: &str| Some((name.to_string(), value.to_string()));
        assert_eq!(collect(""), vec![]);
        assert_eq!(collect("comp=list"), vec![some("comp", "list")]);
        assert_eq!(collect("a=1&&b="), vec![some("a", "1"), some("b", "")]);
        assert_eq!(collect("flag"), vec![some("flag", "")]);
        assert_eq!(collect("sig=a%2Bb%2F%3D"), vec![some("sig", "a+b/=")]);
        assert_eq!(collect("p=a+b"), vec![some("p", "a b")]);
        assert_eq!(collect("x=%e2%82%ac"), vec![some("x", "€")]);
        assert_eq!(collect("bad=%4"), vec![None]);
        assert_eq!(collect("bad=%zz"), vec![None]);
        assert_eq!(collect("bad=%ff"), vec![None]);
    }
}
