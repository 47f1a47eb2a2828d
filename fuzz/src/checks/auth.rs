//! `auth`: SharedKey/SharedKeyLite canonicalisation and verification, SAS parsing and
//! verification, and the header collation, on requests built from fuzzer bytes.
//!
//! Properties: no panic on any request, `Authorization` value or query; `compare_header_names`
//! is a total order on the sampled names (reflexive, antisymmetric, transitive) whose `Equal`
//! means "the same name ignoring ASCII case" for names made of header-name bytes; a request
//! signed with `sign_shared_key` (or a SharedKeyLite string-to-sign) verifies, and a SAS signed
//! over its own string-to-sign (with the account key, or a user delegation SAS with the key its
//! `sk…` fields name) never fails on its signature; asking twice gives the same answer (the SAS
//! cache must not change an outcome).
//!
//! Input: a method byte, a flags byte, an access byte, eight bytes of clock, then NUL-separated
//! fields: target, headers (`name:value` lines), an `Authorization` value, three header names
//! for the collation, SAS lines (`name=value`, values percent-encoded here) and the body.

use std::cmp::Ordering;
use std::net::IpAddr;

use azq::auth::collation::compare_header_names;
use azq::auth::shared_key::{parse_authorization, write_string_to_sign, SharedKeyScheme};
use azq::auth::{
    delegation, sas, sign_shared_key, Access, Accounts, AuthFailure, AuthScheme, Authenticator,
    PermissionSet, Principal, RequestContext, SigningKey, StoredPolicy,
};
use azq::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use azq::http::{Method, Query, Request};

use super::input::Input;
use super::request::percent_encode;

const METHODS: &[&[u8]] = &[
    b"GET", b"HEAD", b"PUT", b"POST", b"DELETE", b"OPTIONS", b"PATCH",
];
const ACCESSES: &[Access] = &[
    Access::GET_SERVICE_PROPERTIES,
    Access::SET_SERVICE_PROPERTIES,
    Access::GET_SERVICE_STATS,
    Access::LIST_QUEUES,
    Access::CREATE_QUEUE,
    Access::DELETE_QUEUE,
    Access::GET_QUEUE_METADATA,
    Access::SET_QUEUE_METADATA,
    Access::GET_QUEUE_ACL,
    Access::SET_QUEUE_ACL,
    Access::CLEAR_MESSAGES,
    Access::PUT_MESSAGE,
    Access::GET_MESSAGES,
    Access::PEEK_MESSAGES,
    Access::UPDATE_MESSAGE,
    Access::DELETE_MESSAGE,
];
/// URL account names: the account, its secondary endpoint, and an unknown one.
const URL_ACCOUNTS: &[(&str, bool)] = &[
    (DEVELOPMENT_ACCOUNT_NAME, false),
    (DEVELOPMENT_ACCOUNT_NAME, true),
    (DEVELOPMENT_ACCOUNT_NAME, false),
    ("otheraccount", false),
];
/// A well-formed signature (base64 of 32 bytes) standing in for `sig` until the real one is
/// known: the string-to-sign of a SAS does not include its signature.
const PLACEHOLDER_SIGNATURE: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

/// Everything about the request that is not its bytes.
struct Setting<'a> {
    context: RequestContext<'a>,
    access: Access,
    policy: Option<StoredPolicy>,
}

/// The `auth` property on one input (see the module doc); panics when it breaks.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let method_token = input.pick(METHODS);
    let flags = input.u8();
    let access = input.pick(ACCESSES);
    let now_ms = input.u64();
    let target = input.field(0);
    let header_lines = input.field(0);
    let authorization = input.field(0);
    let names = [input.field(0), input.field(0), input.field(0)];
    let sas_lines = input.field(0);
    let body = input.rest();

    let policy = (flags & 0x10 != 0).then(|| StoredPolicy {
        start_ms: (flags & 0x20 != 0).then_some(now_ms / 2),
        expiry_ms: (flags & 0x40 != 0).then_some(now_ms.saturating_add(1)),
        permissions: PermissionSet::parse("raup"),
    });
    let setting = Setting {
        context: RequestContext {
            account_name: URL_ACCOUNTS[usize::from(flags & 3)].0,
            secondary: URL_ACCOUNTS[usize::from(flags & 3)].1,
            queue_name: (flags & 4 != 0).then_some("myqueue"),
            now_ms,
            client_ip: IpAddr::from([127, 0, 0, 1]),
            secure_transport: flags & 8 != 0,
        },
        access,
        policy,
    };
    let lite = flags & 0x80 != 0;

    let headers: Vec<(&[u8], &[u8])> = header_lines
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| match line.iter().position(|&byte| byte == b':') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &b""[..]),
        })
        .collect();

    check_arbitrary(
        method_token,
        target,
        &headers,
        authorization,
        body,
        &setting,
    );
    check_collation(names);
    check_shared_key_round_trip(method_token, target, &headers, body, lite, &setting);
    check_sas_round_trip(method_token, target, sas_lines, &setting);
}

fn authenticator() -> Authenticator {
    let accounts = Accounts::new(&[(
        DEVELOPMENT_ACCOUNT_NAME.to_string(),
        vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
    )])
    .expect("the development account is valid");
    let mut authenticator = Authenticator::new(accounts);
    // The inputs' dates are arbitrary bytes: this check is about signatures, and the date rule
    // has its own tests (auth::tests, tests/security.rs).
    authenticator.skip_request_date_check();
    authenticator
}

/// Authenticates `request` twice with one authenticator (the second time through a warm SAS
/// cache) and insists on one answer. A query that does not decode never reaches
/// authentication (planning refuses it first): `MalformedQuery`.
fn authenticate_twice(request: &Request, setting: &Setting<'_>) -> Result<Principal, AuthFailure> {
    let query = Query::parse(request.query()).ok_or(AuthFailure::MalformedQuery)?;
    let mut authenticator = authenticator();
    let policy = setting.policy;
    let stored_policy = move |_identifier: &str| policy;
    let (context, access) = (&setting.context, setting.access);
    let first = authenticator.authenticate(request, &query, context, access, &stored_policy);
    let second = authenticator.authenticate(request, &query, context, access, &stored_policy);
    assert_eq!(
        first, second,
        "a second identical request got another answer"
    );
    first
}

/// Whatever the bytes, parsing and verifying never panic.
fn check_arbitrary(
    method_token: &[u8],
    target: &[u8],
    headers: &[(&[u8], &[u8])],
    authorization: &[u8],
    body: &[u8],
    setting: &Setting<'_>,
) {
    let _ = parse_authorization(authorization);
    let mut all_headers = headers.to_vec();
    if !authorization.is_empty() {
        all_headers.insert(0, (b"Authorization", authorization));
    }
    let Some(request) = Request::build(method_token, target, &all_headers, body) else {
        return;
    };
    let _ = authenticate_twice(&request, setting);
    for scheme in [SharedKeyScheme::SharedKey, SharedKeyScheme::SharedKeyLite] {
        let mut out = Vec::new();
        let _ = write_string_to_sign(
            scheme,
            request.method.as_str(),
            request.target(),
            request.headers(),
            DEVELOPMENT_ACCOUNT_NAME,
            &mut out,
        );
    }
    let query = Query::parse(request.query());
    if let Some(query) = &query {
        if let Ok(Some(token)) = sas::parse(query) {
            let mut out = Vec::new();
            let _ = sas::write_string_to_sign(
                &token,
                DEVELOPMENT_ACCOUNT_NAME,
                setting.context.queue_name,
                &mut out,
            );
        }
    }
}

/// `compare_header_names` on three names: a total order, whose ties are exactly the names
/// equal ignoring ASCII case when the names are made of token bytes (RFC 9110 `tchar`), the
/// only bytes a header name may hold. Anything less and the canonicalised headers of one
/// request would depend on the order they were sent in.
fn check_collation(names: [&[u8]; 3]) {
    let is_token = |name: &[u8]| {
        name.iter()
            .all(|&byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte))
    };
    for left in names {
        assert_eq!(compare_header_names(left, left), Ordering::Equal);
        for right in names {
            let forward = compare_header_names(left, right);
            let backward = compare_header_names(right, left);
            assert_eq!(
                forward,
                backward.reverse(),
                "antisymmetry: {left:?} vs {right:?}"
            );
            if is_token(left) && is_token(right) {
                assert_eq!(
                    forward == Ordering::Equal,
                    left.eq_ignore_ascii_case(right),
                    "tie vs case-insensitive equality: {left:?} vs {right:?}"
                );
            }
            for third in names {
                let second_step = compare_header_names(right, third);
                let through = compare_header_names(left, third);
                if forward != Ordering::Greater && second_step != Ordering::Greater {
                    assert_ne!(
                        through,
                        Ordering::Greater,
                        "transitivity: {left:?} <= {right:?} <= {third:?}"
                    );
                }
                if forward == Ordering::Equal && second_step == Ordering::Equal {
                    assert_eq!(
                        through,
                        Ordering::Equal,
                        "transitive ties: {left:?} {right:?} {third:?}"
                    );
                }
            }
        }
    }
}

/// A request signed as a client signs it must verify, with the scheme it was signed with.
fn check_shared_key_round_trip(
    method_token: &[u8],
    target: &[u8],
    headers: &[(&[u8], &[u8])],
    body: &[u8],
    lite: bool,
    setting: &Setting<'_>,
) {
    if setting.context.account_name == "otheraccount" {
        return;
    }
    let Ok(target_text) = std::str::from_utf8(target) else {
        return;
    };
    let Some(text_headers) = headers
        .iter()
        .filter(|(name, _)| {
            !name.eq_ignore_ascii_case(b"content-length")
                && !name.eq_ignore_ascii_case(b"authorization")
        })
        .map(|(name, value)| {
            Some((
                std::str::from_utf8(name).ok()?,
                std::str::from_utf8(value).ok()?,
            ))
        })
        .collect::<Option<Vec<(&str, &str)>>>()
    else {
        return;
    };
    let key =
        SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).expect("the development key is valid");
    // The verifier signs the method as it understands it: an unknown method is `OTHER`.
    let method = Method::from_token(method_token).as_str();
    let content_length = body.len().to_string();
    let signature = if lite {
        let mut signed_headers: Vec<(&[u8], &[u8])> = text_headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
            .collect();
        if !body.is_empty() {
            signed_headers.push((b"Content-Length", content_length.as_bytes()));
        }
        let mut string_to_sign = Vec::new();
        write_string_to_sign(
            SharedKeyScheme::SharedKeyLite,
            method,
            target,
            signed_headers.into_iter(),
            DEVELOPMENT_ACCOUNT_NAME,
            &mut string_to_sign,
        )
        .map(|()| key.sign_base64(&string_to_sign))
    } else {
        sign_shared_key(
            method,
            target_text,
            &text_headers,
            body.len() as u64,
            DEVELOPMENT_ACCOUNT_NAME,
            &key,
        )
    };
    let scheme_name = if lite { "SharedKeyLite" } else { "SharedKey" };
    let authorization = match &signature {
        Ok(signature) => format!("{scheme_name} {DEVELOPMENT_ACCOUNT_NAME}:{signature}"),
        Err(_) => format!("{scheme_name} {DEVELOPMENT_ACCOUNT_NAME}:{PLACEHOLDER_SIGNATURE}"),
    };
    let mut request_headers: Vec<(&[u8], &[u8])> =
        vec![(b"Authorization", authorization.as_bytes())];
    request_headers.extend(
        text_headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes())),
    );
    if !body.is_empty() {
        request_headers.push((b"Content-Length", content_length.as_bytes()));
    }
    let Some(request) = Request::build(method_token, target, &request_headers, body) else {
        return;
    };
    let outcome = authenticate_twice(&request, setting);
    match signature {
        Ok(_) => {
            let expected = if lite {
                AuthScheme::SharedKeyLite
            } else {
                AuthScheme::SharedKey
            };
            assert_eq!(
                outcome.map(|principal| principal.scheme),
                Ok(expected),
                "a signed request failed to verify"
            );
        }
        Err(failure) => {
            assert_eq!(failure, AuthFailure::MalformedQuery);
            assert_eq!(outcome, Err(AuthFailure::MalformedQuery));
        }
    }
}

/// A SAS whose `sig` is the HMAC of its own string-to-sign may fail its terms (time window,
/// permissions…) but never its signature.
fn check_sas_round_trip(
    method_token: &[u8],
    target: &[u8],
    sas_lines: &[u8],
    setting: &Setting<'_>,
) {
    if setting.context.account_name == "otheraccount" {
        return;
    }
    let path = match target.iter().position(|&byte| byte == b'?') {
        Some(at) => &target[..at],
        None => target,
    };
    let mut query = String::new();
    for line in sas_lines
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
    {
        let (name, value) = match line.iter().position(|&byte| byte == b'=') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &b""[..]),
        };
        if !query.is_empty() {
            query.push('&');
        }
        percent_encode(name, &mut query);
        query.push('=');
        percent_encode(value, &mut query);
    }
    let with_signature = |signature: &str| {
        let mut full = query.clone();
        if !full.is_empty() {
            full.push('&');
        }
        full.push_str("sig=");
        percent_encode(signature.as_bytes(), &mut full);
        full
    };
    let placeholder_query = with_signature(PLACEHOLDER_SIGNATURE);
    let Some(placeholder) = Query::parse(placeholder_query.as_bytes()) else {
        return;
    };
    let Ok(Some(token)) = sas::parse(&placeholder) else {
        return;
    };
    let mut string_to_sign = Vec::new();
    if sas::write_string_to_sign(
        &token,
        DEVELOPMENT_ACCOUNT_NAME,
        setting.context.queue_name,
        &mut string_to_sign,
    )
    .is_err()
    {
        return;
    }
    let key =
        SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).expect("the development key is valid");
    // A user delegation SAS is signed with the key its `sk…` fields name, as a client signs it.
    let signature = match token.delegation_key() {
        Some(fields) => delegation::client_signature_base64(&key, &fields, &string_to_sign),
        None => key.sign_base64(&string_to_sign),
    };
    let signed_query = with_signature(&signature);
    let mut signed_target = path.to_vec();
    signed_target.push(b'?');
    signed_target.extend_from_slice(signed_query.as_bytes());
    let Some(request) = Request::build(method_token, &signed_target, &[], &[]) else {
        return;
    };
    let outcome = authenticate_twice(&request, setting);
    assert!(
        !matches!(outcome, Err(AuthFailure::SignatureMismatch { .. })),
        "a SAS signed over its own string-to-sign failed: {outcome:?}"
    );
}
