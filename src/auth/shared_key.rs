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

use super::accounts::{Account, SigningKey};
use super::collation::compare_header_names;
use super::outcome::{
    decode_signature, AuthFailure, AuthScheme, Principal, SECONDARY_ACCOUNT_SUFFIX,
};
use crate::http::query;
use crate::http::Request;
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

/// Parses `SharedKey account:signature` or `SharedKeyLite account:signature`.
pub fn parse_authorization(value: &[u8]) -> Result<Authorization<'_>, AuthFailure> {
    let text = std::str::from_utf8(value)
        .map_err(|_| AuthFailure::MalformedAuthorization("not UTF-8"))?
        .trim();
    let (scheme, credentials) = text
        .split_once(' ')
        .ok_or(AuthFailure::MalformedAuthorization(
            "no space after the scheme",
        ))?;
    let scheme = match scheme {
        "SharedKey" => SharedKeyScheme::SharedKey,
        "SharedKeyLite" => SharedKeyScheme::SharedKeyLite,
        _ => return Err(AuthFailure::UnsupportedScheme),
    };
    let (account_name, signature) =
        credentials
            .trim()
            .split_once(':')
            .ok_or(AuthFailure::MalformedAuthorization(
                "no `:` between account and signature",
            ))?;
    let signature = decode_signature(signature).ok_or(AuthFailure::MalformedAuthorization(
        "signature is not base64 of 32 bytes",
    ))?;
    Ok(Authorization {
        scheme,
        account_name,
        signature,
    })
}

/// Verifies the SharedKey or SharedKeyLite `authorization` header of `request`, sent to
/// `account` (its secondary endpoint when `secondary`), under each of the account's keys.
/// `string_to_sign` is scratch space.
pub(super) fn verify(
    request: &Request,
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
    write_string_to_sign(
        authorization.scheme,
        request.method.as_str(),
        request.target(),
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
        .header("x-ms-date")
        .or_else(|| request.header("date"))
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
    write_comp_parameter(raw_query, out)
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
    // One pass sorts the headers into the standard slots (first occurrence wins) and the
    // storage headers to canonicalise.
    let mut standard: [&[u8]; STANDARD_HEADERS.len()] = [b""; STANDARD_HEADERS.len()];
    let mut standard_seen = [false; STANDARD_HEADERS.len()];
    let mut storage_headers: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
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

    let (path, raw_query) = split_target(target);
    out.push(b'/');
    out.extend_from_slice(account_name.as_bytes());
    out.extend_from_slice(path);
    match scheme {
        SharedKeyScheme::SharedKey => write_canonicalized_query(raw_query, out),
        SharedKeyScheme::SharedKeyLite => write_comp_parameter(raw_query, out),
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
fn write_canonicalized_query(raw_query: &[u8], out: &mut Vec<u8>) -> Result<(), AuthFailure> {
    let mut parameters: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::new();
    for pair in query::pairs(raw_query) {
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
fn write_comp_parameter(raw_query: &[u8], out: &mut Vec<u8>) -> Result<(), AuthFailure> {
    for pair in query::pairs(raw_query) {
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
mod tests {
    use super::*;
    use crate::auth::test_support::{development_accounts, request};
    use crate::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};

    const PEEK_TARGET: &str = "/devstoreaccount1/myqueue/messages?numofmessages=2&peekonly=true";
    const PEEK_HEADERS: &[(&str, &str)] = &[
        ("x-ms-version", "2026-04-06"),
        ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
        (
            "x-ms-client-request-id",
            "00000000-0000-0000-0000-000000000001",
        ),
    ];
    const PEEK_SHARED_KEY: &str = "qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0=";
    const PEEK_SHARED_KEY_LITE: &str = "adHUy8qYGbk2BPINvg67pcMIw6eIcQjBOrUtug8zvOQ=";

    fn string_to_sign(scheme: SharedKeyScheme, request: &Request) -> String {
        let mut out = Vec::new();
        write_string_to_sign(
            scheme,
            request.method.as_str(),
            request.target(),
            request.headers(),
            DEVELOPMENT_ACCOUNT_NAME,
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn development_key() -> SigningKey {
        SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap()
    }

    /// Verifies `authorization` for a request to the development account, at its secondary
    /// endpoint when `secondary`.
    fn verify_with(
        request: &Request,
        authorization: &str,
        secondary: bool,
    ) -> Result<Principal, AuthFailure> {
        let accounts = development_accounts();
        let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
        verify(
            request,
            authorization.as_bytes(),
            secondary,
            account,
            &mut Vec::new(),
        )
    }

    /// The contract's worked vector: exact strings-to-sign and signatures of both schemes.
    #[test]
    fn contract_vector_strings_and_signatures() {
        let request = request("GET", PEEK_TARGET, PEEK_HEADERS);
        let headers = "x-ms-client-request-id:00000000-0000-0000-0000-000000000001\n\
                       x-ms-date:Sun, 22 Nov 2026 00:00:00 GMT\n\
                       x-ms-version:2026-04-06\n";
        let shared_key = string_to_sign(SharedKeyScheme::SharedKey, &request);
        assert_eq!(
            shared_key,
            format!(
                "GET\n\n\n\n\n\n\n\n\n\n\n\n{headers}/devstoreaccount1/devstoreaccount1/myqueue/messages\
                 \nnumofmessages:2\npeekonly:true"
            )
        );
        assert_eq!(
            development_key().sign_base64(shared_key.as_bytes()),
            PEEK_SHARED_KEY
        );

        let lite = string_to_sign(SharedKeyScheme::SharedKeyLite, &request);
        assert_eq!(
            lite,
            format!("GET\n\n\n\n{headers}/devstoreaccount1/devstoreaccount1/myqueue/messages")
        );
        assert_eq!(
            development_key().sign_base64(lite.as_bytes()),
            PEEK_SHARED_KEY_LITE
        );
    }

    #[test]
    fn contract_vector_verifies() {
        let request = request("GET", PEEK_TARGET, PEEK_HEADERS);
        let cases = [
            (
                format!("SharedKey devstoreaccount1:{PEEK_SHARED_KEY}"),
                AuthScheme::SharedKey,
            ),
            (
                format!("SharedKeyLite devstoreaccount1:{PEEK_SHARED_KEY_LITE}"),
                AuthScheme::SharedKeyLite,
            ),
            // Whitespace around the value is not significant.
            (
                format!("  SharedKey  devstoreaccount1:{PEEK_SHARED_KEY} "),
                AuthScheme::SharedKey,
            ),
        ];
        for (authorization, scheme) in cases {
            assert_eq!(
                verify_with(&request, &authorization, false),
                Ok(Principal {
                    scheme,
                    key_index: 0
                }),
                "{authorization}"
            );
        }
    }

    /// Query Tables as azure-data-tables sends it to the emulator (path style), with a `Date`
    /// that `x-ms-date` overrides; signatures computed apart with Python's hmac.
    #[test]
    fn table_layouts() {
        let headers: &[(&str, &str)] = &[
            ("Accept", "application/json;odata=minimalmetadata"),
            ("Content-Type", "application/json"),
            ("Date", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
            ("x-ms-version", "2019-02-02"),
        ];
        let request = request("GET", "/devstoreaccount1/Tables?$top=1", headers);
        let string_to_sign = |scheme| {
            let mut out = Vec::new();
            write_table_string_to_sign(
                scheme,
                "GET",
                request.target(),
                request.headers(),
                "devstoreaccount1",
                &mut out,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        let resource = "/devstoreaccount1/devstoreaccount1/Tables";
        assert_eq!(
            string_to_sign(SharedKeyScheme::SharedKey),
            format!("GET\n\napplication/json\nSun, 22 Nov 2026 00:00:00 GMT\n{resource}")
        );
        assert_eq!(
            string_to_sign(SharedKeyScheme::SharedKeyLite),
            format!("Sun, 22 Nov 2026 00:00:00 GMT\n{resource}")
        );
        let account = development_accounts();
        let account = account.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
        let verify = |authorization: &str| {
            verify_table(&request, authorization.as_bytes(), account, &mut Vec::new())
                .map(|principal| principal.scheme)
        };
        assert_eq!(
            verify("SharedKey devstoreaccount1:Ph2cQisy6UE5OMzAV5rQKy78sihRv2uBDKcbmBGVjtI="),
            Ok(AuthScheme::SharedKey)
        );
        assert_eq!(
            verify("SharedKeyLite devstoreaccount1:3yA6r62YOH1OocUiaWpp4UAaeUG4aePbixnIPul4I/4="),
            Ok(AuthScheme::SharedKeyLite)
        );
        // The queue layout's signature of the same request does not pass.
        assert!(matches!(
            verify(&format!("SharedKey devstoreaccount1:{PEEK_SHARED_KEY}")),
            Err(AuthFailure::SignatureMismatch { .. })
        ));
        assert_eq!(
            verify("SharedKey other:Ph2cQisy6UE5OMzAV5rQKy78sihRv2uBDKcbmBGVjtI="),
            Err(AuthFailure::AccountMismatch)
        );
        // `?comp=` is the only query part the short resource keeps.
        let properties = Request::from_parts(
            "GET",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[("x-ms-date", "d")],
            bytes::Bytes::new(),
        );
        let mut out = Vec::new();
        write_table_string_to_sign(
            SharedKeyScheme::SharedKeyLite,
            "GET",
            properties.target(),
            properties.headers(),
            "devstoreaccount1",
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            b"d\n/devstoreaccount1/devstoreaccount1/?comp=properties"
        );
    }

    #[test]
    fn client_signing_matches_the_vector() {
        let signature = sign_shared_key(
            "GET",
            PEEK_TARGET,
            PEEK_HEADERS,
            0,
            DEVELOPMENT_ACCOUNT_NAME,
            &development_key(),
        )
        .unwrap();
        assert_eq!(signature, PEEK_SHARED_KEY);
    }

    /// What the client signs with a body and Content-Length, the server verifies: the two sides
    /// share the canonicalisation, including a Content-Length the client listed by mistake.
    #[test]
    fn client_signature_round_trips_through_verification() {
        let target = "/devstoreaccount1/myqueue/messages?visibilitytimeout=0&messagettl=60";
        let headers = [
            ("x-ms-version", "2026-10-06"),
            ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
            ("Content-Type", "application/xml"),
            ("content-length", "999"),
        ];
        let signature = sign_shared_key(
            "POST",
            target,
            &headers,
            77,
            DEVELOPMENT_ACCOUNT_NAME,
            &development_key(),
        )
        .unwrap();
        let sent = request(
            "POST",
            target,
            &[
                ("x-ms-version", "2026-10-06"),
                ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
                ("Content-Type", "application/xml"),
                ("Content-Length", "77"),
            ],
        );
        let authorization = format!("SharedKey devstoreaccount1:{signature}");
        assert!(verify_with(&sent, &authorization, false).is_ok());
    }

    #[test]
    fn string_to_sign_rules_table() {
        struct Case {
            name: &'static str,
            method: &'static str,
            target: &'static str,
            headers: &'static [(&'static str, &'static str)],
            expected: &'static str,
        }
        let cases = [
            Case {
                name: "standard headers in order; Date kept without x-ms-date",
                method: "PUT",
                target: "/devstoreaccount1/q",
                headers: &[
                    ("Range", "bytes=0-1"),
                    ("If-Unmodified-Since", "i"),
                    ("If-None-Match", "h"),
                    ("If-Match", "g"),
                    ("If-Modified-Since", "f"),
                    ("Date", "e"),
                    ("Content-Type", "d"),
                    ("Content-MD5", "c"),
                    ("Content-Length", "12"),
                    ("Content-Language", "b"),
                    ("Content-Encoding", "a"),
                    ("Host", "127.0.0.1"),
                ],
                expected: "PUT\na\nb\n12\nc\nd\ne\nf\ng\nh\ni\nbytes=0-1\n/devstoreaccount1/devstoreaccount1/q",
            },
            Case {
                name: "Content-Length 0 and Date with x-ms-date sign empty",
                method: "DELETE",
                target: "/devstoreaccount1/q",
                headers: &[("Content-Length", "0"), ("Date", "x"), ("X-MS-Date", "d")],
                expected: "DELETE\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:d\n/devstoreaccount1/devstoreaccount1/q",
            },
            Case {
                name: "collation order, lowercased names, trimmed values, bare x-ms-meta",
                method: "PUT",
                target: "/devstoreaccount1/q",
                headers: &[
                    ("x-ms-meta-a-b", "5"),
                    ("X-Ms-Meta-AB", "4 "),
                    ("x-ms-meta-a1", "  3"),
                    ("x-ms-meta-a_b", "2"),
                    ("x-ms-meta", "{\"a\": \"1\"}"),
                    ("x-ms-meta-a", "1"),
                ],
                expected: "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-meta:{\"a\": \"1\"}\nx-ms-meta-a:1\n\
                           x-ms-meta-a_b:2\nx-ms-meta-a1:3\nx-ms-meta-ab:4\nx-ms-meta-a-b:5\n\
                           /devstoreaccount1/devstoreaccount1/q",
            },
            Case {
                name: "repeated header joins values in received order",
                method: "GET",
                target: "/devstoreaccount1/q",
                headers: &[("x-ms-b", "2"), ("x-ms-a", "1"), ("X-MS-B", "3")],
                expected: "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-a:1\nx-ms-b:2,3\n/devstoreaccount1/devstoreaccount1/q",
            },
            Case {
                name: "query: lowercased names, decoded and sorted values, repeated names joined",
                method: "GET",
                target: "/devstoreaccount1?comp=list&Prefix=a%20b&include=z&include=metadata&marker=",
                headers: &[],
                expected: "GET\n\n\n\n\n\n\n\n\n\n\n\n/devstoreaccount1/devstoreaccount1\ncomp:list\n\
                           include:metadata,z\nmarker:\nprefix:a b",
            },
            Case {
                name: "path kept exactly as received (Python's trailing slash)",
                method: "GET",
                target: "/devstoreaccount1/?comp=list",
                headers: &[],
                expected: "GET\n\n\n\n\n\n\n\n\n\n\n\n/devstoreaccount1/devstoreaccount1/\ncomp:list",
            },
            Case {
                name: "percent-encoded path stays encoded",
                method: "GET",
                target: "/devstoreaccount1/my%71ueue",
                headers: &[],
                expected: "GET\n\n\n\n\n\n\n\n\n\n\n\n/devstoreaccount1/devstoreaccount1/my%71ueue",
            },
        ];
        for case in cases {
            let request = request(case.method, case.target, case.headers);
            assert_eq!(
                string_to_sign(SharedKeyScheme::SharedKey, &request),
                case.expected,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn lite_resource_keeps_only_comp() {
        let request = request(
            "GET",
            "/devstoreaccount1/q?timeout=30&comp=metadata",
            &[
                ("Content-Type", "text/plain"),
                ("Content-Length", "5"),
                ("x-ms-date", "d"),
            ],
        );
        assert_eq!(
            string_to_sign(SharedKeyScheme::SharedKeyLite, &request),
            "GET\n\ntext/plain\n\nx-ms-date:d\n/devstoreaccount1/devstoreaccount1/q?comp=metadata"
        );
    }

    #[test]
    fn malformed_query_fails() {
        let request = request("GET", "/devstoreaccount1/q?comp=%zz", &[]);
        for scheme in [SharedKeyScheme::SharedKey, SharedKeyScheme::SharedKeyLite] {
            let outcome = write_string_to_sign(
                scheme,
                "GET",
                request.target(),
                request.headers(),
                DEVELOPMENT_ACCOUNT_NAME,
                &mut Vec::new(),
            );
            assert_eq!(outcome, Err(AuthFailure::MalformedQuery));
        }
    }

    #[test]
    fn authorization_failures_table() {
        let request = request("GET", PEEK_TARGET, PEEK_HEADERS);
        let wrong_signature =
            "SharedKey devstoreaccount1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        let malformed = AuthFailure::MalformedAuthorization;
        let no_space = malformed("no space after the scheme");
        let no_colon = malformed("no `:` between account and signature");
        let bad_signature = malformed("signature is not base64 of 32 bytes");
        let other_account = format!("SharedKey otheraccount:{PEEK_SHARED_KEY}");
        let secondary_name = format!("SharedKey devstoreaccount1-secondary:{PEEK_SHARED_KEY}");
        #[rustfmt::skip]
        let cases: &[(&str, AuthFailure)] = &[
            ("", no_space.clone()),
            ("SharedKey", no_space),
            ("SharedKey devstoreaccount1", no_colon),
            ("SharedKey devstoreaccount1:not-base64!", bad_signature.clone()),
            ("SharedKey devstoreaccount1:YWJj", bad_signature),
            ("sharedkey devstoreaccount1:x", AuthFailure::UnsupportedScheme),
            ("Bearer token", AuthFailure::UnsupportedScheme),
            (&other_account, AuthFailure::AccountMismatch),
            // The secondary's name signs only requests to the secondary endpoint.
            (&secondary_name, AuthFailure::AccountMismatch),
        ];
        for (authorization, expected) in cases {
            assert_eq!(
                verify_with(&request, authorization, false).as_ref(),
                Err(expected),
                "{authorization}"
            );
        }
        match verify_with(&request, wrong_signature, false) {
            Err(AuthFailure::SignatureMismatch { string_to_sign, .. }) => {
                assert!(string_to_sign.starts_with("GET\n"));
                assert!(string_to_sign.ends_with("\npeekonly:true"));
            }
            other => panic!("expected a signature mismatch, got {other:?}"),
        }
    }

    /// Any change to a signed part of the request breaks the signature.
    #[test]
    fn tampering_breaks_the_signature() {
        let authorization = format!("SharedKey devstoreaccount1:{PEEK_SHARED_KEY}");
        let mut other_date = PEEK_HEADERS.to_vec();
        other_date[1] = ("x-ms-date", "Sun, 22 Nov 2026 00:00:01 GMT");
        let mut extra_header = PEEK_HEADERS.to_vec();
        extra_header.push(("x-ms-meta-extra", "1"));
        let tampered = [
            request(
                "GET",
                "/devstoreaccount1/myqueue/messages?numofmessages=3&peekonly=true",
                PEEK_HEADERS,
            ),
            request(
                "GET",
                "/devstoreaccount1/myqueue/messages?numofmessages=2",
                PEEK_HEADERS,
            ),
            request(
                "GET",
                "/devstoreaccount1/otherqueue/messages?numofmessages=2&peekonly=true",
                PEEK_HEADERS,
            ),
            request("DELETE", PEEK_TARGET, PEEK_HEADERS),
            request("GET", PEEK_TARGET, &other_date),
            request("GET", PEEK_TARGET, &extra_header),
        ];
        for request in &tampered {
            assert!(
                matches!(
                    verify_with(request, &authorization, false),
                    Err(AuthFailure::SignatureMismatch { .. })
                ),
                "{:?}",
                String::from_utf8_lossy(&request.head)
            );
        }
    }

    /// A request to the secondary endpoint is signed with the primary account's name, which the
    /// canonicalised resource also uses; the path keeps the `-secondary` spelling.
    #[test]
    fn secondary_endpoint_signs_with_primary_name() {
        let target = "/devstoreaccount1-secondary/?restype=service&comp=stats";
        let headers = [
            ("x-ms-version", "2026-10-06"),
            ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
        ];
        let signature = sign_shared_key(
            "GET",
            target,
            &headers,
            0,
            DEVELOPMENT_ACCOUNT_NAME,
            &development_key(),
        )
        .unwrap();
        let request = request("GET", target, &headers);
        let authorization = format!("SharedKey devstoreaccount1:{signature}");
        assert!(verify_with(&request, &authorization, true).is_ok());
        // The secondary's own name is accepted only on the secondary endpoint.
        let secondary_signature = sign_shared_key(
            "GET",
            target,
            &headers,
            0,
            "devstoreaccount1-secondary",
            &development_key(),
        )
        .unwrap();
        let secondary_authorization =
            format!("SharedKey devstoreaccount1-secondary:{secondary_signature}");
        assert!(verify_with(&request, &secondary_authorization, true).is_ok());
        assert_eq!(
            verify_with(&request, &secondary_authorization, false),
            Err(AuthFailure::AccountMismatch)
        );
        let tertiary = authorization.replace("devstoreaccount1:", "devstoreaccount1-tertiary:");
        assert_eq!(
            verify_with(&request, &tertiary, true),
            Err(AuthFailure::AccountMismatch)
        );
    }

    /// azure-storage-queue 2.x signs a request to the emulator's secondary as if it went to the
    /// primary: `-secondary` is missing from the signed path. Accepted on the secondary
    /// endpoint only, and only for that path.
    #[test]
    fn secondary_endpoint_signed_as_the_primary_path() {
        let headers = [
            ("x-ms-version", "2018-03-28"),
            ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
        ];
        let sign = |signed_target: &str| {
            let signature = sign_shared_key(
                "GET",
                signed_target,
                &headers,
                0,
                DEVELOPMENT_ACCOUNT_NAME,
                &development_key(),
            )
            .unwrap();
            format!("SharedKey devstoreaccount1:{signature}")
        };
        let sent = "/devstoreaccount1-secondary/?restype=service&comp=stats";
        let request = request("GET", sent, &headers);
        let signed_as_primary = sign("/devstoreaccount1/?restype=service&comp=stats");
        assert!(verify_with(&request, &signed_as_primary, true).is_ok());
        // Another path is still a mismatch, reported with the string the request's own path
        // makes.
        let other = sign("/devstoreaccount1/?restype=service&comp=properties");
        match verify_with(&request, &other, true) {
            Err(AuthFailure::SignatureMismatch { string_to_sign, .. }) => assert!(
                string_to_sign.ends_with(
                    "/devstoreaccount1/devstoreaccount1-secondary/\ncomp:stats\nrestype:service"
                ),
                "{string_to_sign:?}"
            ),
            outcome => panic!("{outcome:?}"),
        }
        // A primary request signed for the secondary path does not pass the other way round.
        let primary = request_primary(&headers);
        let signed_as_secondary = sign(sent);
        assert!(matches!(
            verify_with(&primary, &signed_as_secondary, false),
            Err(AuthFailure::SignatureMismatch { .. })
        ));
    }

    fn request_primary(headers: &[(&str, &str)]) -> Request {
        request(
            "GET",
            "/devstoreaccount1/?restype=service&comp=stats",
            headers,
        )
    }

    #[test]
    fn second_key_is_accepted() {
        let second_key = "a2V5LW51bWJlci10d28=";
        let accounts = crate::auth::Accounts::from_env_value(&format!(
            "devstoreaccount1:{DEVELOPMENT_ACCOUNT_KEY}:{second_key}"
        ))
        .unwrap();
        let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
        let signature = sign_shared_key(
            "GET",
            PEEK_TARGET,
            PEEK_HEADERS,
            0,
            DEVELOPMENT_ACCOUNT_NAME,
            &account.keys()[1],
        )
        .unwrap();
        let request = request("GET", PEEK_TARGET, PEEK_HEADERS);
        let authorization = format!("SharedKey devstoreaccount1:{signature}");
        let principal = verify(
            &request,
            authorization.as_bytes(),
            false,
            account,
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(principal.key_index, 1);
    }

    /// Azure's Date rule: `x-ms-date`, else `Date`, within 15 minutes either way of now.
    #[test]
    fn request_date_rule_table() {
        const NOW_MS: u64 = 1_795_305_600_000; // Sun, 22 Nov 2026 00:00:00 GMT
        let minutes = |count: u64| count * 60_000;
        let at = |unix_ms: u64| String::from_utf8(crate::time::rfc1123(unix_ms).to_vec()).unwrap();
        type Headers = Vec<(&'static str, String)>;
        let cases: Vec<(Headers, Result<(), AuthFailure>)> = vec![
            (vec![("x-ms-date", at(NOW_MS))], Ok(())),
            (vec![("x-ms-date", at(NOW_MS - minutes(15)))], Ok(())),
            (vec![("x-ms-date", at(NOW_MS + minutes(15)))], Ok(())),
            (vec![("Date", at(NOW_MS - minutes(1)))], Ok(())),
            (
                vec![("x-ms-date", at(NOW_MS - minutes(16)))],
                Err(AuthFailure::RequestDateTooOld),
            ),
            (
                vec![("x-ms-date", at(NOW_MS + minutes(16)))],
                Err(AuthFailure::RequestDateInFuture),
            ),
            // x-ms-date wins over Date, as it does in the string-to-sign.
            (
                vec![
                    ("Date", at(NOW_MS)),
                    ("x-ms-date", at(NOW_MS - minutes(60))),
                ],
                Err(AuthFailure::RequestDateTooOld),
            ),
            (vec![], Err(AuthFailure::RequestDateMissing)),
            (
                vec![("x-ms-date", "whenever".to_string())],
                Err(AuthFailure::RequestDateInvalid),
            ),
            (
                vec![("x-ms-date", String::new())],
                Err(AuthFailure::RequestDateInvalid),
            ),
        ];
        for (headers, expected) in cases {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(name, value)| (*name, value.as_str()))
                .collect();
            let request = request("GET", "/devstoreaccount1?comp=list", &headers);
            assert_eq!(
                check_request_date(&request, NOW_MS),
                expected,
                "{headers:?}"
            );
        }
    }
}
