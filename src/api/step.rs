//! What planning hands the runtime and what it gets back: a `Plan` (the `Step` to execute and the
//! `ResponsePlan`, what the response needs from planning), the `Outcome` of executing it, and
//! azq's own endpoints' steps and answers (`AdminStep`, `AdminAnswer`). Plain data, below every
//! file of `api/` that plans or answers, so none of them needs another's to name them.

use crate::auth::delegation::UserDelegationKey;
use crate::auth::AuthFailure;
use crate::error::StorageError;
use crate::governor::faults::Rule;
use crate::operation::Operation;
use crate::queue::{Command, MessageId, PageQuery, QueueKey, QueuesQuery, Reply};

use super::cors::CorsHeaders;

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

impl Step {
    /// Whether executing this step on shard `here` completes without waiting for anything:
    /// a command for this shard's own queue, or an answer planned already (nothing crosses the
    /// mesh, no admin step gathers from other shards).
    pub fn runs_at_once(&self, here: usize) -> bool {
        match self {
            Step::Fail(_) | Step::Answer(_) => true,
            Step::Shard { shard, .. } => *shard == here,
            Step::EveryShard(_) | Step::Replicated { .. } | Step::Admin(_) => false,
        }
    }
}

/// What an azq endpoint asks of the runtime (`runtime::admin::execute_admin`).
#[derive(Debug)]
pub enum AdminStep {
    /// Answer this; planning already decided (a bad rule).
    Answer(AdminAnswer),
    /// Gather every shard's metrics and render them.
    Metrics,
    /// List the fault rules with how often each fired: those of these accounts (and those of
    /// no account), or every rule for `None`.
    ListRules(Option<Vec<String>>),
    /// Add this rule on every shard (the ID is given on execution).
    AddRule(Box<Rule>),
    /// Remove this rule, or every rule, on every shard: only rules of these accounts, or any
    /// rule for `None`.
    RemoveRules(Option<String>, Option<Vec<String>>),
    /// `GET /_azq/inspect`: the queues with their counts, from every shard, in order.
    InspectQueues(QueuesQuery),
    /// `GET /_azq/inspect/{account}/{queue}`: a page of one queue's messages, from its owner.
    InspectQueue(PageQuery),
    /// `GET /_azq/stats`: the console's history.
    Stats {
        /// The last this many seconds (60, 600, 3600).
        range_s: u64,
        /// Only points after this time, ms.
        since_ms: u64,
    },
    /// `POST /_azq/reset` (admin): delete queues, with their messages and ACLs, on every
    /// shard; with no glob, also the accounts' service properties.
    Reset {
        /// Only these accounts, when given.
        accounts: Option<Vec<String>>,
        /// Only queues whose names match this glob, when given.
        glob: Option<String>,
    },
    /// `/_azq/admin/{account}/{queue}…` (admin): one of the console's actions.
    Console {
        /// The queue acted on.
        queue: QueueKey,
        /// What to do.
        action: ConsoleAction,
    },
}

/// What the console asks of a queue (with `--admin`).
#[derive(Debug)]
pub enum ConsoleAction {
    /// Create the queue (no metadata).
    Create,
    /// Put `count` messages with this text (the console's Send and Generate).
    Send {
        /// The text, stored as given.
        text: bytes::Bytes,
        /// Seconds before they become visible.
        visibility_delay_s: u64,
        /// Seconds they live; `None`: forever.
        ttl_s: Option<u64>,
        /// How many, up to `ADMIN_GENERATE_MESSAGES_MAX`.
        count: u64,
    },
    /// Get Messages, as a consumer would (the dequeue counts rise).
    Receive {
        /// 1 to 32.
        count: u32,
        /// Seconds the received messages stay leased.
        visibility_timeout_s: u64,
    },
    /// Delete one message whatever its lease.
    Delete(MessageId),
    /// Clear Messages.
    Clear,
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
    /// Further headers (the console's Content-Security-Policy, a session's cookie).
    pub headers: Vec<(&'static str, String)>,
}

impl AdminAnswer {
    /// A JSON answer.
    pub fn json(status: u16, body: String) -> AdminAnswer {
        AdminAnswer {
            status,
            content_type: "application/json",
            body,
            headers: Vec::new(),
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
            headers: Vec::new(),
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
    /// Errors are the table service's OData JSON rather than XML (the table port's probes).
    pub json_errors: bool,
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
    DelegationKey(Box<UserDelegationKey>),
}

/// What List Queues' response repeats of its request: the parameters as sent and the endpoint
/// the client addressed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListingEcho {
    /// `http://host[:port]/` (host-style) or `http://host[:port]/account/` (path-style).
    pub service_endpoint: String,
    /// `prefix` as sent: only names that start with it are listed; echoed as `<Prefix>`.
    pub prefix: Option<String>,
    /// `marker` as sent (a previous page's `NextMarker`): the listing starts at this name.
    pub marker: Option<String>,
    /// `maxresults` as sent.
    pub results_max_text: Option<String>,
    /// The page size: `maxresults` capped at `LIST_QUEUES_RESULTS_MAX`.
    pub results_max: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueKey;

    #[test]
    fn runs_at_once_only_without_the_mesh_or_admin() {
        let queue = QueueKey {
            account: "devstoreaccount1".to_string(),
            name: "q".to_string(),
        };
        let command = || Command::ClearMessages {
            queue: queue.clone(),
        };
        let here = 1;
        assert!(Step::Fail(StorageError::InvalidUri).runs_at_once(here));
        assert!(Step::Answer(Reply::Done).runs_at_once(here));
        let local = Step::Shard {
            shard: here,
            command: command(),
        };
        assert!(local.runs_at_once(here));
        let remote = Step::Shard {
            shard: 0,
            command: command(),
        };
        assert!(!remote.runs_at_once(here));
        assert!(!Step::EveryShard(command()).runs_at_once(here));
        let replicated = Step::Replicated {
            shard: here,
            command: command(),
        };
        assert!(!replicated.runs_at_once(here));
        assert!(!Step::Admin(AdminStep::Metrics).runs_at_once(here));
    }
}
