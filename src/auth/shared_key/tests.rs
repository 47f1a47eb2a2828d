//! Tests of the SharedKey and SharedKeyLite schemes: strings to sign, signatures, the Date rule.

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
        &Query::parse(request.query()).expect("a well-formed query"),
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
    let wrong_signature = "SharedKey devstoreaccount1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
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
        &Query::parse(request.query()).expect("a well-formed query"),
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

/// `verify` signs with the query planning decoded, not the target's raw query: a request whose
/// query has escapes (a pop receipt's `+`, `/` and `=`) and repeated, unsorted parameters
/// verifies under the signature a client computes from the raw target, for both schemes.
#[test]
fn verify_signs_the_decoded_query_as_the_raw_target_would() {
    let target = "/devstoreaccount1/myqueue/messages/0a1b?popreceipt=AbC%2Bd%2Fe%3D\
                  &visibilitytimeout=30&Comp=x&comp=a%20b";
    let request = request("DELETE", target, PEEK_HEADERS);
    for scheme in [SharedKeyScheme::SharedKey, SharedKeyScheme::SharedKeyLite] {
        let signature = development_key().sign_base64(string_to_sign(scheme, &request).as_bytes());
        let name = match scheme {
            SharedKeyScheme::SharedKey => "SharedKey",
            SharedKeyScheme::SharedKeyLite => "SharedKeyLite",
        };
        let authorization = format!("{name} devstoreaccount1:{signature}");
        assert!(
            verify_with(&request, &authorization, false).is_ok(),
            "{name}"
        );
    }
    let wrong = development_key().sign_base64(b"another string");
    let authorization = format!("SharedKey devstoreaccount1:{wrong}");
    assert!(verify_with(&request, &authorization, false).is_err());
}

/// `split_at_byte` cuts where `str::split_once` does (the naive oracle), and
/// `parse_authorization` keeps its answers on headers that stress the separators.
#[test]
fn separators_are_found_as_split_once_finds_them() {
    for text in [
        "", " ", "a b", "a  b", " a", "a ", "é b", "a:b:c", "::", "é:ü", "x",
    ] {
        for separator in [b' ', b':'] {
            assert_eq!(
                split_at_byte(text, separator),
                text.split_once(char::from(separator)),
                "{text:?} {separator}"
            );
        }
    }
    let signature = "qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0=";
    fn parsed(value: &str) -> Result<Authorization<'_>, AuthFailure> {
        parse_authorization(value.as_bytes())
    }
    let header = format!("  SharedKey  acct:{signature} ");
    let valid = parsed(&header).expect("valid");
    assert_eq!(valid.scheme, SharedKeyScheme::SharedKey);
    assert_eq!(valid.account_name, "acct");
    let header = format!("SharedKeyLite acct:{signature}");
    let lite = parsed(&header).expect("valid");
    assert_eq!(lite.scheme, SharedKeyScheme::SharedKeyLite);
    assert_eq!(
        parsed(&format!("SharedKey\u{3000}acct:{signature}")),
        Err(AuthFailure::MalformedAuthorization(
            "no space after the scheme"
        ))
    );
    assert_eq!(
        parsed(&format!("SharedKey acct{signature}")),
        Err(AuthFailure::MalformedAuthorization(
            "no `:` between account and signature"
        ))
    );
    assert_eq!(
        parsed(&format!("Sharedkey acct:{signature}")),
        Err(AuthFailure::UnsupportedScheme)
    );
    assert_eq!(
        parse_authorization(b"SharedKey \xff:x"),
        Err(AuthFailure::MalformedAuthorization("not UTF-8"))
    );
    // The account may hold a multi-byte character: the cut stays at the colon.
    assert_eq!(
        parsed(&format!("SharedKey é:{signature}")).map(|parsed| parsed.account_name),
        Ok("é")
    );
}
