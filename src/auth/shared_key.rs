//! SharedKey and SharedKeyLite: the string-to-sign of a request, verification of an
//! `Authorization: SharedKey account:signature` header, and signing for clients (the load
//! generator). Server and client share one canonicalisation, so they cannot drift apart.
//!
//! The layouts follow "Authorize with Shared Key" and azure-queue-contract.md:
//! SharedKey signs the verb, eleven standard headers, the canonicalised `x-ms-*` headers and the
//! canonicalised resource; SharedKeyLite signs the verb, Content-MD5, Content-Type, Date, the
//! same headers and a shorter resource. The blob service signs as the queue service does; the
//! table service (whose port answers readiness probes in `azurite` mode) has layouts of its
//! own: SharedKey the verb, Content-MD5, Content-Type, the date and the short resource;
//! SharedKeyLite the date and the short resource, where the date is `x-ms-date` when sent.

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use smallvec::SmallVec;

use super::accounts::{Account, SigningKey};
use super::collation::compare_header_names;
use super::outcome::{
    decode_signature, AuthFailure, AuthScheme, Principal, SECONDARY_ACCOUNT_SUFFIX,
};
use crate::http::query::{self, Query};
use crate::http::{KnownHeader, Request};
use crate::limits::REQUEST_DATE_SKEW_MS_MAX;

/// The two header-signature schemes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedKeyScheme {
    /// Signs the verb, the eleven standard headers, `x-ms-*` headers and the full resource.
    SharedKey,
    /// Signs the verb, Content-MD5, Content-Type, Date, `x-ms-*` headers and a shorter resource.
    SharedKeyLite,
}

/// The standard headers SharedKey signs, in string-to-sign order. A header absent from the
/// request signs as an empty line.
const STANDARD_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];
const CONTENT_LENGTH: usize = 2;
const CONTENT_MD5: usize = 3;
const CONTENT_TYPE: usize = 4;
const DATE: usize = 5;

/// Headers that belong in CanonicalizedHeaders start with this (compared ignoring case). The
/// Python SDK's bare `x-ms-meta` header matches too, and is signed like any other.
const STORAGE_HEADER_PREFIX: &[u8] = b"x-ms-";

/// A parsed `Authorization` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Authorization<'a> {
    /// The word before the space; it picks the string-to-sign layout.
    pub scheme: SharedKeyScheme,
    /// The URL's account, or its `-secondary` name on the secondary endpoint; it is signed too.
    pub account_name: &'a str,
    /// The base64-decoded HMAC-SHA256 of the string-to-sign.
    pub signature: [u8; 32],
}

/// Parses `SharedKey account:signature` or `SharedKeyLite account:signature`. The separators
/// are found by byte scans (`split_at_byte`), not `str::split_once`'s searcher.
pub fn parse_authorization(value: &[u8]) -> Result<Authorization<'_>, AuthFailure> {
    let text = std::str::from_utf8(value)
        .map_err(|_| AuthFailure::MalformedAuthorization("not UTF-8"))?
        .trim();
    let (scheme, credentials) = split_at_byte(text, b' ').ok_or(
        AuthFailure::MalformedAuthorization("no space after the scheme"),
    )?;
    let scheme = match scheme {
        "SharedKey" => SharedKeyScheme::SharedKey,
        "SharedKeyLite" => SharedKeyScheme::SharedKeyLite,
        _ => return Err(AuthFailure::UnsupportedScheme),
    };
    let (account_name, signature) = split_at_byte(credentials.trim(), b':').ok_or(
        AuthFailure::MalformedAuthorization("no `:` between account and signature"),
    )?;
    let signature = decode_signature(signature).ok_or(AuthFailure::MalformedAuthorization(
        "signature is not base64 of 32 bytes",
    ))?;
    Ok(Authorization {
        scheme,
        account_name,
        signature,
    })
}

/// `text.split_once(separator)` for an ASCII `separator`, by a byte scan: a short header's
/// separator is found in a few instructions a byte, where `str::split_once`'s searcher calls
/// `memchr`. An ASCII byte is a character of its own, so both cuts are character boundaries.
fn split_at_byte(text: &str, separator: u8) -> Option<(&str, &str)> {
    debug_assert!(separator.is_ascii());
    let at = text.bytes().position(|byte| byte == separator)?;
    Some((&text[..at], &text[at + 1..]))
}

/// Verifies the SharedKey or SharedKeyLite `authorization` header of `request`, sent to
/// `account` (its secondary endpoint when `secondary`), under each of the account's keys.
/// `string_to_sign` is scratch space.
pub(super) fn verify(
    request: &Request,
    query: &Query<'_>,
    authorization: &[u8],
    secondary: bool,
    account: &Account,
    string_to_sign: &mut Vec<u8>,
) -> Result<Principal, AuthFailure> {
    let authorization = parse_authorization(authorization)?;
    // Clients sign secondary-endpoint requests with the primary account's name; accept the
    // URL's own spelling too, since the header and the resource then agree.
    let signed_name = authorization.account_name;
    let names_account = signed_name == account.name()
        || (secondary
            && signed_name.strip_suffix(SECONDARY_ACCOUNT_SUFFIX) == Some(account.name()));
    if !names_account {
        return Err(AuthFailure::AccountMismatch);
    }
    string_to_sign.clear();
    // The query as planning decoded it: a pop receipt's escapes are decoded once per request.
    write_string_to_sign_decoded(
        authorization.scheme,
        request.method.as_str(),
        request.path(),
        query
            .pairs()
            .map(|(name, value)| Some((Cow::Borrowed(name), Cow::Borrowed(value)))),
        request.headers(),
        authorization.account_name,
        string_to_sign,
    )?;
    let mut key_index = account.matching_key_index(string_to_sign, &authorization.signature);
    if key_index.is_none() && secondary {
        key_index = verify_secondary_as_primary(request, &authorization, account)?;
    }
    match key_index {
        Some(key_index) => Ok(Principal {
            scheme: match authorization.scheme {
                SharedKeyScheme::SharedKey => AuthScheme::SharedKey,
                SharedKeyScheme::SharedKeyLite => AuthScheme::SharedKeyLite,
            },
            key_index,
        }),
        None => Err(AuthFailure::SignatureMismatch {
            string_to_sign: String::from_utf8_lossy(string_to_sign).into_owned(),
            request_signature: Some(BASE64.encode(authorization.signature)),
        }),
    }
}

/// Azure's rule for SharedKey and SharedKeyLite ("Authorize with Shared Key", the Date header):
/// the request's `x-ms-date`, or its `Date` when it has none, is an RFC 1123 date within
/// `REQUEST_DATE_SKEW_MS_MAX` of `now_ms`, either way. Checked before the signature, so a
/// replayed request costs no HMAC.
pub(super) fn check_request_date(request: &Request, now_ms: u64) -> Result<(), AuthFailure> {
    let date = request
        .known(KnownHeader::XMsDate)
        .or_else(|| request.known(KnownHeader::Date))
        .ok_or(AuthFailure::RequestDateMissing)?;
    let date_ms = crate::time::parse_rfc1123_ms(date).ok_or(AuthFailure::RequestDateInvalid)?;
    if date_ms.saturating_add(REQUEST_DATE_SKEW_MS_MAX) < now_ms {
        return Err(AuthFailure::RequestDateTooOld);
    }
    if date_ms > now_ms.saturating_add(REQUEST_DATE_SKEW_MS_MAX) {
        return Err(AuthFailure::RequestDateInFuture);
    }
    Ok(())
}

/// The key that signed a path-style request to the secondary endpoint
/// (`/account-secondary/...`) as if it went to the primary (`/account/...`): how
/// azure-storage-queue 2.x signs for the emulator, and what Azurite accepts. Tried only once
/// the request's own path failed, so it costs nothing on the way of any other request.
fn verify_secondary_as_primary(
    request: &Request,
    authorization: &Authorization<'_>,
    account: &Account,
) -> Result<Option<usize>, AuthFailure> {
    let secondary_prefix = format!("/{}{SECONDARY_ACCOUNT_SUFFIX}", account.name());
    let Some(rest) = request.target().strip_prefix(secondary_prefix.as_bytes()) else {
        return Ok(None);
    };
    if !matches!(rest.first(), None | Some(b'/' | b'?')) {
        return Ok(None);
    }
    let mut primary_target = Vec::with_capacity(request.target().len());
    primary_target.push(b'/');
    primary_target.extend_from_slice(account.name().as_bytes());
    primary_target.extend_from_slice(rest);
    let mut string_to_sign = Vec::with_capacity(512);
    write_string_to_sign(
        authorization.scheme,
        request.method.as_str(),
        &primary_target,
        request.headers(),
        authorization.account_name,
        &mut string_to_sign,
    )?;
    Ok(account.matching_key_index(&string_to_sign, &authorization.signature))
}

/// Verifies the SharedKey or SharedKeyLite `authorization` header of a request to the table
/// service's port, in the table service's layouts (`write_table_string_to_sign`).
pub(super) fn verify_table(
    request: &Request,
    authorization: &[u8],
    account: &Account,
    string_to_sign: &mut Vec<u8>,
) -> Result<Principal, AuthFailure> {
    let authorization = parse_authorization(authorization)?;
    if authorization.account_name != account.name() {
        return Err(AuthFailure::AccountMismatch);
    }
    string_to_sign.clear();
    write_table_string_to_sign(
        authorization.scheme,
        request.method.as_str(),
        request.target(),
        request.headers(),
        authorization.account_name,
        string_to_sign,
    )?;
    match account.matching_key_index(string_to_sign, &authorization.signature) {
        Some(key_index) => Ok(Principal {
            scheme: match authorization.scheme {
                SharedKeyScheme::SharedKey => AuthScheme::SharedKey,
                SharedKeyScheme::SharedKeyLite => AuthScheme::SharedKeyLite,
            },
            key_index,
        }),
        None => Err(AuthFailure::SignatureMismatch {
            string_to_sign: String::from_utf8_lossy(string_to_sign).into_owned(),
            request_signature: Some(BASE64.encode(authorization.signature)),
        }),
    }
}

/// Appends the table service's string-to-sign of a request to `out`: for SharedKey
/// `VERB\nContent-MD5\nContent-Type\nDate\n/account/path[?comp=v]`, for SharedKeyLite
/// `Date\n/account/path[?comp=v]`, the date being `x-ms-date`'s when the request has one.
pub fn write_table_string_to_sign<'h>(
    scheme: SharedKeyScheme,
    method: &str,
    target: &[u8],
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    account_name: &str,
    out: &mut Vec<u8>,
) -> Result<(), AuthFailure> {
    let (mut content_md5, mut content_type, mut date, mut storage_date) = (None, None, None, None);
    for (name, value) in headers {
        let slot = if name.eq_ignore_ascii_case(b"content-md5") {
            &mut content_md5
        } else if name.eq_ignore_ascii_case(b"content-type") {
            &mut content_type
        } else if name.eq_ignore_ascii_case(b"date") {
            &mut date
        } else if name.eq_ignore_ascii_case(b"x-ms-date") {
            &mut storage_date
        } else {
            continue;
        };
        // The first occurrence wins, as in the other layouts.
        slot.get_or_insert(value.trim_ascii());
    }
    let date = storage_date.or(date).unwrap_or_default();
    if scheme == SharedKeyScheme::SharedKey {
        out.extend_from_slice(method.as_bytes());
        out.push(b'\n');
        for value in [content_md5, content_type] {
            out.extend_from_slice(value.unwrap_or_default());
            out.push(b'\n');
        }
    }
    out.extend_from_slice(date);
    out.push(b'\n');
    let (path, raw_query) = split_target(target);
    out.push(b'/');
    out.extend_from_slice(account_name.as_bytes());
    out.extend_from_slice(path);
    write_comp_parameter(query::pairs(raw_query), out)
}

/// The SharedKey signature a client puts in `Authorization: SharedKey account:<signature>`.
///
/// `target` is the request target exactly as it will be sent (path and query, percent-encoded);
/// `headers` are the headers to send, without Content-Length, which is `content_length` (0 for
/// no body). Fails only when the query has a broken percent-escape.
pub fn sign_shared_key(
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    content_length: u64,
    account_name: &str,
    key: &SigningKey,
) -> Result<String, AuthFailure> {
    let content_length_text = content_length.to_string();
    let content_length_header =
        (content_length > 0).then_some((&b"content-length"[..], content_length_text.as_bytes()));
    let headers = headers
        .iter()
        .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
        .filter(|(name, _)| !name.eq_ignore_ascii_case(b"content-length"))
        .chain(content_length_header);
    let mut string_to_sign = Vec::with_capacity(512);
    write_string_to_sign(
        SharedKeyScheme::SharedKey,
        method,
        target.as_bytes(),
        headers,
        account_name,
        &mut string_to_sign,
    )?;
    Ok(key.sign_base64(&string_to_sign))
}

/// Appends the string-to-sign of a request to `out`. `account_name` is the one in the
/// `Authorization` header; `target` the raw request target.
pub fn write_string_to_sign<'h>(
    scheme: SharedKeyScheme,
    method: &str,
    target: &[u8],
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    account_name: &str,
    out: &mut Vec<u8>,
) -> Result<(), AuthFailure> {
    let (path, raw_query) = split_target(target);
    write_string_to_sign_decoded(
        scheme,
        method,
        path,
        query::pairs(raw_query),
        headers,
        account_name,
        out,
    )
}

/// `write_string_to_sign` of a request whose target is given as its raw `path` and its query's
/// decoded `(name, value)` pairs, in the order sent (`None`: a pair that did not decode).
fn write_string_to_sign_decoded<'h, 'q>(
    scheme: SharedKeyScheme,
    method: &str,
    path: &[u8],
    query_pairs: impl Iterator<Item = Option<(Cow<'q, str>, Cow<'q, str>)>>,
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    account_name: &str,
    out: &mut Vec<u8>,
) -> Result<(), AuthFailure> {
    // One pass sorts the headers into the standard slots (first occurrence wins) and the
    // storage headers to canonicalise.
    let mut standard: [&[u8]; STANDARD_HEADERS.len()] = [b""; STANDARD_HEADERS.len()];
    let mut standard_seen = [false; STANDARD_HEADERS.len()];
    // Inline: the SDKs sign three to six `x-ms-` headers, so a signature costs no allocation.
    let mut storage_headers: SmallVec<[(&[u8], &[u8]); 16]> = SmallVec::new();
    for (name, value) in headers {
        let value = value.trim_ascii();
        if name.len() >= STORAGE_HEADER_PREFIX.len()
            && name[..STORAGE_HEADER_PREFIX.len()].eq_ignore_ascii_case(STORAGE_HEADER_PREFIX)
        {
            storage_headers.push((name, value));
        } else if let Some(slot) = STANDARD_HEADERS
            .iter()
            .position(|standard_name| name.eq_ignore_ascii_case(standard_name.as_bytes()))
        {
            if !standard_seen[slot] {
                standard_seen[slot] = true;
                standard[slot] = value;
            }
        }
    }
    // Stable, so repeated headers keep their order when their values are joined below.
    storage_headers.sort_by(|(left, _), (right, _)| compare_header_names(left, right));
    // The service takes the time from x-ms-date when both are sent; the SDKs then sign Date as
    // an empty line.
    if storage_headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case(b"x-ms-date"))
    {
        standard[DATE] = b"";
    }
    // Since version 2015-02-21 a zero Content-Length signs as empty, like an absent one.
    if standard[CONTENT_LENGTH] == b"0" {
        standard[CONTENT_LENGTH] = b"";
    }

    out.extend_from_slice(method.as_bytes());
    out.push(b'\n');
    match scheme {
        SharedKeyScheme::SharedKey => {
            for value in standard {
                out.extend_from_slice(value);
                out.push(b'\n');
            }
        }
        SharedKeyScheme::SharedKeyLite => {
            for slot in [CONTENT_MD5, CONTENT_TYPE, DATE] {
                out.extend_from_slice(standard[slot]);
                out.push(b'\n');
            }
        }
    }
    write_canonicalized_headers(&storage_headers, out);

    out.push(b'/');
    out.extend_from_slice(account_name.as_bytes());
    out.extend_from_slice(path);
    match scheme {
        SharedKeyScheme::SharedKey => write_canonicalized_query(query_pairs, out),
        SharedKeyScheme::SharedKeyLite => write_comp_parameter(query_pairs, out),
    }
}

/// `name:value\n` for each storage header in collation order, names lowercased. A header sent
/// more than once signs once, its values joined with `,` in the order received (HTTP's rule for
/// combining repeated fields).
fn write_canonicalized_headers(sorted_headers: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    let mut previous_name: Option<&[u8]> = None;
    for &(name, value) in sorted_headers {
        if previous_name.is_some_and(|previous| previous.eq_ignore_ascii_case(name)) {
            // Replace the previous header's line break with the separator.
            out.pop();
            out.push(b',');
        } else {
            out.extend(name.iter().map(u8::to_ascii_lowercase));
            out.push(b':');
        }
        out.extend_from_slice(value);
        out.push(b'\n');
        previous_name = Some(name);
    }
}

/// SharedKey's query part of CanonicalizedResource: for each parameter name, lowercased, in byte
/// order, `\nname:` and its decoded values sorted and joined with `,`.
fn write_canonicalized_query<'q>(
    query_pairs: impl Iterator<Item = Option<(Cow<'q, str>, Cow<'q, str>)>>,
    out: &mut Vec<u8>,
) -> Result<(), AuthFailure> {
    // Inline: requests carry a handful of parameters (`popreceipt`, `visibilitytimeout`, …).
    let mut parameters: SmallVec<[(Cow<'q, str>, Cow<'q, str>); 8]> = SmallVec::new();
    for pair in query_pairs {
        let (name, value) = pair.ok_or(AuthFailure::MalformedQuery)?;
        parameters.push((lowercase(name), value));
    }
    parameters.sort_unstable();
    let mut previous_name: Option<&str> = None;
    for (name, value) in &parameters {
        if previous_name == Some(name.as_ref()) {
            out.push(b',');
        } else {
            out.push(b'\n');
            out.extend_from_slice(name.as_bytes());
            out.push(b':');
        }
        out.extend_from_slice(value.as_bytes());
        previous_name = Some(name);
    }
    Ok(())
}

/// SharedKeyLite's query part of CanonicalizedResource: `?comp=value` when the query has `comp`.
fn write_comp_parameter<'q>(
    query_pairs: impl Iterator<Item = Option<(Cow<'q, str>, Cow<'q, str>)>>,
    out: &mut Vec<u8>,
) -> Result<(), AuthFailure> {
    for pair in query_pairs {
        let (name, value) = pair.ok_or(AuthFailure::MalformedQuery)?;
        if name.eq_ignore_ascii_case("comp") {
            out.extend_from_slice(b"?comp=");
            out.extend_from_slice(value.as_bytes());
            return Ok(());
        }
    }
    Ok(())
}

/// Splits a request target at the first `?` into the raw path and the raw query.
fn split_target(target: &[u8]) -> (&[u8], &[u8]) {
    match target.iter().position(|&byte| byte == b'?') {
        Some(at) => (&target[..at], &target[at + 1..]),
        None => (target, b""),
    }
}

/// Lowercases a query parameter name, borrowing when it already is (the usual case).
fn lowercase(name: Cow<'_, str>) -> Cow<'_, str> {
    if name.bytes().any(|byte| byte.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        name
    }
}

#[cfg(test)]
mod tests;
