//! `router`: arbitrary method, host, path and query through `Query::parse` and `router::route`,
//! then the same parts (plus headers and a body), written out and read back by the HTTP parser,
//! as a whole request through `api::Service::plan`,
//! signed with SharedKey when they are text so that planning gets past authentication, and the
//! planned command through a `ShardState` and `Service::respond`.
//!
//! Properties: no panic anywhere on that path; a route names a known account, non-empty queue
//! and message segments, `Preflight` exactly for OPTIONS, host style only when enabled and a
//! host was sent; one trailing slash addresses the same route; `Query::get` is the first pair
//! whose name matches ignoring case; a request signed as a client signs it never fails its
//! signature; and every command `plan` builds meets the preconditions
//! `ShardState::apply` documents (so a request can never trip a shard's assertion).
//!
//! Input: a method byte, a flags byte, then NUL-separated fields: host, path, query, headers
//! (`name:value` lines separated by LF) and the body.

use std::net::IpAddr;
use std::sync::Arc;

use azq::api::router::route;
use azq::api::validate;
use azq::api::{AdminAnswer, Health, Outcome, Service, Step};
use azq::auth::{sign_shared_key, Accounts, AuthFailure, SigningKey};
use azq::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use azq::http::{Method, Query};
use azq::lifecycle::Lifecycle;
use azq::limits::{
    LIST_QUEUES_RESULTS_MAX, MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX, VISIBILITY_TIMEOUT_S_MAX,
};
use azq::operation::Operation;
use azq::queue::{shard_for, Command, Reply, ShardState};
use bytes::BytesMut;

use super::input::Input;
use super::request;

/// 2026-11-22T00:00:00Z: a fixed "now" keeps every run of an input identical.
const NOW_MS: u64 = 1_795_305_600_000;
const METHODS: &[&[u8]] = &[
    b"GET", b"HEAD", b"PUT", b"POST", b"DELETE", b"OPTIONS", b"PATCH",
];
/// Header names the request builder sets itself; fuzzer copies would only make the request
/// inconsistent with what the HTTP parser produces (Content-Length must match the body).
const RESERVED_HEADERS: &[&str] = &["authorization", "content-length", "transfer-encoding"];

/// The `router` property on one input (see the module doc); panics when it breaks.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let method_token = input.pick(METHODS);
    let method = Method::from_token(method_token);
    let flags = input.u8();
    let host_sent = flags & 1 != 0;
    let host_style_enabled = flags & 2 != 0;
    let signed = flags & 4 == 0;
    let shards = 1 + usize::from(flags >> 3 & 3);
    let host = input.field(0);
    let path = input.field(0);
    let raw_query = input.field(0);
    let header_lines = input.field(0);
    let body = input.rest();

    let host = host_sent.then(|| std::str::from_utf8(host).ok()).flatten();
    check_route(method, host, path, raw_query, host_style_enabled);

    let mut headers: Vec<(&[u8], &[u8])> = header_lines
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| match line.iter().position(|&byte| byte == b':') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &b""[..]),
        })
        .filter(|(name, _)| {
            !RESERVED_HEADERS
                .iter()
                .any(|reserved| name.eq_ignore_ascii_case(reserved.as_bytes()))
        })
        .collect();
    if let Some(host) = host {
        headers.push((b"Host", host.as_bytes()));
    }
    let mut target = path.to_vec();
    if !raw_query.is_empty() {
        target.push(b'?');
        target.extend_from_slice(raw_query);
    }
    check_plan(
        method_token,
        &target,
        headers,
        body,
        signed,
        shards,
        host_style_enabled,
    );
}

/// `Query::parse` and `route` on the raw parts.
fn check_route(
    method: Method,
    host: Option<&str>,
    path: &[u8],
    raw_query: &[u8],
    host_style_enabled: bool,
) {
    let Some(query) = Query::parse(raw_query) else {
        return;
    };
    for name in ["comp", "COMP", "restype", "peekonly", "popreceipt", ""] {
        let first = query
            .pairs()
            .find(|(pair_name, _)| pair_name.eq_ignore_ascii_case(name))
            .map(|(_, value)| value);
        assert_eq!(query.get(name), first, "Query::get({name:?})");
    }
    let is_account = |name: &str| name == DEVELOPMENT_ACCOUNT_NAME;
    let routed = route(method, host, path, &query, is_account, host_style_enabled);
    if let Ok(found) = &routed {
        assert!(is_account(found.account), "{found:?}");
        assert!(
            found.queue.is_none_or(|queue| !queue.is_empty()),
            "{found:?}"
        );
        assert!(
            found.message_id.is_none_or(|id| !id.is_empty()),
            "{found:?}"
        );
        assert!(
            found.message_id.is_none() || found.queue.is_some(),
            "{found:?}"
        );
        assert_eq!(
            found.operation == Operation::Preflight,
            method == Method::Options
        );
        if found.message_id.is_some() {
            assert!(matches!(
                found.operation,
                Operation::UpdateMessage | Operation::DeleteMessage | Operation::Preflight
            ));
        }
        assert!(!found.host_style || (host_style_enabled && host.is_some()));
    }
    // `/account/queue/` is `/account/queue`; a path that already ends in `/` (or is only `/`)
    // would get an empty segment instead.
    if path.len() > 1 && path.starts_with(b"/") && !path.ends_with(b"/") {
        let mut slashed = path.to_vec();
        slashed.push(b'/');
        let routed_slashed = route(
            method,
            host,
            &slashed,
            &query,
            is_account,
            host_style_enabled,
        );
        assert_eq!(routed, routed_slashed, "trailing slash changed the route");
    }
}

/// The whole request through `Service::plan`, the shard and `Service::respond`.
fn check_plan(
    method_token: &[u8],
    target: &[u8],
    fuzzer_headers: Vec<(&[u8], &[u8])>,
    body: &[u8],
    signed: bool,
    shards: usize,
    host_style_enabled: bool,
) {
    let mut headers = fuzzer_headers;
    // Signed over the headers as sent; the parser adds Content-Length, which signs as the
    // body's length.
    let authorization = if signed {
        sign(method_token, target, &headers, body.len())
    } else {
        None
    };
    if let Some(authorization) = &authorization {
        headers.insert(0, (b"Authorization", authorization.as_bytes()));
    }
    // Through the real parser: the api layer relies on its guarantees (no CR or LF in a
    // header value it echoes, spans inside the head).
    let Some(request) = request::parse(method_token, target, &headers, body) else {
        return;
    };
    let accounts = Accounts::new(&[(
        DEVELOPMENT_ACCOUNT_NAME.to_string(),
        vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
    )])
    .expect("the development account is valid");
    let health = Health {
        lifecycle: Arc::new(Lifecycle::new(NOW_MS)),
        backend: "portable",
    };
    let service = Service::new(
        accounts,
        shards,
        host_style_enabled,
        "127.0.0.1:10001".to_string(),
        health,
    );
    // The settings every shard keeps (service properties, ACLs): a fresh shard's, all defaults.
    let settings_shard = ShardState::new(0, 7);
    let plan = service.plan(
        &request,
        NOW_MS,
        IpAddr::from([127, 0, 0, 1]),
        settings_shard.replicas(),
    );
    // What a client signs, the server verifies: signing and verification share one
    // canonicalisation, and the parser must not change what was signed.
    if authorization.is_some() {
        assert!(
            !matches!(
                plan.auth_failure,
                Some(AuthFailure::SignatureMismatch { .. })
            ),
            "a signed request failed verification: {:?}",
            plan.auth_failure
        );
    }
    let operation = plan.response.operation;
    let outcome = match plan.step {
        Step::Fail(error) => Outcome::Reply(Err(error)),
        Step::Answer(reply) => Outcome::Reply(Ok(reply)),
        Step::Replicated { shard, command } => {
            assert!(operation.is_some());
            assert!(shard < shards, "planned for shard {shard} of {shards}");
            assert_command_preconditions(&command);
            let mut state = ShardState::new(shard, 7);
            if let Some(queue) = command.queue() {
                assert_eq!(
                    shard,
                    shard_for(queue, shards),
                    "planned for the wrong shard"
                );
                let create = Command::CreateQueue {
                    queue: queue.clone(),
                    metadata: Vec::new(),
                };
                state
                    .apply(create, NOW_MS)
                    .expect("a fresh shard creates a queue");
            }
            Outcome::Reply(state.apply(command, NOW_MS).map(|reply| match reply {
                // The runtime copies the change to the other shards and answers Done.
                Reply::Replicate(_) => Reply::Done,
                other => other,
            }))
        }
        Step::Shard { shard, command } => {
            assert!(operation.is_some());
            let queue = command
                .queue()
                .expect("a single-shard command names its queue");
            assert_eq!(validate::queue_name(&queue.name), Ok(()), "{command:?}");
            assert_eq!(
                shard,
                shard_for(queue, shards),
                "planned for the wrong shard"
            );
            assert_command_preconditions(&command);
            let mut state = ShardState::new(shard, 7);
            // The queue exists, so the command reaches the checks `apply` asserts.
            if !matches!(command, Command::CreateQueue { .. }) {
                let create = Command::CreateQueue {
                    queue: queue.clone(),
                    metadata: Vec::new(),
                };
                state
                    .apply(create, NOW_MS)
                    .expect("a fresh shard creates a queue");
            }
            Outcome::Reply(state.apply(command, NOW_MS))
        }
        Step::EveryShard(command) => {
            assert_eq!(operation, Some(Operation::ListQueues));
            assert_command_preconditions(&command);
            Outcome::Parts(
                (0..shards)
                    .map(|shard| ShardState::new(shard, 7).apply(command.clone(), NOW_MS))
                    .collect(),
            )
        }
        // azq's endpoints that need the runtime (`/_azq/metrics`; `/_azq/faults` is off
        // here): the runtime gathers the shards; any answer it gives is written as is.
        Step::Admin(_) => {
            assert!(request.path().starts_with(b"/_azq/"));
            Outcome::Admin(AdminAnswer::json(200, "{}".to_string()))
        }
    };
    let mut out = BytesMut::new();
    service.respond(&request, &plan.response, outcome, NOW_MS, &mut out);
    assert!(
        out.starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
}

/// A SharedKey `Authorization` value for the request, when its target and headers are text.
fn sign(
    method_token: &[u8],
    target: &[u8],
    headers: &[(&[u8], &[u8])],
    body_bytes: usize,
) -> Option<String> {
    let target = std::str::from_utf8(target).ok()?;
    let headers = headers
        .iter()
        .map(|(name, value)| {
            Some((
                std::str::from_utf8(name).ok()?,
                std::str::from_utf8(value).ok()?,
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    let key =
        SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).expect("the development key is valid");
    let signature = sign_shared_key(
        Method::from_token(method_token).as_str(),
        target,
        &headers,
        body_bytes as u64,
        DEVELOPMENT_ACCOUNT_NAME,
        &key,
    )
    .ok()?;
    Some(format!("SharedKey {DEVELOPMENT_ACCOUNT_NAME}:{signature}"))
}

/// What `ShardState::apply` requires of a command (its doc comment), checked here so that a
/// violation names the field instead of surfacing as an assertion deep in the shard.
pub fn assert_command_preconditions(command: &Command) {
    let metadata_canonical = |metadata: &[(String, String)]| {
        metadata
            .windows(2)
            .all(|pair| pair[0].0.to_ascii_lowercase() < pair[1].0.to_ascii_lowercase())
    };
    match command {
        Command::CreateQueue { metadata, .. } | Command::SetQueueMetadata { metadata, .. } => {
            assert!(
                metadata_canonical(metadata),
                "metadata not canonical: {metadata:?}"
            )
        }
        Command::ListQueues { results_max, .. } => {
            assert!((1..=LIST_QUEUES_RESULTS_MAX).contains(results_max))
        }
        Command::PutMessage {
            text,
            visibility_timeout_s,
            ttl_s,
            ..
        } => {
            assert!(text.len() <= MESSAGE_TEXT_BYTES_MAX);
            assert!(*visibility_timeout_s <= VISIBILITY_TIMEOUT_S_MAX);
            assert!(
                ttl_s.is_none_or(|ttl_s| ttl_s > *visibility_timeout_s),
                "{command:?}"
            );
        }
        Command::GetMessages {
            count,
            visibility_timeout_s,
            ..
        } => {
            assert!((1..=MESSAGES_PER_GET_MAX).contains(count));
            assert!((1..=VISIBILITY_TIMEOUT_S_MAX).contains(visibility_timeout_s));
        }
        Command::PeekMessages { count, .. } => {
            assert!((1..=MESSAGES_PER_GET_MAX).contains(count))
        }
        Command::UpdateMessage {
            visibility_timeout_s,
            text,
            ..
        } => {
            assert!(*visibility_timeout_s <= VISIBILITY_TIMEOUT_S_MAX);
            assert!(text
                .as_ref()
                .is_none_or(|text| text.len() <= MESSAGE_TEXT_BYTES_MAX));
        }
        Command::WithStoredPolicy { command, .. } => assert_command_preconditions(command),
        Command::DeleteQueue { .. }
        | Command::GetQueueMetadata { .. }
        | Command::DeleteMessage { .. }
        | Command::ClearMessages { .. }
        | Command::SetQueueAcl { .. }
        | Command::GetQueueAcl { .. }
        | Command::SetServiceProperties { .. }
        | Command::ApplyReplica(_)
        | Command::DeleteMessageById { .. }
        | Command::DeleteQueues { .. } => {}
    }
}
