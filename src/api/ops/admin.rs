//! azq's own endpoints under `/_azq/` (no account name can start with `_`, so they never shadow
//! an account). Health, metrics and the certificate are open to every caller under any `Host`
//! (machines reach them by any name); the others follow `control_access`'s rules (`Host`,
//! cross-site writes, an account's key for an account with a private one):
//! - `GET /_azq/health`, for container health checks, load balancers and `azq healthcheck`:
//!   200 once every shard serves, 503 while starting or draining, with a small JSON body;
//! - `GET /_azq/cert.pem`, over HTTPS: the server's certificate chain, so that a client or a CI
//!   step can trust a `--cert auto` certificate in one command (404 over plain HTTP);
//! - `GET /_azq/metrics` (Prometheus text; `--metrics off` makes it 404, the runtime's
//!   `admin` answers it) and, only with `--admin` (or its alias `--faults-api`), the fault
//!   rules: `POST /_azq/faults` adds one (JSON, `governor::faults`), `GET /_azq/faults` lists
//!   them with how often each fired, `DELETE /_azq/faults/{id}` and `DELETE /_azq/faults`
//!   remove them. Without `--admin` they answer 403 with the reason. Their answers are JSON; a
//!   bad rule is 400 `{"error": "..."}` saying what is wrong. A caller who may act on some
//!   accounts only (`control_access::Scope`) adds rules that name one of them, sees those and
//!   the rules of every account, and removes only its own;
//! - the console, inspection, its history, reset and the console's actions (`console.rs`).
//!
//! Every admin call (rules, reset, the console's actions) is logged on stderr and in the
//! request log.

use std::net::IpAddr;

use bytes::{BufMut, BytesMut};

use crate::auth::Access;
use crate::error::StorageError;
use crate::http::{Method, Request};
use crate::queue::Reply;

use super::super::control_access::is_machine_endpoint;
use super::super::plan::fail;
use super::super::response::Responder;
use super::super::{AdminAnswer, AdminStep, Health, Operation, Plan, ResponsePlan, Service, Step};
use super::console;
use crate::governor::faults;

/// The prefix of every azq endpoint.
pub const ADMIN_PATH_PREFIX: &[u8] = b"/_azq/";

/// The path of the fault rules.
const FAULTS_PATH: &[u8] = b"/_azq/faults";

/// A plan that runs an admin step.
fn admin(step: AdminStep) -> Plan {
    Plan {
        step: Step::Admin(step),
        response: ResponsePlan::default(),
    }
}

/// The plan of a request to `/_azq/...`; `now_ms` and `peer` check its credentials.
pub fn plan(request: &Request, service: &Service, now_ms: u64, peer: IpAddr) -> Plan {
    let path = request.path();
    if !is_machine_endpoint(path) {
        if let Err(answer) = service.check_browser_rules(request) {
            return admin(AdminStep::Answer(answer));
        }
    }
    if let Some(step) = console::plan(request, service, now_ms, peer) {
        return admin(step);
    }
    if path.starts_with(FAULTS_PATH) && !service.admin() {
        return admin(AdminStep::Answer(AdminAnswer::error(
            403,
            console::ADMIN_OFF,
        )));
    }
    if path.starts_with(FAULTS_PATH) {
        let query = crate::http::Query::parse(request.query());
        let account = query.as_ref().and_then(|query| query.get("account"));
        let access = match request.method {
            Method::Get | Method::Head => Access::GET_SERVICE_PROPERTIES,
            _ => Access::SET_SERVICE_PROPERTIES,
        };
        let caller = match service.control_caller(request, account, &[access], now_ms, peer) {
            Ok(caller) => caller,
            Err(answer) => return admin(AdminStep::Answer(answer)),
        };
        let accounts = caller.scope.accounts().map(<[String]>::to_vec);
        let rest = &path[FAULTS_PATH.len()..];
        return match (request.method, rest) {
            (Method::Get, b"" | b"/") => admin(AdminStep::ListRules(accounts)),
            (Method::Delete, b"" | b"/") => admin(AdminStep::RemoveRules(None, accounts)),
            (Method::Post, b"" | b"/") => {
                admin(match faults::parse_rule(String::new(), &request.body) {
                    Ok(rule) => match &rule.spec.account {
                        Some(account) if !caller.scope.allows(account) => {
                            AdminStep::Answer(AdminAnswer::error(
                                403,
                                &format!("{account} has a private key: sign in with it first"),
                            ))
                        }
                        None if accounts.is_some() => AdminStep::Answer(AdminAnswer::error(
                            403,
                            "a rule without \"account\" reaches accounts with private keys: \
                             name the account",
                        )),
                        _ => AdminStep::AddRule(Box::new(rule)),
                    },
                    Err(why) => AdminStep::Answer(AdminAnswer::error(
                        400,
                        &format!("bad fault rule: {why}"),
                    )),
                })
            }
            (Method::Delete, id) if id.len() > 1 && id[0] == b'/' => admin(AdminStep::RemoveRules(
                Some(String::from_utf8_lossy(&id[1..]).into_owned()),
                accounts,
            )),
            (_, b"" | b"/") => admin(AdminStep::Answer(AdminAnswer::error(
                405,
                "GET, POST or DELETE",
            ))),
            (_, id) if id.first() == Some(&b'/') => {
                admin(AdminStep::Answer(AdminAnswer::error(405, "DELETE")))
            }
            _ => fail(None, StorageError::InvalidUri),
        };
    }
    match (request.method, path) {
        (Method::Get | Method::Head, b"/_azq/metrics") => admin(AdminStep::Metrics),
        (_, b"/_azq/metrics") => fail(None, StorageError::UnsupportedHttpVerb),
        (Method::Get | Method::Head, b"/_azq/health") => Plan {
            step: Step::Answer(Reply::Done),
            response: ResponsePlan {
                operation: Some(Operation::Health),
                ..ResponsePlan::default()
            },
        },
        (_, b"/_azq/health") => fail(Some(Operation::Health), StorageError::UnsupportedHttpVerb),
        (Method::Get | Method::Head, b"/_azq/cert.pem") => Plan {
            step: Step::Answer(Reply::Done),
            response: ResponsePlan {
                operation: Some(Operation::Certificate),
                ..ResponsePlan::default()
            },
        },
        (_, b"/_azq/cert.pem") => fail(
            Some(Operation::Certificate),
            StorageError::UnsupportedHttpVerb,
        ),
        _ => fail(None, StorageError::InvalidUri),
    }
}

/// Writes an azq endpoint's answer.
pub fn admin_response(responder: &Responder<'_>, answer: AdminAnswer, out: &mut BytesMut) {
    let mut response = responder.start(answer.status, out);
    response.header("Content-Type", answer.content_type.as_bytes());
    for (name, value) in &answer.headers {
        response.header(name, value.as_bytes());
    }
    response.body().put_slice(answer.body.as_bytes());
    response.finish();
}

/// 200 `{"status":"serving",…}` when every shard serves, else 503 with `starting` or `draining`.
pub fn health_response(
    responder: &Responder<'_>,
    health: &Health,
    shards: usize,
    out: &mut BytesMut,
) {
    let lifecycle = &health.lifecycle;
    let (status, state) = if lifecycle.serving() {
        (200, "serving")
    } else if lifecycle.stop_requested() {
        (503, "draining")
    } else {
        (503, "starting")
    };
    let uptime_s = responder.now_ms().saturating_sub(lifecycle.started_ms()) / 1000;
    let mut response = responder.start(status, out);
    response.header("Content-Type", b"application/json");
    // Every value is a number or one of a few fixed ASCII words: nothing to escape.
    response.body().put_slice(
        format!(
            "{{\"status\":\"{state}\",\"shards\":{},\"backend\":\"{}\",\"uptime_s\":{uptime_s}}}",
            shards, health.backend
        )
        .as_bytes(),
    );
    response.finish();
}

/// 200 with the certificate chain in PEM; 404 `ResourceNotFound` when the server serves plain
/// HTTP and so has none.
pub fn certificate_response(
    responder: &Responder<'_>,
    certificate_pem: Option<&str>,
    out: &mut BytesMut,
) {
    let Some(pem) = certificate_pem else {
        return responder.error(StorageError::ResourceNotFound, out);
    };
    let mut response = responder.start(200, out);
    response.header("Content-Type", b"application/x-pem-file");
    response.body().put_slice(pem.as_bytes());
    response.finish();
}
