//! The machinery of planning, the first half of the request path: routing (method, host, path,
//! query) to an operation, authentication, and the checks every operation shares (the secondary
//! endpoint is read-only, `timeout`), which leave an `Authorized` request for the operation's own
//! planning in `ops/`. `Service::plan` (api/mod.rs) runs the steps in order. The query is decoded
//! once, before routing; whatever the response needs from the request travels in the plan's
//! `ResponsePlan`.

use std::cell::Cell;
use std::net::IpAddr;

use crate::auth::{Access, Accounts, AuthFailure, PermissionSet, RequestContext, StoredPolicy};
use crate::error::StorageError;
use crate::http::{KnownHeader, Query, Request};
use crate::operation::Operation;
use crate::queue::{self, Command, QueueKey, Replicas, SignedIdentifier};
use crate::time::parse_iso8601_ms;

use super::router::{self, Route};
use super::{cors, validate, Echo, Plan, ResponsePlan, Service, Step};

/// What an operation's planning reads: the request, where it goes, its decoded query, this
/// shard's copy of the replicated settings and the shard count.
pub(super) struct Planning<'a, 'q> {
    pub request: &'a Request,
    pub route: &'a Route<'a>,
    /// Its own lifetime: a query's pairs are kept inline, which makes `Query` invariant.
    pub query: &'a Query<'q>,
    pub replicas: &'a Replicas,
    pub shards: usize,
    /// `host:port` the client addressed (its `Host` header, else the listener's address).
    pub authority: &'a str,
    /// Now, in ms since the Unix epoch, from the shard's clock.
    pub now_ms: u64,
    /// The accounts and their keys (Get User Delegation Key derives from them).
    pub accounts: &'a Accounts,
}

impl Planning<'_, '_> {
    /// The queue the URL names, validated.
    pub fn queue_key(&self) -> Result<QueueKey, StorageError> {
        let name = self.route.queue.ok_or(StorageError::InvalidUri)?;
        validate::queue_name(name)?;
        Ok(QueueKey {
            account: self.route.account.to_string(),
            name: name.to_string(),
        })
    }

    /// The shard that owns `queue`.
    pub fn owner(&self, queue: &QueueKey) -> usize {
        queue::shard_for(queue, self.shards)
    }

    /// `command` for the shard that owns its queue.
    pub fn on_owner(&self, command: Command) -> Step {
        let shard = command.queue().map_or(0, |queue| self.owner(queue));
        Step::Shard { shard, command }
    }
}

/// A request that passed authentication and the common checks, ready for its operation.
pub(super) struct Authorized<'a, 'q> {
    pub planning: Planning<'a, 'q>,
    response: ResponsePlan,
    /// The version of the queue ACL whose stored policy authorized the request, if one did.
    acl_version: Option<u64>,
}

impl Authorized<'_, '_> {
    /// The plan, once the operation planned its step (and what its answer echoes).
    pub fn plan(self, planned: Result<(Step, Echo), StorageError>) -> Plan {
        let mut response = self.response;
        let step = match planned {
            // The owner confirms that the policy used is still the queue's.
            Ok((Step::Shard { shard, command }, _)) => match self.acl_version {
                Some(acl_version) => Step::Shard {
                    shard,
                    command: Command::WithStoredPolicy {
                        acl_version,
                        command: Box::new(command),
                    },
                },
                None => Step::Shard { shard, command },
            },
            Ok((step, echo)) => {
                response.echo = echo;
                step
            }
            Err(error) => Step::Fail(error),
        };
        Plan { step, response }
    }
}

impl Service {
    /// Routes `request`.
    pub(super) fn route<'r>(
        &self,
        request: &'r Request,
        query: &Query<'_>,
    ) -> Result<Route<'r>, StorageError> {
        router::route(
            request.method,
            request.known_str(KnownHeader::Host),
            request.path(),
            query,
            |name| self.is_account(name),
            self.host_style_enabled,
        )
    }

    /// Authenticates `request` and runs the checks every operation shares; a failure is the plan
    /// (boxed: failures are rare, and a plan is large). `now_ms` is the time used for SAS windows,
    /// `peer` the client's address for SAS IP ranges, `replicas` this shard's copy of the
    /// replicated settings.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn authorize<'a, 'q>(
        &'a self,
        request: &'a Request,
        query: &'a Query<'q>,
        route: &'a Route<'a>,
        now_ms: u64,
        peer: IpAddr,
        replicas: &'a Replicas,
    ) -> Result<Authorized<'a, 'q>, Box<Plan>> {
        let operation = route.operation;
        let response = ResponsePlan {
            operation: Some(operation),
            cors: cors::actual_request(
                request.known_str(KnownHeader::Origin),
                request.method.as_str(),
                &replicas.service_properties(route.account).cors,
            ),
            ..ResponsePlan::default()
        };
        let acl_version = Cell::new(None);
        if let Err(failure) =
            self.authenticate(request, query, route, now_ms, peer, replicas, &acl_version)
        {
            return Err(Box::new(Plan {
                step: Step::Fail(StorageError::from(failure.clone())),
                response: ResponsePlan {
                    auth_failure: Some(failure),
                    ..response
                },
            }));
        }
        let common = if route.secondary && !operation.is_read_only() {
            Err(StorageError::InsufficientAccountPermissions)
        } else {
            validate::integer_parameter(query, "timeout", 0..=i64::MAX).map(|_| ())
        };
        if let Err(error) = common {
            return Err(Box::new(Plan {
                step: Step::Fail(error),
                response,
            }));
        }
        Ok(Authorized {
            planning: Planning {
                request,
                route,
                query,
                replicas,
                shards: self.shards,
                authority: request
                    .known_str(KnownHeader::Host)
                    .unwrap_or(&self.default_authority),
                now_ms,
                accounts: &self.accounts,
            },
            response,
            acl_version: acl_version.get(),
        })
    }

    /// Authenticates `request`. A service SAS with `si` takes its terms from `replicas`; the
    /// version of the ACL it used is left in `acl_version` for the owner to confirm.
    #[allow(clippy::too_many_arguments)]
    fn authenticate(
        &self,
        request: &Request,
        query: &Query<'_>,
        route: &Route<'_>,
        now_ms: u64,
        peer: IpAddr,
        replicas: &Replicas,
        acl_version: &Cell<Option<u64>>,
    ) -> Result<(), AuthFailure> {
        let access = match route.operation {
            Operation::Preflight | Operation::Health | Operation::Certificate => return Ok(()),
            Operation::GetServiceProperties => Access::GET_SERVICE_PROPERTIES,
            Operation::SetServiceProperties => Access::SET_SERVICE_PROPERTIES,
            Operation::GetServiceStats => Access::GET_SERVICE_STATS,
            Operation::GetUserDelegationKey => Access::GET_USER_DELEGATION_KEY,
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
        let context = RequestContext {
            account_name: route.account,
            secondary: route.secondary,
            queue_name: route.queue,
            now_ms,
            client_ip: peer,
            secure_transport: self.secure_transport,
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
            .authenticate(request, query, &context, access, &stored_policy)
            .map(|_principal| ())
    }
}

/// The plan of a request that failed before it had an operation's step.
pub(super) fn fail(operation: Option<Operation>, error: StorageError) -> Plan {
    Plan {
        step: Step::Fail(error),
        response: ResponsePlan {
            operation,
            ..ResponsePlan::default()
        },
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
