//! Micro-benchmarks of request authentication, the per-request cost every operation pays:
//! SharedKey verification of a typical Put Message, and an account SAS whose signature the
//! cache already holds.

use std::hint::black_box;
use std::net::IpAddr;

use azq::auth::{sign_shared_key, Access, Accounts, Authenticator, RequestContext, StoredPolicy};
use azq::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use azq::http::request::Request;
use azq::http::Query;
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};

/// 2026-11-22T01:00:00Z: inside the SAS window below.
const NOW_MS: u64 = 1_795_309_200_000;

/// The headers the Python SDK sends with Put Message (values from its wire traffic).
const PUT_MESSAGE_HEADERS: &[(&str, &str)] = &[
    ("Host", "127.0.0.1:10001"),
    (
        "User-Agent",
        "azsdk-python-storage-queue/12.18.1 Python/3.12.3 (Linux-6.8.0-x86_64-with-glibc2.39)",
    ),
    ("Accept-Encoding", "gzip, deflate"),
    ("Accept", "application/xml"),
    ("Connection", "keep-alive"),
    ("Content-Type", "application/xml; charset=utf-8"),
    ("x-ms-version", "2026-10-06"),
    ("x-ms-date", "Sun, 22 Nov 2026 01:00:00 GMT"),
    (
        "x-ms-client-request-id",
        "6f1a1f4e-8a4f-11ef-9c1e-0242ac120002",
    ),
];
const PUT_MESSAGE_TARGET: &str = "/devstoreaccount1/myqueue/messages";
const PUT_MESSAGE_BODY_BYTES: u64 = 154;

fn no_policy(_identifier: &str) -> Option<StoredPolicy> {
    None
}

fn authentication(criterion: &mut Criterion) {
    let accounts = Accounts::new(&[(
        DEVELOPMENT_ACCOUNT_NAME.to_string(),
        vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
    )])
    .expect("the development account is valid");
    let key = &accounts
        .get(DEVELOPMENT_ACCOUNT_NAME)
        .expect("the development account exists")
        .keys()[0];
    let mut authenticator = Authenticator::new(accounts.clone());
    let context = RequestContext {
        account_name: DEVELOPMENT_ACCOUNT_NAME,
        secondary: false,
        queue_name: Some("myqueue"),
        now_ms: NOW_MS,
        client_ip: IpAddr::from([127, 0, 0, 1]),
        secure_transport: false,
    };

    let signature = sign_shared_key(
        "POST",
        PUT_MESSAGE_TARGET,
        PUT_MESSAGE_HEADERS,
        PUT_MESSAGE_BODY_BYTES,
        DEVELOPMENT_ACCOUNT_NAME,
        key,
    )
    .expect("the target's query is well formed");
    let authorization = format!("SharedKey {DEVELOPMENT_ACCOUNT_NAME}:{signature}");
    let content_length = PUT_MESSAGE_BODY_BYTES.to_string();
    let mut headers = PUT_MESSAGE_HEADERS.to_vec();
    headers.push(("Content-Length", &content_length));
    headers.push(("Authorization", &authorization));
    let put_message = Request::from_parts("POST", PUT_MESSAGE_TARGET, &headers, Bytes::new());
    // Each iteration decodes the query too, as every request's planning does.
    let mut authenticate = |request: &Request| {
        let query = Query::parse(request.query()).expect("a well-formed query");
        authenticator
            .authenticate(request, &query, &context, Access::PUT_MESSAGE, &no_policy)
            .is_ok()
    };
    assert!(authenticate(&put_message));
    criterion.bench_function("shared_key_put_message", |bencher| {
        bencher.iter(|| authenticate(black_box(&put_message)))
    });

    // The contract's account SAS vector: after the first request its signature is cached.
    let sas_target = "/devstoreaccount1/myqueue/messages?sv=2026-10-06&ss=q&srt=sco&sp=rwdlacup\
        &st=2026-11-22T00%3A00%3A00Z&se=2026-11-23T00%3A00%3A00Z\
        &sig=fwZjH/QMIpHkgAn4hsXNvttEDtucDoClV/pmmnt6anw%3D";
    let sas_put_message =
        Request::from_parts("POST", sas_target, &PUT_MESSAGE_HEADERS[..7], Bytes::new());
    assert!(authenticate(&sas_put_message));
    criterion.bench_function("account_sas_put_message_cached", |bencher| {
        bencher.iter(|| authenticate(black_box(&sas_put_message)))
    });
}

criterion_group!(benches, authentication);
criterion_main!(benches);
