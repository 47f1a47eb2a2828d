//! Request validation that needs Azure's rules but no state: queue names, metadata headers and
//! integer query parameters. Everything here runs before a command is built, so bad input never
//! reaches (or changes) the stored state.

use crate::error::StorageError;
use crate::http::Request;
use crate::limits::METADATA_BYTES_MAX;
use crate::queue::Metadata;

use super::xml::has_non_xml_char;
use crate::http::Query;

/// Queue names: 3-63 characters of `[a-z0-9-]`, starting and ending alphanumeric, no `--`.
pub fn queue_name(name: &str) -> Result<(), StorageError> {
    if !(3..=63).contains(&name.len()) {
        return Err(StorageError::ResourceNameLengthOutOfRange);
    }
    let bytes = name.as_bytes();
    let allowed = bytes
        .iter()
        .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let edges_alphanumeric = bytes[0] != b'-' && bytes[bytes.len() - 1] != b'-';
    if !allowed || !edges_alphanumeric || name.contains("--") {
        return Err(StorageError::InvalidResourceName);
    }
    Ok(())
}

/// The `x-ms-meta-*` headers of a request as metadata, validated (`metadata_pairs`). The bare
/// `x-ms-meta` header some SDKs send is not metadata.
pub fn metadata(request: &Request) -> Result<Metadata, StorageError> {
    const PREFIX: &[u8] = b"x-ms-meta-";
    metadata_pairs(
        request
            .headers()
            .filter(|(name, _)| {
                name.len() >= PREFIX.len() && name[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
            })
            .map(|(name, value)| (&name[PREFIX.len()..], value)),
    )
}

/// Metadata from `(name, value)` pairs (header names without `x-ms-meta-`, or an `--init`
/// file's), validated: names are C# identifiers (ASCII), unique when compared
/// case-insensitively, and names plus values total at most `METADATA_BYTES_MAX`.
pub fn metadata_pairs<'a>(
    pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Metadata, StorageError> {
    let mut metadata = Metadata::new();
    let mut total_bytes = 0usize;
    for (key, value) in pairs {
        if key.is_empty() {
            return Err(StorageError::EmptyMetadataKey);
        }
        if !is_identifier(key) {
            return Err(StorageError::InvalidMetadata);
        }
        // List Queues with `include=metadata` echoes values in XML: only what XML 1.0 may hold.
        let value = std::str::from_utf8(value)
            .ok()
            .filter(|value| !has_non_xml_char(value.as_bytes()))
            .ok_or(StorageError::InvalidMetadata)?;
        total_bytes += key.len() + value.len();
        if total_bytes > METADATA_BYTES_MAX {
            return Err(StorageError::MetadataTooLarge);
        }
        // `is_identifier` admits only ASCII, so this conversion cannot fail.
        let key = String::from_utf8_lossy(key).into_owned();
        if metadata
            .iter()
            .any(|(existing, _)| existing.eq_ignore_ascii_case(&key))
        {
            return Err(StorageError::InvalidMetadata);
        }
        metadata.push((key, value.to_string()));
    }
    metadata.sort_by_key(|(key, _)| key.to_ascii_lowercase());
    Ok(metadata)
}

fn is_identifier(name: &[u8]) -> bool {
    match name.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        None => false,
    }
}

/// An optional integer query parameter within `range`: not an integer →
/// `InvalidQueryParameterValue`; outside the range → `OutOfRangeQueryParameterValue`.
pub fn integer_parameter(
    query: &Query<'_>,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<Option<i64>, StorageError> {
    let Some(raw) = query.get(name) else {
        return Ok(None);
    };
    let value: i64 = raw
        .trim()
        .parse()
        .map_err(|_| StorageError::InvalidQueryParameterValue)?;
    if !range.contains(&value) {
        return Err(StorageError::OutOfRangeQueryParameterValue);
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_name_table() {
        let cases = [
            ("abc", Ok(())),
            ("my-queue-1", Ok(())),
            ("0ab", Ok(())),
            (&*"a".repeat(63), Ok(())),
            ("ab", Err(StorageError::ResourceNameLengthOutOfRange)),
            (
                &*"a".repeat(64),
                Err(StorageError::ResourceNameLengthOutOfRange),
            ),
            ("", Err(StorageError::ResourceNameLengthOutOfRange)),
            ("-abc", Err(StorageError::InvalidResourceName)),
            ("abc-", Err(StorageError::InvalidResourceName)),
            ("ab--cd", Err(StorageError::InvalidResourceName)),
            ("Upper", Err(StorageError::InvalidResourceName)),
            ("a|b", Err(StorageError::InvalidResourceName)),
            ("a_b", Err(StorageError::InvalidResourceName)),
            ("a%20b", Err(StorageError::InvalidResourceName)),
        ];
        for (name, expected) in cases {
            assert_eq!(queue_name(name), expected, "{name:?}");
        }
    }

    #[test]
    fn identifier_table() {
        for good in ["a", "_", "Abc_9", "camelCase"] {
            assert!(is_identifier(good.as_bytes()), "{good}");
        }
        for bad in ["", "9a", "a-b", "a.b", "é"] {
            assert!(!is_identifier(bad.as_bytes()), "{bad}");
        }
    }

    type MetadataOutcome = Result<Metadata, StorageError>;

    fn metadata_of(headers: &[(&str, &str)]) -> MetadataOutcome {
        metadata(&Request::from_parts(
            "PUT",
            "/a/q",
            headers,
            bytes::Bytes::new(),
        ))
    }

    #[test]
    fn metadata_table() {
        let pairs = |list: &[(&str, &str)]| -> MetadataOutcome {
            Ok(list
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect())
        };
        let big = "v".repeat(METADATA_BYTES_MAX);
        let cases: Vec<(Vec<(&str, &str)>, MetadataOutcome)> = vec![
            (vec![], pairs(&[])),
            (vec![("x-ms-version", "1"), ("Host", "h")], pairs(&[])),
            // Case kept, sorted by lowercased name; the bare header the Python SDK sends is
            // ignored.
            (
                vec![
                    ("x-ms-meta-Zeta", "z"),
                    ("X-MS-META-alpha", "a"),
                    ("x-ms-meta", "{}"),
                ],
                pairs(&[("alpha", "a"), ("Zeta", "z")]),
            ),
            (vec![("x-ms-meta-_under9", "")], pairs(&[("_under9", "")])),
            (
                vec![("x-ms-meta-", "v")],
                Err(StorageError::EmptyMetadataKey),
            ),
            (
                vec![("x-ms-meta-9a", "v")],
                Err(StorageError::InvalidMetadata),
            ),
            (
                vec![("x-ms-meta-a-b", "v")],
                Err(StorageError::InvalidMetadata),
            ),
            (
                vec![("x-ms-meta-Key", "1"), ("x-ms-meta-key", "2")],
                Err(StorageError::InvalidMetadata),
            ),
            // A value List Queues could not write into XML.
            (
                vec![("x-ms-meta-k", "a\u{FFFF}")],
                Err(StorageError::InvalidMetadata),
            ),
            (
                vec![("x-ms-meta-k", "tab\tcaf\u{e9}")],
                pairs(&[("k", "tab\tcaf\u{e9}")]),
            ),
            (
                vec![("x-ms-meta-k", &big[..METADATA_BYTES_MAX - 1])],
                Ok(vec![(
                    "k".to_string(),
                    big[..METADATA_BYTES_MAX - 1].to_string(),
                )]),
            ),
            (
                vec![("x-ms-meta-k", &big)],
                Err(StorageError::MetadataTooLarge),
            ),
        ];
        for (headers, expected) in cases {
            assert_eq!(metadata_of(&headers), expected, "{headers:?}");
        }
    }

    #[test]
    fn integer_parameter_table() {
        let query = Query::parse(b"n=5&big=99&neg=-1&word=five&empty=").unwrap();
        assert_eq!(integer_parameter(&query, "n", 1..=32), Ok(Some(5)));
        assert_eq!(integer_parameter(&query, "absent", 1..=32), Ok(None));
        assert_eq!(
            integer_parameter(&query, "big", 1..=32),
            Err(StorageError::OutOfRangeQueryParameterValue)
        );
        assert_eq!(
            integer_parameter(&query, "neg", 1..=32),
            Err(StorageError::OutOfRangeQueryParameterValue)
        );
        assert_eq!(
            integer_parameter(&query, "word", 1..=32),
            Err(StorageError::InvalidQueryParameterValue)
        );
        assert_eq!(
            integer_parameter(&query, "empty", 1..=32),
            Err(StorageError::InvalidQueryParameterValue)
        );
    }
}
