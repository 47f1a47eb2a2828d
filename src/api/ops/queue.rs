//! The queue operations: Create and Delete Queue, Get and Set Queue Metadata (metadata as
//! `x-ms-meta-*` headers), Get and Set Queue ACL (stored access policies, replicated to every
//! shard by the queue's owner).

use bytes::BytesMut;

use crate::error::StorageError;
use crate::queue::{Command, Reply};

use super::super::plan::Planning;
use super::super::response::{Responder, Written};
use super::super::{settings_xml, validate, Step};

/// The queue's owner creates it with the request's metadata.
pub fn create_queue(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::CreateQueue {
        queue: planning.queue_key()?,
        metadata: validate::metadata(planning.request)?,
    }))
}

/// 201 for a new queue, 204 for an existing one with the same metadata.
pub fn create_queue_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    match reply {
        Reply::QueueCreated => responder.empty(201, out),
        Reply::QueueExists => responder.empty(204, out),
        other => return Err(other),
    }
    Ok(())
}

/// Replicated: the owner also drops the queue's ACL on every shard, if it has one.
pub fn delete_queue(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    let queue = planning.queue_key()?;
    Ok(Step::Replicated {
        shard: planning.owner(&queue),
        command: Command::DeleteQueue { queue },
    })
}

/// 204.
pub fn delete_queue_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    responder.done(204, reply, out)
}

/// Read on the owner, with the approximate message count.
pub fn get_queue_metadata(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::GetQueueMetadata {
        queue: planning.queue_key()?,
    }))
}

/// 200 with `x-ms-approximate-messages-count` and one `x-ms-meta-*` header per pair.
pub fn get_queue_metadata_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let Reply::Metadata {
        metadata,
        approximate_messages_count,
    } = reply
    else {
        return Err(reply);
    };
    let mut response = responder.start(200, out);
    response.header_decimal(
        "x-ms-approximate-messages-count",
        approximate_messages_count,
    );
    for (key, value) in &metadata {
        response.header(&format!("x-ms-meta-{key}"), value.as_bytes());
    }
    response.finish();
    Ok(())
}

/// Replaces all of the queue's metadata on its owner.
pub fn set_queue_metadata(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::SetQueueMetadata {
        queue: planning.queue_key()?,
        metadata: validate::metadata(planning.request)?,
    }))
}

/// 204.
pub fn set_queue_metadata_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    responder.done(204, reply, out)
}

/// Read on the owner, whose copy is the queue's current ACL.
pub fn get_queue_acl(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::GetQueueAcl {
        queue: planning.queue_key()?,
    }))
}

/// 200 with the `SignedIdentifiers` document, exactly as set.
pub fn get_queue_acl_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let Reply::AccessPolicies(identifiers) = reply else {
        return Err(reply);
    };
    responder.xml(200, out, |body| {
        settings_xml::signed_identifiers_into(body, &identifiers)
    });
    Ok(())
}

/// The owner replaces the ACL and replicates it to every shard.
pub fn set_queue_acl(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    let queue = planning.queue_key()?;
    let identifiers = settings_xml::signed_identifiers(&planning.request.body)?;
    Ok(Step::Replicated {
        shard: planning.owner(&queue),
        command: Command::SetQueueAcl { queue, identifiers },
    })
}

/// 204.
pub fn set_queue_acl_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    responder.done(204, reply, out)
}
