//! The Azure Queue REST API on top of `http/` and `queue/`: a request is routed to an
//! `Operation`, authenticated, validated into a queue `Command` addressed to the owning shard
//! (`Service::plan`), and the shard's reply is encoded as Azure's headers and XML
//! (`Service::respond`). Nothing here does I/O or waits: the runtime moves commands between shards.
//!
//! Planning reads the shard's copy of the replicated settings (`queue::Replicas`): stored access
//! policies for a service SAS with `si`, CORS rules for preflights and response headers, and the
//! service properties. Writes of those settings go to their writer shard first
//! (`Step::Replicated`), which decides (a missing queue is 404) and hands back the change the
//! runtime then applies on every other shard.

pub mod cors;
pub mod date;
pub mod ids;
pub mod router;
pub mod settings_xml;
pub mod validate;
pub mod xml;

use std::cell::{Cell, RefCell};
use std::net::IpAddr;

use bytes::{BufMut, BytesMut};

use crate::auth::{
    parse_iso8601_ms, Access, Accounts, AuthFailure, Authenticator, PermissionSet, RequestContext,
    StoredPolicy,
};
use crate::config::{
    API_VERSION_LATEST, GET_VISIBILITY_TIMEOUT_S_DEFAULT, LIST_QUEUES_RESULTS_MAX,
    MESSAGES_PER_GET_MAX, MESSAGE_TTL_S_DEFAULT, VISIBILITY_TIMEOUT_S_MAX,
};
use crate::error::StorageError;
use crate::http::{Request, ResponseWriter};
use crate::queue::{
    self, Command, MessageId, PopReceipt, QueueKey, Replicas, Reply, SignedIdentifier,
    EXPIRATION_NEVER_MS,
};

pub use cors::CorsHeaders;
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
    /// Apply `command` on `shard`, the writer of the setting it changes. When it answers
    /// `Reply::Replicate`, apply that replica on every other shard, then answer `Done`.
    Replicated { shard: usize, command: Command },
    /// Answer with this reply; planning already had everything it needed.
    Answer(Reply),
}

/// A routed request's operation (when routing succeeded) and its step.
#[derive(Debug)]
pub struct Plan {
    pub operation: Option<Operation>,
    pub step: Step,
    /// Why authentication failed, for the log; the client only sees `AuthenticationFailed`
    /// (or the authorization code).
    pub auth_failure: Option<AuthFailure>,
    /// The CORS headers the response carries, whatever its outcome.
    pub cors: Option<CorsHeaders>,
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
    /// SAS windows; `peer` is the client's address for SAS IP ranges; `replicas` is this shard's
    /// copy of the replicated settings.
    pub fn plan(&self, request: &Request, now_ms: u64, peer: IpAddr, replicas: &Replicas) -> Plan {
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
        let rules = &replicas.service_properties(route.account).cors;
        if operation == Operation::Preflight {
            // Answered from the rules alone, without authentication, as Azure does.
            return match cors::preflight(
                request.header_str("origin"),
                request.header_str("access-control-request-method"),
                request.header_str("access-control-request-headers"),
                rules,
            ) {
                Ok(headers) => Plan {
                    operation: Some(operation),
                    step: Step::Answer(Reply::Done),
                    auth_failure: None,
                    cors: Some(headers),
                },
                Err(error) => fail(Some(operation), error),
            };
        }
        let cors =
            cors::actual_request(request.header_str("origin"), request.method.as_str(), rules);
        let plan = move |step, auth_failure| Plan {
            operation: Some(operation),
            step,
            auth_failure,
            cors,
        };
        // The version of the queue ACL whose stored policy authorized the request, if one did.
        let acl_version = Cell::new(None);
        if let Err(failure) = self.authorize(request, &route, now_ms, peer, replicas, &acl_version)
        {
            return plan(
                Step::Fail(StorageError::from(failure.clone())),
                Some(failure),
            );
        }
        if route.secondary && !operation.is_read_only() {
            return plan(
                Step::Fail(StorageError::InsufficientAccountPermissions),
                None,
            );
        }
        match (
            self.command(request, &route, &query, replicas),
            acl_version.get(),
        ) {
            // The owner confirms that the policy used is still the queue's.
            (Ok(Step::Shard { shard, command }), Some(acl_version)) => {
                let command = Command::WithStoredPolicy {
                    acl_version,
                    command: Box::new(command),
                };
                plan(Step::Shard { shard, command }, None)
            }
            (Ok(step), _) => plan(step, None),
            (Err(error), _) => plan(Step::Fail(error), None),
        }
    }

    fn is_account(&self, name: &str) -> bool {
        self.authenticator.borrow().accounts().get(name).is_some()
    }

    /// Authenticates `request`. A service SAS with `si` takes its terms from `replicas`; the
    /// version of the ACL it used is left in `acl_version` for the owner to confirm.
    fn authorize(
        &self,
        request: &Request,
        route: &Route<'_>,
        now_ms: u64,
        peer: IpAddr,
        replicas: &Replicas,
        acl_version: &Cell<Option<u64>>,
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
        let stored_policy = |identifier: &str| {
            let queue = QueueKey {
                account: route.account.to_string(),
                name: route.queue?.to_string(),
            };
            let (version, identifiers) = replicas.queue_acl(&queue)?;
            let policy = identifiers.iter().find(|entry| entry.id == identifier)?;
            acl_version.set(Some(version));
            Some(stored_policy(policy))
        };
        self.authenticator
            .borrow_mut()
            .authenticate(request, &context, access, &stored_policy)
            .map(|_principal| ())
    }

    fn command(
        &self,
        request: &Request,
        route: &Route<'_>,
        query: &Query<'_>,
        replicas: &Replicas,
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
        let owner = |queue: &QueueKey| queue::shard_for(queue, self.shards);
        let command = match route.operation {
            // Planned before authentication, from the CORS rules alone.
            Operation::Preflight => return Err(StorageError::InternalError),
            Operation::GetServiceProperties => {
                return Ok(Step::Answer(Reply::ServiceProperties(
                    replicas.service_properties(route.account).clone(),
                )))
            }
            Operation::SetServiceProperties => {
                return Ok(Step::Replicated {
                    shard: queue::home_shard(route.account, self.shards),
                    command: Command::SetServiceProperties {
                        update: Box::new(settings_xml::service_properties_update(&request.body)?),
                        account,
                    },
                });
            }
            // Azure serves statistics only on the secondary endpoint.
            Operation::GetServiceStats if route.secondary => return Ok(Step::Answer(Reply::Done)),
            Operation::GetServiceStats => return Err(StorageError::InvalidQueryParameterValue),
            Operation::GetQueueAcl => Command::GetQueueAcl {
                queue: queue_key()?,
            },
            Operation::SetQueueAcl => {
                let queue = queue_key()?;
                let identifiers = settings_xml::signed_identifiers(&request.body)?;
                return Ok(Step::Replicated {
                    shard: owner(&queue),
                    command: Command::SetQueueAcl { queue, identifiers },
                });
            }
            Operation::DeleteQueue => {
                // Replicated: the owner also drops the queue's ACL on every shard, if it has one.
                let queue = queue_key()?;
                return Ok(Step::Replicated {
                    shard: owner(&queue),
                    command: Command::DeleteQueue { queue },
                });
            }
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
                // "messagettl must be greater than visibilitytimeout": an invalid value, not an
                // out-of-range one, in the service's recorded answers.
                if ttl_s.is_some_and(|ttl_s| visibility_timeout_s >= ttl_s) {
                    return Err(StorageError::InvalidQueryParameterValue);
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
        let shard = command.queue().map_or(0, owner);
        Ok(Step::Shard { shard, command })
    }

    /// Encodes the response to `request` into `out`. `outcome` is the command's result, or the
    /// error that stopped the request earlier (for `EveryShard`, the merged replies); `cors` the
    /// plan's CORS headers.
    pub fn respond(
        &self,
        request: &Request,
        operation: Option<Operation>,
        cors: Option<&CorsHeaders>,
        outcome: Result<Reply, StorageError>,
        now_ms: u64,
        out: &mut BytesMut,
    ) {
        let request_id = ids::hyphenated(ids::request_id());
        let start = Start {
            request,
            request_id: &request_id,
            now_ms,
            cors,
            head_only: request.method == crate::http::Method::Head,
        };
        let reply = match (operation, outcome) {
            (_, Err(error)) => return self.respond_error(&start, error, out),
            (Some(operation), Ok(reply)) => (operation, reply),
            (None, Ok(_)) => unreachable!("a reply without an operation"),
        };
        match reply {
            (Operation::CreateQueue, Reply::QueueCreated) => {
                self.start(&start, 201, out).finish();
            }
            (Operation::CreateQueue, Reply::QueueExists) => {
                self.start(&start, 204, out).finish();
            }
            (
                Operation::GetQueueMetadata,
                Reply::Metadata {
                    metadata,
                    approximate_messages_count,
                },
            ) => {
                let mut writer = self.start(&start, 200, out);
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
                let mut writer = self.start(&start, 200, out);
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
                let mut writer = self.start(&start, status, out);
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
                let mut writer = self.start(&start, 204, out);
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
                self.start(&start, 204, out).finish();
            }
            (Operation::SetQueueAcl, Reply::Done) => {
                self.start(&start, 204, out).finish();
            }
            (Operation::SetServiceProperties, Reply::Done) => {
                self.start(&start, 202, out).finish();
            }
            (Operation::Preflight, Reply::Done) => {
                self.start(&start, 200, out).finish();
            }
            (Operation::GetQueueAcl, Reply::AccessPolicies(identifiers)) => {
                let mut writer = self.start(&start, 200, out);
                writer.header("Content-Type", b"application/xml");
                settings_xml::signed_identifiers_into(writer.body(), &identifiers);
                writer.finish();
            }
            (Operation::GetServiceProperties, Reply::ServiceProperties(properties)) => {
                let mut writer = self.start(&start, 200, out);
                writer.header("Content-Type", b"application/xml");
                settings_xml::service_properties_into(writer.body(), &properties);
                writer.finish();
            }
            (Operation::GetServiceStats, Reply::Done) => {
                let mut writer = self.start(&start, 200, out);
                writer.header("Content-Type", b"application/xml");
                settings_xml::service_stats_into(writer.body(), now_ms);
                writer.finish();
            }
            (operation, reply) => {
                debug_assert!(false, "{operation:?} answered with {reply:?}");
                self.respond_error(&start, StorageError::InternalError, out);
            }
        }
    }

    fn respond_error(&self, start: &Start<'_>, error: StorageError, out: &mut BytesMut) {
        let mut writer = self.start(start, error.status(), out);
        writer.header("x-ms-error-code", error.code().as_bytes());
        writer.header("Content-Type", b"application/xml");
        xml::error(writer.body(), error, start.request_id, start.now_ms);
        writer.finish();
    }

    /// Writes the status line and the headers every response carries; the CORS ones follow
    /// when the head closes.
    fn start<'o, 'c>(
        &self,
        start: &Start<'c>,
        status: u16,
        out: &'o mut BytesMut,
    ) -> Response<'o, 'c> {
        let Start {
            request,
            request_id,
            now_ms,
            cors,
            head_only,
        } = *start;
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
        Response {
            writer,
            cors,
            head_open: true,
        }
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

/// A response being written: `ResponseWriter` plus the request's CORS headers, which go last
/// in the head because the exposed headers are chosen among the others.
struct Response<'o, 'c> {
    writer: ResponseWriter<'o>,
    cors: Option<&'c CorsHeaders>,
    head_open: bool,
}

impl Response<'_, '_> {
    fn header(&mut self, name: &str, value: &[u8]) {
        self.writer.header(name, value);
    }

    fn header_decimal(&mut self, name: &str, value: u64) {
        self.writer.header_decimal(name, value);
    }

    fn close_head(&mut self) {
        if std::mem::take(&mut self.head_open) {
            if let Some(cors) = self.cors {
                cors.write(&mut self.writer);
            }
        }
    }

    /// Closes the head (CORS headers last) and returns the buffer to encode the body into.
    fn body(&mut self) -> &mut BytesMut {
        self.close_head();
        self.writer.body()
    }

    fn finish(mut self) {
        self.close_head();
        self.writer.finish();
    }
}

/// What every response to one request shares.
#[derive(Clone, Copy)]
struct Start<'a> {
    request: &'a Request,
    request_id: &'a [u8],
    now_ms: u64,
    cors: Option<&'a CorsHeaders>,
    /// HEAD: headers only.
    head_only: bool,
}

fn fail(operation: Option<Operation>, error: StorageError) -> Plan {
    Plan {
        operation,
        step: Step::Fail(error),
        auth_failure: None,
        cors: None,
    }
}

/// A stored access policy in the form SAS verification takes; its texts were validated when the
/// ACL was set, so a field that does not read is one the policy does not have.
fn stored_policy(identifier: &SignedIdentifier) -> StoredPolicy {
    let policy = identifier.access_policy.as_ref();
    let time = |text: Option<&String>| text.and_then(|text| parse_iso8601_ms(text));
    StoredPolicy {
        start_ms: time(policy.and_then(|policy| policy.start.as_ref())),
        expiry_ms: time(policy.and_then(|policy| policy.expiry.as_ref())),
        permissions: policy
            .and_then(|policy| policy.permission.as_deref())
            .and_then(PermissionSet::parse),
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
