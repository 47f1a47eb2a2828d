//! The console's endpoints, planned (`/_azq/…`; who may use them is `control_access`'s rule:
//! an account with a private key only for a caller with its key):
//! - `GET /_azq/ui` and its files: the web console, built into the binary (`crate::console`);
//!   the files hold no data, so they need no credentials;
//! - `GET|POST|DELETE /_azq/session`: who the caller is, sign-in with an account's name and key
//!   (a session cookie), sign-out;
//! - `GET /_azq/inspect[?account=&after=ACCOUNT/QUEUE&limit=]`: every queue the caller may see
//!   with its counts and activity, paged (`INSPECT_QUEUES_PAGE_MAX`); read only;
//! - `GET /_azq/inspect/{account}/{queue}[?offset=&limit=]`: a page of the queue's messages,
//!   invisible ones included (`INSPECT_PAGE_MESSAGES_MAX`, `INSPECT_PAGE_TEXT_BYTES_MAX`);
//!   read only: no dequeue count, visibility, receipt or order changes;
//! - `GET /_azq/stats?range=60|600|3600[&since=MS]`: the console's history (totals of the
//!   whole server, as `/_azq/metrics` shows them: no queue names);
//! - admin only (`--admin`, else 403 with a JSON reason), on the accounts the caller may act
//!   on: `POST /_azq/reset[?account=&queues=GLOB]`, and under `/_azq/admin/{account}/{queue}`:
//!   `POST` (create), `POST …/messages` (`{"text", "visibility_delay_s", "ttl_s", "count"}`:
//!   send, or generate N), `POST …/receive` (`{"count", "visibility_timeout_s"}`), `DELETE
//!   …/messages/{id}` (whatever its lease), `POST …/clear`.

use bytes::Bytes;
use serde::Deserialize;

use std::net::IpAddr;

use crate::auth::Access;
use crate::console;
use crate::http::{Method, Query, Request};
use crate::limits::{
    ADMIN_GENERATE_MESSAGES_MAX, INSPECT_PAGE_MESSAGES_MAX, INSPECT_QUEUES_PAGE_MAX,
    MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX, MESSAGE_TTL_S_DEFAULT, VISIBILITY_TIMEOUT_S_MAX,
};
use crate::queue::{MessageId, PageQuery, QueueKey, QueuesQuery};

use super::super::control_access::Caller;
use super::super::validate;
use super::super::xml::has_non_xml_char;
use super::super::{AdminAnswer, AdminStep, ConsoleAction, Service};

/// Why an admin endpoint answers 403 without `--admin`.
pub const ADMIN_OFF: &str =
    "admin actions are off: start azq with --admin (or --faults-api) to enable them";

/// The step of a console request, or `None` when `path` is none of the console's. `now_ms` and
/// `peer` check the caller's credentials.
pub fn plan(request: &Request, service: &Service, now_ms: u64, peer: IpAddr) -> Option<AdminStep> {
    let path = request.path();
    let query = Query::parse(request.query());
    let parameter = |name: &str| query.as_ref().and_then(|query| query.get(name));
    let method = request.method;
    let answer = |status, why: &str| Some(AdminStep::Answer(AdminAnswer::error(status, why)));
    if let Some((content_type, body)) = console::asset(path) {
        if !matches!(method, Method::Get | Method::Head) {
            return answer(405, "GET");
        }
        return Some(AdminStep::Answer(AdminAnswer {
            status: 200,
            content_type,
            body: body.to_string(),
            headers: vec![
                (
                    "Content-Security-Policy",
                    console::CONTENT_SECURITY_POLICY.to_string(),
                ),
                ("Cache-Control", "no-cache".to_string()),
                ("X-Content-Type-Options", "nosniff".to_string()),
            ],
        }));
    }
    let caller = |account: Option<&str>, accesses: &[Access]| -> Result<Caller, AdminStep> {
        service
            .control_caller(request, account, accesses, now_ms, peer)
            .map_err(AdminStep::Answer)
    };
    let refused = |account: &str| {
        Some(AdminStep::Answer(AdminAnswer::error(
            403,
            &format!(
                "{account} has a private key: sign in with it, or sign the request \
                 (SharedKey or an account SAS)"
            ),
        )))
    };
    if path == b"/_azq/session" {
        return Some(match caller(None, &[]) {
            Ok(caller) => AdminStep::Answer(service.session(request, &caller, now_ms)),
            Err(step) => step,
        });
    }
    let number = |name: &str, default: u64, max: u64| -> Result<u64, String> {
        match parameter(name) {
            None => Ok(default),
            Some(text) => text
                .parse::<u64>()
                .ok()
                .filter(|&value| value <= max)
                .ok_or_else(|| format!("{name}: a number from 0 to {max}")),
        }
    };
    if path == b"/_azq/inspect" || path == b"/_azq/inspect/" {
        if !matches!(method, Method::Get | Method::Head) {
            return answer(405, "GET");
        }
        let after = match parameter("after") {
            None => None,
            Some(text) => match text.split_once('/') {
                Some((account, name)) => Some(QueueKey {
                    account: account.to_string(),
                    name: name.to_string(),
                }),
                None => return answer(400, "after: ACCOUNT/QUEUE"),
            },
        };
        let limit = match number("limit", INSPECT_QUEUES_PAGE_MAX as u64, u64::MAX) {
            Ok(limit) => (limit as usize).clamp(1, INSPECT_QUEUES_PAGE_MAX),
            Err(why) => return answer(400, &why),
        };
        let asked = parameter("account");
        // Names and per-queue counts: List Queues and Get Queue Metadata's permissions.
        let caller = match caller(asked, &[Access::LIST_QUEUES, Access::GET_QUEUE_METADATA]) {
            Ok(caller) => caller,
            Err(step) => return Some(step),
        };
        let accounts = match asked {
            Some(account) if !caller.scope.allows(account) => return refused(account),
            Some(account) => Some(vec![account.to_string()]),
            None => caller.scope.accounts().map(<[String]>::to_vec),
        };
        return Some(AdminStep::InspectQueues(QueuesQuery {
            accounts,
            after,
            limit,
        }));
    }
    if let Some(rest) = path.strip_prefix(b"/_azq/inspect/") {
        if !matches!(method, Method::Get | Method::Head) {
            return answer(405, "GET");
        }
        let queue = match queue_key(rest) {
            Ok(queue) => queue,
            Err(why) => return answer(404, &why),
        };
        let (offset, limit) = match (
            number("offset", 0, u64::MAX),
            number("limit", INSPECT_PAGE_MESSAGES_MAX as u64, u64::MAX),
        ) {
            (Ok(offset), Ok(limit)) => {
                (offset, (limit as usize).clamp(1, INSPECT_PAGE_MESSAGES_MAX))
            }
            (Err(why), _) | (_, Err(why)) => return answer(400, &why),
        };
        // Leased and delayed messages too: Peek's and Get's permissions.
        let accesses = [Access::PEEK_MESSAGES, Access::GET_MESSAGES];
        match caller(Some(&queue.account), &accesses) {
            Ok(caller) if caller.scope.allows(&queue.account) => {}
            Ok(_) => return refused(&queue.account),
            Err(step) => return Some(step),
        }
        return Some(AdminStep::InspectQueue(PageQuery {
            queue,
            offset,
            limit,
        }));
    }
    if path == b"/_azq/stats" {
        if !matches!(method, Method::Get | Method::Head) {
            return answer(405, "GET");
        }
        return match (number("range", 60, 3600), number("since", 0, u64::MAX)) {
            (Ok(range_s), Ok(since_ms)) => Some(AdminStep::Stats {
                range_s: range_s.max(1),
                since_ms,
            }),
            (Err(why), _) | (_, Err(why)) => answer(400, &why),
        };
    }
    let admin_path = path == b"/_azq/reset" || path.starts_with(b"/_azq/admin/");
    if !admin_path {
        return None;
    }
    if !service.admin() {
        return answer(403, ADMIN_OFF);
    }
    if path == b"/_azq/reset" {
        if method != Method::Post {
            return answer(405, "POST");
        }
        let asked = parameter("account");
        if let Some(account) = asked {
            if !service.is_account(account) {
                return answer(404, &format!("no account {account}"));
            }
        }
        // Without a glob, reset also resets the service properties.
        let accesses: &[Access] = match parameter("queues") {
            Some(_) => &[Access::DELETE_QUEUE],
            None => &[Access::DELETE_QUEUE, Access::SET_SERVICE_PROPERTIES],
        };
        let caller = match caller(asked, accesses) {
            Ok(caller) => caller,
            Err(step) => return Some(step),
        };
        let accounts = match asked {
            Some(account) if !caller.scope.allows(account) => return refused(account),
            Some(account) => Some(vec![account.to_string()]),
            None => caller.scope.accounts().map(<[String]>::to_vec),
        };
        return Some(AdminStep::Reset {
            accounts,
            glob: parameter("queues").map(str::to_string),
        });
    }
    let rest = &path[b"/_azq/admin/".len()..];
    let mut parts = rest.splitn(3, |&byte| byte == b'/');
    let (account, name) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let tail = parts.next();
    let mut key = Vec::with_capacity(account.len() + name.len() + 1);
    key.extend_from_slice(account);
    key.push(b'/');
    key.extend_from_slice(name);
    let queue = match queue_key(&key) {
        Ok(queue) if service.is_account(&queue.account) => queue,
        Ok(queue) => return answer(404, &format!("no account {}", queue.account)),
        Err(why) => return answer(404, &why),
    };
    let action = match (method, tail) {
        (Method::Post, None) => Ok(ConsoleAction::Create),
        (Method::Post, Some(b"messages")) => send(&request.body),
        (Method::Post, Some(b"receive")) => receive(&request.body),
        (Method::Post, Some(b"clear")) => Ok(ConsoleAction::Clear),
        (Method::Delete, Some(tail)) if tail.starts_with(b"messages/") => {
            std::str::from_utf8(&tail[b"messages/".len()..])
                .ok()
                .and_then(MessageId::parse)
                .map(ConsoleAction::Delete)
                .ok_or_else(|| (404, "no such message ID".to_string()))
        }
        _ => Err((
            405,
            "see /_azq/ui's actions: POST, POST messages|receive|clear, DELETE messages/ID"
                .to_string(),
        )),
    };
    let accesses: &[Access] = match &action {
        Ok(ConsoleAction::Create) => &[Access::CREATE_QUEUE],
        Ok(ConsoleAction::Send { .. }) => &[Access::PUT_MESSAGE],
        Ok(ConsoleAction::Receive { .. }) => &[Access::GET_MESSAGES],
        // Whatever its lease, without a receipt: as Clear Messages could.
        Ok(ConsoleAction::Delete(_)) => &[Access::DELETE_MESSAGE, Access::CLEAR_MESSAGES],
        Ok(ConsoleAction::Clear) | Err(_) => &[Access::CLEAR_MESSAGES],
    };
    match caller(Some(&queue.account), accesses) {
        Ok(caller) if caller.scope.allows(&queue.account) => {}
        Ok(_) => return refused(&queue.account),
        Err(step) => return Some(step),
    }
    Some(match action {
        Ok(action) => AdminStep::Console { queue, action },
        Err((status, why)) => AdminStep::Answer(AdminAnswer::error(status, &why)),
    })
}

/// `ACCOUNT/QUEUE` as a queue key, the name validated.
fn queue_key(path: &[u8]) -> Result<QueueKey, String> {
    let text = std::str::from_utf8(path).map_err(|_| "not UTF-8".to_string())?;
    let (account, name) = text
        .trim_end_matches('/')
        .split_once('/')
        .ok_or_else(|| "expected ACCOUNT/QUEUE".to_string())?;
    validate::queue_name(name).map_err(|_| format!("{name:?} is not a queue name"))?;
    Ok(QueueKey {
        account: account.to_string(),
        name: name.to_string(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendBody {
    text: String,
    #[serde(default)]
    visibility_delay_s: u64,
    /// -1: forever.
    #[serde(default)]
    ttl_s: Option<i64>,
    #[serde(default)]
    count: Option<u64>,
}

fn send(body: &[u8]) -> Result<ConsoleAction, (u16, String)> {
    let bad = |why: String| (400, why);
    let body: SendBody = serde_json::from_slice(body).map_err(|error| bad(error.to_string()))?;
    if body.text.len() > MESSAGE_TEXT_BYTES_MAX || has_non_xml_char(body.text.as_bytes()) {
        return Err(bad(format!(
            "text: at most {MESSAGE_TEXT_BYTES_MAX} bytes of XML text"
        )));
    }
    if body.visibility_delay_s > VISIBILITY_TIMEOUT_S_MAX {
        return Err(bad("visibility_delay_s: at most 604800".into()));
    }
    let ttl_s = match body.ttl_s {
        None => Some(MESSAGE_TTL_S_DEFAULT),
        Some(-1) => None,
        Some(ttl_s) if ttl_s > body.visibility_delay_s as i64 => Some(ttl_s as u64),
        Some(_) => return Err(bad("ttl_s: -1, or above visibility_delay_s".into())),
    };
    let count = body.count.unwrap_or(1);
    if !(1..=ADMIN_GENERATE_MESSAGES_MAX).contains(&count) {
        return Err(bad(format!("count: 1 to {ADMIN_GENERATE_MESSAGES_MAX}")));
    }
    Ok(ConsoleAction::Send {
        text: Bytes::from(body.text),
        visibility_delay_s: body.visibility_delay_s,
        ttl_s,
        count,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiveBody {
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    visibility_timeout_s: Option<u64>,
}

fn receive(body: &[u8]) -> Result<ConsoleAction, (u16, String)> {
    let body: ReceiveBody = if body.is_empty() {
        ReceiveBody {
            count: None,
            visibility_timeout_s: None,
        }
    } else {
        serde_json::from_slice(body).map_err(|error| (400, error.to_string()))?
    };
    let count = body.count.unwrap_or(1);
    let visibility_timeout_s = body.visibility_timeout_s.unwrap_or(30);
    if !(1..=MESSAGES_PER_GET_MAX).contains(&count)
        || !(1..=VISIBILITY_TIMEOUT_S_MAX).contains(&visibility_timeout_s)
    {
        return Err((
            400,
            "count: 1 to 32; visibility_timeout_s: 1 to 604800".to_string(),
        ));
    }
    Ok(ConsoleAction::Receive {
        count,
        visibility_timeout_s,
    })
}
