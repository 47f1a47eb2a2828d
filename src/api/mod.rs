//! The Azure Queue REST API on top of `http/` and `queue/`: a request is routed to an
//! `Operation`, authenticated, validated into a queue `Command` addressed to the owning shard
//! (`Service::plan`), and the outcome is encoded as Azure's headers and XML
//! (`Service::respond`). Nothing here does I/O or waits: the runtime moves commands between
//! shards, and hands back one reply, or one per shard for a step that went to every shard.
//!
//! - `plan.rs`: route → authorize → common parameters, leaving an `Authorized` request.
//! - `response.rs`: what every response shares (status line, Azure headers, errors), CORS last.
//! - `ops/`: each operation's planning and response side by side, by resource:
//!   `service.rs` (List Queues, service properties and stats, Get User Delegation Key, CORS
//!   preflight), `queue.rs` (create, delete, metadata, ACL), `messages.rs` (put, get, peek,
//!   update, delete, clear).
//!
//! `Service::plan` and `Service::respond`, here, run those steps in order; the files below them
//! never call back up (`ops/` uses `plan.rs` and `response.rs`, not the other way round), and
//! nothing they use is defined here: this file only runs the steps and re-exports.
//! - `service.rs`: the `Service` of one shard (its authenticator, routing settings, health);
//!   `step.rs`: the plan, its step and the outcome, the data that crosses to the runtime.
//! - `router.rs`, `validate.rs`, `cors.rs`: routing, stateless validation, CORS rules.
//! - `xml.rs`, `settings_xml.rs`: message bodies and lists; ACL and service-properties documents.
//! - `delegation_xml.rs`: Get User Delegation Key's `KeyInfo` request and `UserDelegationKey`.
//! - `probe.rs`: the blob and table ports of `azurite` mode, which answer readiness probes only.
//!
//! Planning reads the shard's copy of the replicated settings (`queue::Replicas`): stored access
//! policies for a service SAS with `si`, CORS rules for preflights and response headers, and the
//! service properties. Writes of those settings go to their writer shard first
//! (`Step::Replicated`), which decides (a missing queue is 404) and hands back the change the
//! runtime then applies on every other shard.

pub mod control_access;
pub mod cors;
pub mod delegation_xml;
pub mod ids;
mod ops;
mod plan;
pub mod probe;
mod response;
pub mod router;
mod service;
pub mod settings_xml;
mod step;
pub mod validate;
pub mod xml;

use std::net::IpAddr;

use bytes::BytesMut;

use crate::error::StorageError;
use crate::http::{Query, Request};
use crate::queue::Replicas;

use response::Responder;

pub use crate::operation::Operation;
pub use cors::CorsHeaders;
pub use probe::Surface;
pub use router::Route;
pub use service::{Health, Service};
pub use step::{
    AdminAnswer, AdminStep, ConsoleAction, Echo, ListingEcho, Outcome, Plan, ResponsePlan, Step,
};

impl Service {
    /// The plan of a request that arrived on `surface`'s port: the queue API, or the blob and
    /// table ports' readiness probes (`probe`).
    pub fn plan_on(
        &self,
        surface: Surface,
        request: &Request,
        now_ms: u64,
        peer: IpAddr,
        replicas: &Replicas,
    ) -> Plan {
        match surface {
            Surface::Queue => self.plan(request, now_ms, peer, replicas),
            Surface::Blob | Surface::Table => self.plan_probe(surface, request, now_ms, peer),
        }
    }

    /// Routes, authenticates and validates `request` into a plan. `now_ms` is the time used for
    /// SAS windows; `peer` is the client's address for SAS IP ranges; `replicas` is this shard's
    /// copy of the replicated settings.
    pub fn plan(&self, request: &Request, now_ms: u64, peer: IpAddr, replicas: &Replicas) -> Plan {
        if request.path().starts_with(ops::admin::ADMIN_PATH_PREFIX) {
            return ops::admin::plan(request, self, now_ms, peer);
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
            (_, Outcome::Reply(Err(error))) if plan.json_errors => {
                responder.table_error(error, out);
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

    /// Answers a request the HTTP layer could not parse (there is no `Request` to echo from).
    pub fn respond_unparsed(error: StorageError, now_ms: u64, out: &mut BytesMut) {
        response::respond_unparsed(error, now_ms, out)
    }
}

#[cfg(test)]
mod tests;
