//! The Azure Queue REST API on top of `http/` and `queue/`: a request is routed to an
//! `Operation`, authenticated, validated into a queue `Command` addressed to the owning shard
//! (`Service::plan`), and the shard's reply is encoded as Azure's headers and XML
//! (`Service::respond`). Nothing here does I/O or waits: the runtime moves commands between shards.

pub mod date;
pub mod ids;
pub mod router;
pub mod validate;
pub mod xml;

use std::cell::RefCell;
use std::net::IpAddr;

use bytes::{BufMut, BytesMut};

use crate::auth::{Access, Accounts, AuthFailure, Authenticator, RequestContext};
use crate::config::{
    API_VERSION_LATEST, GET_VISIBILITY_TIMEOUT_S_DEFAULT, LIST_QUEUES_RESULTS_MAX,
    MESSAGES_PER_GET_MAX, MESSAGE_TTL_S_DEFAULT, VISIBILITY_TIMEOUT_S_MAX,
};
use crate::error::StorageError;
use crate::http::{Request, ResponseWriter};
use crate::queue::{self, Command, MessageId, PopReceipt, QueueKey, Reply, EXPIRATION_NEVER_MS};

pub use router::{Operation, Query, Route};

/// The `Server` header value.
const SERVER: &str = concat!("azq/", env!("CARGO_PKG_VERSION"));

/// What the runtime must do for one request.
#[derive(Debug)]
pub enum Step {
    /// Answer with this error; nothing is executed.
    Fail(StorageError),
    /// Apply `command` on `shard` (the queue's owner) and answer with its reply.
    Shard { shard: usize, command: Command },
    /// Apply `command` on every shard and answer with the merged replies (List Queues).
    EveryShard(Command),
}

/// A routed request's operation (when routing succeeded) and its step.
#[derive(Debug)]
pub struct Plan {
    pub operation: Option<Operation>,
    pub step: Step,
    /// Why authentication failed, for the log; the client only sees `AuthenticationFailed`
    /// (or the authorization code).
    pub auth_failure: Option<AuthFailure>,
}

/// The API of one shard: its authenticator (with its SAS cache) and the routing settings.
pub struct Service {
    /// Per-shard and only borrowed inside `plan`, which never waits, so the borrow never spans
    /// another request.
    authenticator: RefCell<Authenticator>,
    shards: usize,
    host_style_enabled: bool,
    /// `host:port` used in List Queues' ServiceEndpoint when a request has no Host header.
    default_authority: String,
}

impl Service {
    /// A service over `accounts` for a server of `shards` shards.
    pub fn new(
        accounts: Accounts,
        shards: usize,
        host_style_enabled: bool,
        default_authority: String,
    ) -> Self {
        assert!(shards > 0);
        Service {
            authenticator: RefCell::new(Authenticator::new(accounts)),
            shards,
            host_style_enabled,
            default_authority,
        }
    }

    /// Routes, authenticates and validates `request` into a plan. `now_ms` is the time used for
    /// SAS windows; `peer` is the client's address for SAS IP ranges.
    pub fn plan(&self, request: &Request, now_ms: u64, peer: IpAddr) -> Plan {
        let query = match Query::parse(request.query()) {
            Ok(query) => query,
            Err(error) => return fail(None, error),
        };
        let route = match router::route(
            request.method,
            request.header_str("host"),
            request.path(),
            &query,
            |name| self.is_account(name),
            self.host_style_enabled,
        ) {
            Ok(route) => route,
            Err(error) => return fail(None, error),
        };
        let operation = route.operation;
        if let Err(failure) = self.authorize(request, &route, now_ms, peer) {
            return Plan {
                operation: Some(operation),
                step: Step::Fail(StorageError::from(failure.clone())),
                auth_failure: Some(failure),
            };
        }
        match self.command(request, &route, &query) {
            Ok(step) => Plan {
                operation: Some(operation),
                step,
                auth_failure: None,
            },
            Err(error) => fail(Some(operation), error),
        }
    }

    fn is_account(&self, name: &str) -> bool {
        self.authenticator.borrow().accounts().get(name).is_some()
    }

    fn authorize(
        &self,
        request: &Request,
        route: &Route<'_>,
        now_ms: u64,
        peer: IpAddr,
    ) -> Result<(), AuthFailure> {
        let access = match route.operation {
            Operation::Preflight => return Ok(()),
            Operation::GetServiceProperties => Access::GET_SERVICE_PROPERTIES,
            Operation::SetServiceProperties => Access::SET_SERVICE_PROPERTIES,
            Operation::GetServiceStats => Access::GET_SERVICE_STATS,
            Operation::ListQueues => Access::LIST_QUEUES,
            Operation::CreateQueue => Access::CREATE_QUEUE,
            Operation::DeleteQueue => Access::DELETE_QUEUE,
            Operation::GetQueueMetadata => Access::GET_QUEUE_METADATA,
            Operation::SetQueueMetadata => Access::SET_QUEUE_METADATA,
            Operation::GetQueueAcl => Access::GET_QUEUE_ACL,
            Operation::SetQueueAcl => Access::SET_QUEUE_ACL,
            Operation::PutMessage => Access::PUT_MESSAGE,
            Operation::GetMessages => Access::GET_MESSAGES,
            Operation::PeekMessages => Access::PEEK_MESSAGES,
            Operation::ClearMessages => Access::CLEAR_MESSAGES,
            Operation::UpdateMessage => Access::UPDATE_MESSAGE,
            Operation::DeleteMessage => Access::DELETE_MESSAGE,
        };
        let secondary_name;
        let account_name = if route.secondary {
            secondary_name = format!("{}-secondary", route.account);
            &secondary_name
        } else {
            route.account
        };
        let context = RequestContext {
            account_name,
            queue_name: route.queue,
            now_ms,
            client_ip: peer,
            secure_transport: false,
        };
        // Stored access policies (queue ACLs) are not kept yet, so a service SAS naming one fails.
        self.authenticator
            .borrow_mut()
            .authenticate(request, &context, access, &|_identifier| None)
            .map(|_principal| ())
    }

    fn command(
        &self,
        request: &Request,
        route: &Route<'_>,
        query: &Query<'_>,
    ) -> Result<Step, StorageError> {
        validate::integer_parameter(query, "timeout", 0..=i64::MAX)?;
        let account = route.account.to_string();
        let queue_key = || -> Result<QueueKey, StorageError> {
            let name = route.queue.ok_or(StorageError::InvalidUri)?;
            validate::queue_name(name)?;
            Ok(QueueKey {
                account: account.clone(),
                name: name.to_string(),
            })
        };
        let command = match route.operation {
            Operation::GetServiceProperties
            | Operation::SetServiceProperties
            | Operation::GetServiceStats
            | Operation::GetQueueAcl
            | Operation::SetQueueAcl
            | Operation::Preflight => return Err(StorageError::NotImplemented),
            Operation::ListQueues => {
                let results_max = list_results_max(query)?;
                let mut include_metadata = false;
                for item in query
                    .get("include")
                    .unwrap_or("")
                    .split(',')
                    .filter(|item| !item.is_empty())
                {
                    if item.eq_ignore_ascii_case("metadata") {
                        include_metadata = true;
                    } else {
                        return Err(StorageError::InvalidQueryParameterValue);
                    }
                }
                return Ok(Step::EveryShard(Command::ListQueues {
                    account,
                    prefix: query.get("prefix").unwrap_or("").to_string(),
                    marker: query.get("marker").unwrap_or("").to_string(),
                    results_max,
                    include_metadata,
                }));
            }
            Operation::CreateQueue => Command::CreateQueue {
                queue: queue_key()?,
                metadata: validate::metadata(request)?,
            },
            Operation::DeleteQueue => Command::DeleteQueue {
                queue: queue_key()?,
            },
            Operation::GetQueueMetadata => Command::GetQueueMetadata {
                queue: queue_key()?,
            },
            Operation::SetQueueMetadata => Command::SetQueueMetadata {
                queue: queue_key()?,
                metadata: validate::metadata(request)?,
            },
            Operation::PutMessage => {
                let queue = queue_key()?;
                let visibility_timeout_s = validate::integer_parameter(
                    query,
                    "visibilitytimeout",
                    0..=VISIBILITY_TIMEOUT_S_MAX as i64,
                )?
                .unwrap_or(0) as u64;
                let ttl_s = match validate::integer_parameter(query, "messagettl", -1..=i64::MAX)? {
                    None => Some(MESSAGE_TTL_S_DEFAULT),
                    Some(-1) => None,
                    Some(0) => return Err(StorageError::OutOfRangeQueryParameterValue),
                    // A TTL reaching past year 9999 is the same as never expiring.
                    Some(ttl_s) if (ttl_s as u64).saturating_mul(1000) >= EXPIRATION_NEVER_MS => {
                        None
                    }
                    Some(ttl_s) => Some(ttl_s as u64),
                };
                if ttl_s.is_some_and(|ttl_s| visibility_timeout_s >= ttl_s) {
                    return Err(StorageError::OutOfRangeQueryParameterValue);
                }
                Command::PutMessage {
                    queue,
                    text: xml::message_text(&request.body)?,
                    visibility_timeout_s,
                    ttl_s,
                }
            }
            Operation::GetMessages => Command::GetMessages {
                queue: queue_key()?,
                count: message_count(query)?,
                visibility_timeout_s: validate::integer_parameter(
                    query,
                    "visibilitytimeout",
                    1..=VISIBILITY_TIMEOUT_S_MAX as i64,
                )?
                .map_or(GET_VISIBILITY_TIMEOUT_S_DEFAULT, |value| value as u64),
            },
            Operation::PeekMessages => Command::PeekMessages {
                queue: queue_key()?,
                count: message_count(query)?,
            },
            Operation::ClearMessages => Command::ClearMessages {
                queue: queue_key()?,
            },
            Operation::UpdateMessage => {
                let queue = queue_key()?;
                let message_id = message_id(route)?;
                let pop_receipt = pop_receipt(query)?;
                let visibility_timeout_s = validate::integer_parameter(
                    query,
                    "visibilitytimeout",
                    0..=VISIBILITY_TIMEOUT_S_MAX as i64,
                )?
                .ok_or(StorageError::MissingRequiredQueryParameter)?
                    as u64;
                let text = if request.body.is_empty() {
                    None
                } else {
                    Some(xml::message_text(&request.body)?)
                };
                Command::UpdateMessage {
                    queue,
                    message_id,
                    pop_receipt,
                    visibility_timeout_s,
                    text,
                }
            }
            Operation::DeleteMessage => Command::DeleteMessage {
                queue: queue_key()?,
                message_id: message_id(route)?,
                pop_receipt: pop_receipt(query)?,
            },
        };
        let shard = command
            .queue()
            .map_or(0, |queue| queue::shard_for(queue, self.shards));
        Ok(Step::Shard { shard, command })
    }

    /// Encodes the response to `request` into `out`. `outcome` is the command's result, or the
    /// error that stopped the request earlier (for `EveryShard`, the merged replies).
    pub fn respond(
        &self,
        request: &Request,
        operation: Option<Operation>,
        outcome: Result<Reply, StorageError>,
        now_ms: u64,
        out: &mut BytesMut,
    ) {
        let request_id = ids::hyphenated(ids::request_id());
        let reply = match (operation, outcome) {
            (_, Err(error)) => return self.respond_error(request, error, &request_id, now_ms, out),
            (Some(operation), Ok(reply)) => (operation, reply),
            (None, Ok(_)) => unreachable!("a reply without an operation"),
        };
        let head_only = request.method == crate::http::Method::Head;
        match reply {
            (Operation::CreateQueue, Reply::QueueCreated) => {
                self.start(request, 201, &request_id, now_ms, out, head_only)
                    .finish();
            }
            (Operation::CreateQueue, Reply::QueueExists) => {
                self.start(request, 204, &request_id, now_ms, out, head_only)
                    .finish();
            }
            (
                Operation::GetQueueMetadata,
                Reply::Metadata {
                    metadata,
                    approximate_messages_count,
                },
            ) => {
                let mut writer = self.start(request, 200, &request_id, now_ms, out, head_only);
                writer.header_decimal(
                    "x-ms-approximate-messages-count",
                    approximate_messages_count,
                );
                for (key, value) in &metadata {
                    writer.header(&format!("x-ms-meta-{key}"), value.as_bytes());
                }
                writer.finish();
            }
            (Operation::ListQueues, Reply::Queues(mut queues)) => {
                let query = Query::parse(request.query()).unwrap_or_default();
                // Validated in `plan`, so it parses again here.
                let results_max = list_results_max(&query).unwrap_or(LIST_QUEUES_RESULTS_MAX);
                queues.sort_by(|left, right| left.name.cmp(&right.name));
                let next_marker =
                    (queues.len() > results_max).then(|| queues[results_max].name.clone());
                queues.truncate(results_max);
                let endpoint = self.service_endpoint(request);
                let mut writer = self.start(request, 200, &request_id, now_ms, out, head_only);
                writer.header("Content-Type", b"application/xml");
                xml::queue_list(
                    writer.body(),
                    &xml::QueueList {
                        service_endpoint: &endpoint,
                        prefix: query.get("prefix"),
                        marker: query.get("marker"),
                        results_max: query.get("maxresults"),
                        queues: &queues,
                        next_marker: next_marker.as_deref(),
                    },
                );
                writer.finish();
            }
            (
                operation @ (Operation::PutMessage
                | Operation::GetMessages
                | Operation::PeekMessages),
                Reply::Messages(messages),
            ) => {
                let (status, fields) = match operation {
                    Operation::PutMessage => (201, xml::MessageFields::Put),
                    Operation::GetMessages => (200, xml::MessageFields::Get),
                    _ => (200, xml::MessageFields::Peek),
                };
                let mut writer = self.start(request, status, &request_id, now_ms, out, head_only);
                writer.header("Content-Type", b"application/xml");
                xml::messages(writer.body(), &messages, fields);
                writer.finish();
            }
            (
                Operation::UpdateMessage,
                Reply::Updated {
                    pop_receipt,
                    time_next_visible_ms,
                },
            ) => {
                let mut receipt = BytesMut::with_capacity(24);
                pop_receipt.encode_into(&mut receipt);
                let mut writer = self.start(request, 204, &request_id, now_ms, out, head_only);
                writer.header("x-ms-popreceipt", &receipt);
                writer.header(
                    "x-ms-time-next-visible",
                    &date::rfc1123(time_next_visible_ms),
                );
                writer.finish();
            }
            (
                Operation::DeleteQueue
                | Operation::SetQueueMetadata
                | Operation::DeleteMessage
                | Operation::ClearMessages,
                Reply::Done,
            ) => {
                self.start(request, 204, &request_id, now_ms, out, head_only)
                    .finish();
            }
            (operation, reply) => {
                debug_assert!(false, "{operation:?} answered with {reply:?}");
                self.respond_error(
                    request,
                    StorageError::InternalError,
                    &request_id,
                    now_ms,
                    out,
                );
            }
        }
    }

    fn respond_error(
        &self,
        request: &Request,
        error: StorageError,
        request_id: &[u8],
        now_ms: u64,
        out: &mut BytesMut,
    ) {
        let head_only = request.method == crate::http::Method::Head;
        let mut writer = self.start(request, error.status(), request_id, now_ms, out, head_only);
        writer.header("x-ms-error-code", error.code().as_bytes());
        writer.header("Content-Type", b"application/xml");
        xml::error(writer.body(), error, request_id, now_ms);
        writer.finish();
    }

    /// Writes the status line and the headers every response carries.
    fn start<'o>(
        &self,
        request: &Request,
        status: u16,
        request_id: &[u8],
        now_ms: u64,
        out: &'o mut BytesMut,
        head_only: bool,
    ) -> ResponseWriter<'o> {
        let mut writer = ResponseWriter::start(out, status, head_only);
        writer.header("Server", SERVER.as_bytes());
        writer.header("x-ms-request-id", request_id);
        writer.header(
            "x-ms-version",
            request
                .header("x-ms-version")
                .unwrap_or(API_VERSION_LATEST.as_bytes()),
        );
        if let Some(client_request_id) = request.header("x-ms-client-request-id") {
            writer.header("x-ms-client-request-id", client_request_id);
        }
        writer.header("Date", &date::rfc1123_cached(now_ms));
        if !request.keep_alive {
            writer.header("Connection", b"close");
        } else if request.version_minor == 0 {
            writer.header("Connection", b"keep-alive");
        }
        writer
    }

    /// The account's endpoint as the client addressed it, for List Queues.
    fn service_endpoint(&self, request: &Request) -> String {
        let host = request
            .header_str("host")
            .unwrap_or(&self.default_authority);
        let query = Query::parse(request.query()).unwrap_or_default();
        match router::route(
            request.method,
            Some(host),
            request.path(),
            &query,
            |name| self.is_account(name),
            self.host_style_enabled,
        ) {
            Ok(route) if route.host_style => format!("http://{host}/"),
            Ok(route) => format!("http://{host}/{}/", route.account),
            Err(_) => format!("http://{host}/"),
        }
    }

    /// Answers a request the HTTP layer could not parse (there is no `Request` to echo from).
    pub fn respond_unparsed(error: StorageError, now_ms: u64, out: &mut BytesMut) {
        let request_id = ids::hyphenated(ids::request_id());
        let mut writer = ResponseWriter::start(out, error.status(), false);
        writer.header("Server", SERVER.as_bytes());
        writer.header("x-ms-request-id", &request_id);
        writer.header("x-ms-version", API_VERSION_LATEST.as_bytes());
        writer.header("x-ms-error-code", error.code().as_bytes());
        writer.header("Date", &date::rfc1123_cached(now_ms));
        writer.header("Connection", b"close");
        writer.header("Content-Type", b"application/xml");
        xml::error(writer.body(), error, &request_id, now_ms);
        writer.finish();
    }

    /// Writes `100 Continue` for a request that sent `Expect: 100-continue`.
    pub fn respond_continue(out: &mut BytesMut) {
        out.put_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
}

fn fail(operation: Option<Operation>, error: StorageError) -> Plan {
    Plan {
        operation,
        step: Step::Fail(error),
        auth_failure: None,
    }
}

/// List Queues' page size: `maxresults` (at least 1; larger than the page limit serves the
/// limit, as Azure does) or the limit.
fn list_results_max(query: &Query<'_>) -> Result<usize, StorageError> {
    Ok(
        validate::integer_parameter(query, "maxresults", 1..=i64::MAX)?
            .map_or(LIST_QUEUES_RESULTS_MAX, |value| {
                (value as usize).min(LIST_QUEUES_RESULTS_MAX)
            }),
    )
}

fn message_count(query: &Query<'_>) -> Result<u32, StorageError> {
    Ok(
        validate::integer_parameter(query, "numofmessages", 1..=i64::from(MESSAGES_PER_GET_MAX))?
            .unwrap_or(1) as u32,
    )
}

fn message_id(route: &Route<'_>) -> Result<MessageId, StorageError> {
    let raw = route.message_id.ok_or(StorageError::InvalidUri)?;
    uuid::Uuid::try_parse(raw)
        .map(|id| MessageId(id.as_u128()))
        .map_err(|_| StorageError::MessageNotFound)
}

fn pop_receipt(query: &Query<'_>) -> Result<PopReceipt, StorageError> {
    let raw = query
        .get("popreceipt")
        .ok_or(StorageError::MissingRequiredQueryParameter)?;
    PopReceipt::decode(raw).ok_or(StorageError::InvalidQueryParameterValue)
}

/// Joins the List Queues parts of every shard into one reply (sorted and cut by `respond`).
pub fn merge_queue_lists(parts: Vec<Result<Reply, StorageError>>) -> Result<Reply, StorageError> {
    let mut queues = Vec::new();
    for part in parts {
        match part? {
            Reply::Queues(listings) => queues.extend(listings),
            other => {
                debug_assert!(false, "List Queues part {other:?}");
                return Err(StorageError::InternalError);
            }
        }
    }
    Ok(Reply::Queues(queues))
}
