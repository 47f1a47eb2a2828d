//! Each REST operation's two halves side by side: its planning (parameters, headers and body
//! into a `Step`) and its response (the reply into headers and body), one file per resource the
//! way mini-redis keeps one file per command. The two functions here dispatch by operation, after
//! `plan.rs` and `response.rs` have done what every operation shares.

pub(super) mod admin;
pub(super) mod console;
pub(super) mod messages;
pub(super) mod queue;
pub(super) mod service;

use bytes::BytesMut;

use crate::error::StorageError;
use crate::queue::Reply;

use super::plan::Planning;
use super::response::{Responder, Written};
use super::{Echo, Operation, Step};

/// The step of an authorized request's operation, and what its answer echoes.
pub(super) fn step(planning: &Planning<'_, '_>) -> Result<(Step, Echo), StorageError> {
    let step = match planning.route.operation {
        // Answered before authentication: from the CORS rules alone, or by azq itself.
        Operation::Preflight | Operation::Health | Operation::Certificate => {
            Err(StorageError::InternalError)
        }
        Operation::GetServiceProperties => Ok(service::get_service_properties(planning)),
        Operation::SetServiceProperties => service::set_service_properties(planning),
        Operation::GetServiceStats => service::get_service_stats(planning),
        Operation::GetUserDelegationKey => return service::get_user_delegation_key(planning),
        Operation::ListQueues => {
            return service::list_queues(planning).map(|(step, echo)| (step, Echo::Listing(echo)))
        }
        Operation::CreateQueue => queue::create_queue(planning),
        Operation::DeleteQueue => queue::delete_queue(planning),
        Operation::GetQueueMetadata => queue::get_queue_metadata(planning),
        Operation::SetQueueMetadata => queue::set_queue_metadata(planning),
        Operation::GetQueueAcl => queue::get_queue_acl(planning),
        Operation::SetQueueAcl => queue::set_queue_acl(planning),
        Operation::PutMessage => messages::put_message(planning),
        Operation::GetMessages => messages::get_messages(planning),
        Operation::PeekMessages => messages::peek_messages(planning),
        Operation::ClearMessages => messages::clear_messages(planning),
        Operation::UpdateMessage => messages::update_message(planning),
        Operation::DeleteMessage => messages::delete_message(planning),
    };
    step.map(|step| (step, Echo::None))
}

/// The successful response of `operation` to `reply`.
pub(super) fn response(
    responder: &Responder<'_>,
    operation: Operation,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    match operation {
        Operation::Preflight => service::preflight_response(responder, reply, out),
        Operation::GetServiceProperties => {
            service::get_service_properties_response(responder, reply, out)
        }
        Operation::SetServiceProperties => {
            service::set_service_properties_response(responder, reply, out)
        }
        Operation::GetServiceStats => service::get_service_stats_response(responder, reply, out),
        // List Queues answers with every shard's part (`Outcome::Parts`), never one reply;
        // health from the server's state, not a reply, and a user delegation key from what
        // planning made (`Service::respond`).
        Operation::ListQueues
        | Operation::Health
        | Operation::Certificate
        | Operation::GetUserDelegationKey => Err(reply),
        Operation::CreateQueue => queue::create_queue_response(responder, reply, out),
        Operation::DeleteQueue => queue::delete_queue_response(responder, reply, out),
        Operation::GetQueueMetadata => queue::get_queue_metadata_response(responder, reply, out),
        Operation::SetQueueMetadata => queue::set_queue_metadata_response(responder, reply, out),
        Operation::GetQueueAcl => queue::get_queue_acl_response(responder, reply, out),
        Operation::SetQueueAcl => queue::set_queue_acl_response(responder, reply, out),
        Operation::PutMessage => messages::put_message_response(responder, reply, out),
        Operation::GetMessages => messages::get_messages_response(responder, reply, out),
        Operation::PeekMessages => messages::peek_messages_response(responder, reply, out),
        Operation::ClearMessages => messages::clear_messages_response(responder, reply, out),
        Operation::UpdateMessage => messages::update_message_response(responder, reply, out),
        Operation::DeleteMessage => messages::delete_message_response(responder, reply, out),
    }
}
