//! The Azure Queue REST API on top of `http/` and `queue/`: a request is routed to an
//! `Operation`, authenticated, validated into a queue `Command` addressed to the owning shard
//! (`Service::plan`), and the outcome is encoded as Azure's headers and XML
//! (`Service::respond`). Nothing here does I/O or waits: the runtime moves commands between
//! shards, and hands back one reply, or one per shard for a step that went to every shard.
//!
//! - `plan.rs`: route → authorize → common parameters, leaving an `Authorized` request.
//! - `response.rs`: what every response shares (status line, Azure headers, errors), CORS last.
//! - `ops/`: each operation's planning and response side by side, by resource:
//!   `service.rs` (List Queues, service properties and stats, CORS preflight), `queue.rs`
//!   (create, delete, metadata, ACL), `messages.rs` (put, get, peek, update, delete, clear).
//!
//! `Service::plan` and `Service::respond`, here, run those steps in order; the files below them
//! never call back up (`ops/` uses `plan.rs` and `response.rs`, not the other way round).
//! - `router.rs`, `validate.rs`, `cors.rs`: routing, stateless validation, CORS rules.
//! - `xml.rs`, `settings_xml.rs`: message bodies and lists; ACL and service-properties documents.
//!
//! Planning reads the shard's copy of the replicated settings (`queue::Replicas`): stored access
//! policies for a service SAS with `si`, CORS rules for preflights and response headers, and the
//! service properties. Writes of those settings go to their writer shard first
//! (`Step::Replicated`), which decides (a missing queue is 404) and hands back the change the
//! runtime then applies on every other shard.

pub mod cors;
pub mod delegation_xml;
pub mod ids;
mod ops;
mod plan;
mod response;
pub mod router;
pub mod settings_xml;
pub mod validate;
pub mod xml;

use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::BytesMut;

use crate::auth::{Accounts, AuthFailure, Authenticator};
use crate::error::StorageError;
use crate::governor::faults::Rule;
use crate::http::{Query, Request};
use crate::lifecycle::Lifecycle;
use crate::queue::{Command, Replicas, Reply};

use response::Responder;

pub use cors::CorsHeaders;
pub use ops::service::ListingEcho;
pub use router::{Operation, Route};

/// What the runtime must do for one request.
#[derive(Debug)]
pub enum Step {
    /// Answer with this error; nothing is executed.
    Fail(StorageError),
    /// Apply `command` on `shard` (the queue's owner) and answer with its reply.
    Shard {
        /// Index of the shard that owns the queue, below the shard count.
        shard: usize,
        /// The validated change or read; it carries owned data, so it can cross the mesh.
        command: Command,
    },
    /// Apply `command` on every shard and answer with every reply (`Outcome::Parts`), which
    /// the response merges (List Queues).
    EveryShard(Command),
    /// Apply `command` on `shard`, the writer of the setting it changes. When it answers
    /// `Reply::Replicate`, apply that replica on every other shard, then answer `Done`.
    Replicated {
        /// Index of the setting's writer shard, which orders concurrent writes of it.
        shard: usize,
        /// The settings write (Set Service Properties, Set Queue ACL).
        command: Command,
    },
    /// Answer with this reply; planning already had everything it needed.
    Answer(Reply),
    /// One of azq's own endpoints that needs the shards (`/_azq/metrics`, `/_azq/faults`).
    Admin(AdminStep),
}

/// What an azq endpoint asks of the runtime (`runtime::control::execute_admin`).
#[derive(Debug)]
pub enum AdminStep {
    /// Answer this; planning already decided (a bad rule).
    Answer(AdminAnswer),
    /// Gather every shard's metrics and render them.
    Metrics,
    /// List the fault rules with how often each fired.
    ListRules,
    /// Add this rule on every shard (the ID is given on execution).
    AddRule(Box<Rule>),
    /// Remove this rule, or every rule, on every shard.
    RemoveRules(Option<String>),
}

/// An azq endpoint's answer: a status and a body that is not Azure's XML.
#[derive(Debug)]
pub struct AdminAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl AdminAnswer {
    /// A JSON answer.
    pub fn json(status: u16, body: String) -> AdminAnswer {
        AdminAnswer {
            status,
            content_type: "application/json",
            body,
        }
    }

    /// `{"error": why}` with `status`.
    pub fn error(status: u16, why: &str) -> AdminAnswer {
        let why = serde_json::to_string(why).unwrap_or_default();
        AdminAnswer::json(status, format!("{{\"error\":{why}}}"))
    }

    /// Prometheus' text exposition.
    pub fn metrics(body: String) -> AdminAnswer {
        AdminAnswer {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body,
        }
    }
}

/// What executing a step gave.
#[derive(Debug)]
pub enum Outcome {
    /// The reply of the one shard the step went to (or planning's own answer or error).
    Reply(Result<Reply, StorageError>),
    /// One reply per shard, in shard order, for `Step::EveryShard`.
    Parts(Vec<Result<Reply, StorageError>>),
    /// An azq endpoint's answer.
    Admin(AdminAnswer),
}

/// A planned request: the step to execute and what its response needs.
#[derive(Debug)]
pub struct Plan {
    /// What the runtime executes; `Step::Fail` when planning already refused the request.
    pub step: Step,
    /// What the response needs from planning, kept so that answering never re-routes.
    pub response: ResponsePlan,
}

/// Everything the response to a request needs besides the request itself and the outcome:
/// what planning learned, so that answering never routes or decodes the request again.
#[derive(Debug, Default)]
pub struct ResponsePlan {
    /// The routed operation; `None` when routing failed (the outcome is then an error).
    pub operation: Option<Operation>,
    /// The CORS headers the response carries, whatever its outcome.
    pub cors: Option<CorsHeaders>,
    /// What the answer repeats of its planning beyond the outcome (List Queues' parameters,
    /// the user delegation key made for the request).
    pub echo: Echo,
    /// Why authentication failed: the log gets it, and the client Azure's
    /// `AuthenticationErrorDetail` for it with the error's code.
    pub auth_failure: Option<AuthFailure>,
}

/// What an answer repeats of its planning, for the operations whose body is not the outcome
/// of a step alone.
#[derive(Debug, Default)]
pub enum Echo {
    /// Nothing: the step's outcome is the whole answer.
    #[default]
    None,
    /// List Queues' parameters and endpoint, echoed in its body.
    Listing(ListingEcho),
    /// The user delegation key Get User Delegation Key answers with; planning made it (boxed:
    /// rare, and it would make every plan larger).
    DelegationKey(Box<crate::auth::delegation::UserDelegationKey>),
}

/// What `GET /_azq/health` reports besides the shard count.
#[derive(Clone, Debug)]
pub struct Health {
    /// Whether every shard serves, or the server is stopping.
    pub lifecycle: Arc<Lifecycle>,
    /// The backend the shards run on (`io_uring` or `portable`).
    pub backend: &'static str,
}

/// The API of one shard: its authenticator (with its SAS cache) and the routing settings.
pub struct Service {
    /// Per-shard and only borrowed inside `plan`, which never waits, so the borrow never spans
    /// another request.
    authenticator: RefCell<Authenticator>,
    /// The accounts, as the authenticator has them: Get User Delegation Key derives its keys
    /// from theirs.
    accounts: Accounts,
    shards: usize,
    host_style_enabled: bool,
    /// `host:port` used in List Queues' ServiceEndpoint when a request has no Host header.
    default_authority: String,
    health: Health,
    /// Whether requests arrive over TLS (the server serves HTTPS), for a SAS `spr` and bearer
    /// tokens.
    secure_transport: bool,
    /// The server's certificate chain in PEM, served at `GET /_azq/cert.pem` (HTTPS only).
    certificate_pem: Option<Arc<str>>,
    /// `--faults-api`: `/_azq/faults` answers (else it is an unknown path).
    faults_api: bool,
}

impl Service {
    /// A service over `accounts` for a server of `shards` shards.
    pub fn new(
        accounts: Accounts,
        shards: usize,
        host_style_enabled: bool,
        default_authority: String,
        health: Health,
    ) -> Self {
        assert!(shards > 0);
        Service {
            authenticator: RefCell::new(Authenticator::new(accounts.clone())),
            accounts,
            shards,
            host_style_enabled,
            default_authority,
            health,
            secure_transport: false,
            certificate_pem: None,
            faults_api: false,
        }
    }

    /// The same service for a server that serves HTTPS with the certificate `certificate_pem`.
    pub fn with_https(mut self, certificate_pem: Arc<str>) -> Self {
        self.secure_transport = true;
        self.certificate_pem = Some(certificate_pem);
        self
    }

    /// The same service accepting bearer tokens when `oauth` says so (`--oauth basic`). Over
    /// plain HTTP every bearer token is still refused, per request, as Azure refuses them.
    pub fn with_oauth(mut self, oauth: Option<crate::config::OAuthLevel>) -> Self {
        match oauth {
            Some(crate::config::OAuthLevel::Basic) => self.authenticator.get_mut().enable_bearer(),
            None => {}
        }
        self
    }

    /// The same service with `/_azq/faults` answering when `faults_api` (`--faults-api`).
    pub fn with_faults_api(mut self, faults_api: bool) -> Self {
        self.faults_api = faults_api;
        self
    }

    /// Routes, authenticates and validates `request` into a plan. `now_ms` is the time used for
    /// SAS windows; `peer` is the client's address for SAS IP ranges; `replicas` is this shard's
    /// copy of the replicated settings.
    pub fn plan(&self, request: &Request, now_ms: u64, peer: IpAddr, replicas: &Replicas) -> Plan {
        if request.path().starts_with(ops::admin::ADMIN_PATH_PREFIX) {
            return ops::admin::plan(request, self.faults_api);
        }
        let Some(query) = Query::parse(request.query()) else {
            return plan::fail(None, StorageError::InvalidQueryParameterValue);
        };
        let route = match self.route(request, &query) {
            Ok(route) => route,
            Err(error) => return plan::fail(None, error),
        };
        if route.operation == Operation::Preflight {
            return ops::service::preflight(request, &route, replicas);
        }
        match self.authorize(request, &query, &route, now_ms, peer, replicas) {
            Ok(authorized) => {
                let planned = ops::step(&authorized.planning);
                authorized.plan(planned)
            }
            Err(plan) => *plan,
        }
    }

    /// Encodes the response to `request` into `out`: `plan` is what planning learned and
    /// `outcome` what executing the plan's step gave (or the error that stopped it earlier).
    pub fn respond(
        &self,
        request: &Request,
        plan: &ResponsePlan,
        outcome: Outcome,
        now_ms: u64,
        out: &mut BytesMut,
    ) {
        let responder = Responder::new(request, now_ms, plan.cors.as_ref());
        let written = match (plan.operation, outcome) {
            (_, Outcome::Admin(answer)) => {
                ops::admin::admin_response(&responder, answer, out);
                Ok(())
            }
            (_, Outcome::Reply(Err(error))) => {
                responder.error_with_detail(error, plan.auth_failure.as_ref(), out);
                Ok(())
            }
            (Some(Operation::Health), Outcome::Reply(Ok(_))) => {
                ops::admin::health_response(&responder, &self.health, self.shards, out);
                Ok(())
            }
            (Some(Operation::Certificate), Outcome::Reply(Ok(_))) => {
                ops::admin::certificate_response(&responder, self.certificate_pem.as_deref(), out);
                Ok(())
            }
            (Some(Operation::ListQueues), Outcome::Parts(parts)) => {
                let listing = match &plan.echo {
                    Echo::Listing(listing) => Some(listing),
                    _ => None,
                };
                ops::service::list_queues_response(&responder, listing, parts, out)
            }
            (Some(Operation::GetUserDelegationKey), Outcome::Reply(Ok(reply))) => {
                ops::service::get_user_delegation_key_response(&responder, &plan.echo, reply, out)
            }
            (Some(operation), Outcome::Reply(Ok(reply))) => {
                ops::response(&responder, operation, reply, out)
            }
            (operation, outcome) => {
                debug_assert!(false, "{operation:?} answered with {outcome:?}");
                responder.error(StorageError::InternalError, out);
                Ok(())
            }
        };
        if let Err(reply) = written {
            debug_assert!(false, "{:?} answered with {reply:?}", plan.operation);
            responder.error(StorageError::InternalError, out);
        }
    }

    fn is_account(&self, name: &str) -> bool {
        self.accounts.get(name).is_some()
    }
}

#[cfg(test)]
mod tests;
