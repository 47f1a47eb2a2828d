//! The message operations: Put, Get and Peek Messages (a `QueueMessagesList` body), Update
//! Message (new receipt and visibility in headers), Delete Message and Clear Messages. All run
//! on the queue's owner.

use bytes::BytesMut;

use crate::error::StorageError;
use crate::limits::{
    GET_VISIBILITY_TIMEOUT_S_DEFAULT, MESSAGES_PER_GET_MAX, MESSAGE_TTL_S_DEFAULT,
    VISIBILITY_TIMEOUT_S_MAX,
};
use crate::queue::{Command, MessageId, PopReceipt, Reply, EXPIRATION_NEVER_MS};
use crate::time;

use super::super::plan::Planning;
use super::super::response::{Responder, Written};
use super::super::{validate, xml, Step};

/// `visibilitytimeout` 0..7 days (default 0) below the TTL; `messagettl` positive or -1
/// (never; so is a TTL past year 9999), default 7 days.
pub fn put_message(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    let queue = planning.queue_key()?;
    let query = planning.query;
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
        Some(ttl_s) if (ttl_s as u64).saturating_mul(1000) >= EXPIRATION_NEVER_MS => None,
        Some(ttl_s) => Some(ttl_s as u64),
    };
    // "messagettl must be greater than visibilitytimeout": an invalid value, not an
    // out-of-range one, in the service's recorded answers.
    if ttl_s.is_some_and(|ttl_s| visibility_timeout_s >= ttl_s) {
        return Err(StorageError::InvalidQueryParameterValue);
    }
    Ok(planning.on_owner(Command::PutMessage {
        queue,
        text: xml::message_text(&planning.request.body)?,
        visibility_timeout_s,
        ttl_s,
    }))
}

/// 201 with the new message's ID, times and first receipt (no text).
pub fn put_message_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    message_list(responder, 201, xml::MessageFields::Put, reply, out)
}

/// `numofmessages` 1..32 (default 1), `visibilitytimeout` 1..7 days (default 30 s).
pub fn get_messages(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::GetMessages {
        queue: planning.queue_key()?,
        count: message_count(planning)?,
        visibility_timeout_s: validate::integer_parameter(
            planning.query,
            "visibilitytimeout",
            1..=VISIBILITY_TIMEOUT_S_MAX as i64,
        )?
        .map_or(GET_VISIBILITY_TIMEOUT_S_DEFAULT, |value| value as u64),
    }))
}

/// 200 with the leased messages, their receipts and texts.
pub fn get_messages_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    message_list(responder, 200, xml::MessageFields::Get, reply, out)
}

/// `numofmessages` 1..32 (default 1).
pub fn peek_messages(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::PeekMessages {
        queue: planning.queue_key()?,
        count: message_count(planning)?,
    }))
}

/// 200 with the visible messages and their texts, without receipts.
pub fn peek_messages_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    message_list(responder, 200, xml::MessageFields::Peek, reply, out)
}

/// Every message of the queue goes.
pub fn clear_messages(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::ClearMessages {
        queue: planning.queue_key()?,
    }))
}

/// 204.
pub fn clear_messages_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    responder.done(204, reply, out)
}

/// `popreceipt` and `visibilitytimeout` (0..7 days) are required; a body replaces the text.
pub fn update_message(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    let queue = planning.queue_key()?;
    let message_id = message_id(planning)?;
    let pop_receipt = pop_receipt(planning)?;
    let visibility_timeout_s = validate::integer_parameter(
        planning.query,
        "visibilitytimeout",
        0..=VISIBILITY_TIMEOUT_S_MAX as i64,
    )?
    .ok_or(StorageError::MissingRequiredQueryParameter)? as u64;
    let body = &planning.request.body;
    let text = if body.is_empty() {
        None
    } else {
        Some(xml::message_text(body)?)
    };
    Ok(planning.on_owner(Command::UpdateMessage {
        queue,
        message_id,
        pop_receipt,
        visibility_timeout_s,
        text,
    }))
}

/// 204 with the new receipt and the time the message becomes visible again.
pub fn update_message_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let Reply::Updated {
        pop_receipt,
        time_next_visible_ms,
    } = reply
    else {
        return Err(reply);
    };
    let mut receipt = BytesMut::with_capacity(PopReceipt::ENCODED_BYTES);
    pop_receipt.encode_into(&mut receipt);
    let mut response = responder.start(204, out);
    response.header("x-ms-popreceipt", &receipt);
    response.header(
        "x-ms-time-next-visible",
        &time::rfc1123(time_next_visible_ms),
    );
    response.finish();
    Ok(())
}

/// `popreceipt` is required and must be the message's current one.
pub fn delete_message(planning: &Planning<'_, '_>) -> Result<Step, StorageError> {
    Ok(planning.on_owner(Command::DeleteMessage {
        queue: planning.queue_key()?,
        message_id: message_id(planning)?,
        pop_receipt: pop_receipt(planning)?,
    }))
}

/// 204.
pub fn delete_message_response(
    responder: &Responder<'_>,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    responder.done(204, reply, out)
}

/// A `QueueMessagesList` with `status`, each message with `fields`.
fn message_list(
    responder: &Responder<'_>,
    status: u16,
    fields: xml::MessageFields,
    reply: Reply,
    out: &mut BytesMut,
) -> Written {
    let Reply::Messages(messages) = reply else {
        return Err(reply);
    };
    responder.xml(status, out, |body| xml::messages(body, &messages, fields));
    Ok(())
}

fn message_count(planning: &Planning<'_, '_>) -> Result<u32, StorageError> {
    Ok(validate::integer_parameter(
        planning.query,
        "numofmessages",
        1..=i64::from(MESSAGES_PER_GET_MAX),
    )?
    .unwrap_or(1) as u32)
}

/// The message ID of the URL; one that is not a UUID names no message.
fn message_id(planning: &Planning<'_, '_>) -> Result<MessageId, StorageError> {
    let raw = planning.route.message_id.ok_or(StorageError::InvalidUri)?;
    uuid::Uuid::try_parse(raw)
        .map(|id| MessageId(id.as_u128()))
        .map_err(|_| StorageError::MessageNotFound)
}

fn pop_receipt(planning: &Planning<'_, '_>) -> Result<PopReceipt, StorageError> {
    let raw = planning
        .query
        .get("popreceipt")
        .ok_or(StorageError::MissingRequiredQueryParameter)?;
    PopReceipt::decode(raw).ok_or(StorageError::InvalidQueryParameterValue)
}
