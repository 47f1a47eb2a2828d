//! The commands a shard's queue state executes and the replies it gives: the only interface between
//! the request path (`api/`) and the state (`queue/`). Commands are plain owned data (`Send`), so the
//! same value is applied locally or shipped to the owning shard, and a log could replay them.

use std::sync::Arc;

use bytes::Bytes;

use super::replicas::{
    Replica, ServiceProperties, ServicePropertiesUpdate, SignedIdentifier, SignedIdentifiers,
};

/// Identifies a queue: the account it belongs to and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    pub account: String,
    pub name: String,
}

/// A queue's metadata: `(name, value)` pairs with names as the client spelt them, unique by
/// case-insensitive name, sorted by lowercased name.
pub type Metadata = Vec<(String, String)>;

/// What a shard is asked to do. Times are in the `now_ms` passed beside the command.
#[derive(Clone, Debug)]
pub enum Command {
    CreateQueue {
        queue: QueueKey,
        metadata: Metadata,
    },
    DeleteQueue {
        queue: QueueKey,
    },
    GetQueueMetadata {
        queue: QueueKey,
    },
    SetQueueMetadata {
        queue: QueueKey,
        metadata: Metadata,
    },
    /// One shard's part of List Queues: its queues of `account` whose names start with `prefix`
    /// and sort after `marker` (or at it: the marker is the first name of the next page).
    ListQueues {
        account: String,
        prefix: String,
        marker: String,
        results_max: usize,
        include_metadata: bool,
    },
    PutMessage {
        queue: QueueKey,
        text: Bytes,
        visibility_timeout_s: u64,
        /// `None`: the message never expires (`messagettl=-1`).
        ttl_s: Option<u64>,
    },
    GetMessages {
        queue: QueueKey,
        count: u32,
        visibility_timeout_s: u64,
    },
    PeekMessages {
        queue: QueueKey,
        count: u32,
    },
    UpdateMessage {
        queue: QueueKey,
        message_id: MessageId,
        pop_receipt: PopReceipt,
        visibility_timeout_s: u64,
        text: Option<Bytes>,
    },
    DeleteMessage {
        queue: QueueKey,
        message_id: MessageId,
        pop_receipt: PopReceipt,
    },
    ClearMessages {
        queue: QueueKey,
    },
    /// Replaces a queue's stored access policies. Runs on the queue's owner, which answers
    /// `Reply::Replicate` for the other shards.
    SetQueueAcl {
        queue: QueueKey,
        identifiers: Vec<SignedIdentifier>,
    },
    GetQueueAcl {
        queue: QueueKey,
    },
    /// Replaces the elements of an account's service properties that `update` carries. Runs on
    /// the account's home shard, which answers `Reply::Replicate` for the other shards.
    SetServiceProperties {
        account: String,
        /// Boxed: rare and large, it would otherwise make every command bigger.
        update: Box<ServicePropertiesUpdate>,
    },
    /// Stores a change another shard made to a replicated setting.
    ApplyReplica(Replica),
    /// `command`, authorized by a service SAS whose terms came from the queue's ACL of version
    /// `acl_version` (in the copy of the shard that authorized it). Refused with
    /// `AuthenticationFailed` unless that is still the queue's ACL on its owner.
    WithStoredPolicy {
        acl_version: u64,
        command: Box<Command>,
    },
}

impl Command {
    /// The queue the command acts on; `None` for commands about an account or every shard.
    pub fn queue(&self) -> Option<&QueueKey> {
        match self {
            Command::CreateQueue { queue, .. }
            | Command::DeleteQueue { queue }
            | Command::GetQueueMetadata { queue }
            | Command::SetQueueMetadata { queue, .. }
            | Command::PutMessage { queue, .. }
            | Command::GetMessages { queue, .. }
            | Command::PeekMessages { queue, .. }
            | Command::UpdateMessage { queue, .. }
            | Command::DeleteMessage { queue, .. }
            | Command::ClearMessages { queue }
            | Command::SetQueueAcl { queue, .. }
            | Command::GetQueueAcl { queue } => Some(queue),
            Command::WithStoredPolicy { command, .. } => command.queue(),
            Command::ListQueues { .. }
            | Command::SetServiceProperties { .. }
            | Command::ApplyReplica(_) => None,
        }
    }
}

/// A successful command's result.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Create Queue made a new queue (201).
    QueueCreated,
    /// Create Queue found the queue with identical metadata (204).
    QueueExists,
    /// Delete Queue, Set Metadata, Delete Message, Clear Messages (204); a stored replica.
    Done,
    /// Get Queue Metadata.
    Metadata {
        metadata: Metadata,
        approximate_messages_count: u64,
    },
    /// One shard's List Queues part, sorted by name.
    Queues(Vec<QueueListing>),
    /// Put Message (one message, with its receipt), Get Messages, Peek Messages (no receipts).
    Messages(Vec<MessageView>),
    /// Update Message.
    Updated {
        pop_receipt: PopReceipt,
        time_next_visible_ms: u64,
    },
    /// Get Queue ACL.
    AccessPolicies(SignedIdentifiers),
    /// Get Service Properties.
    ServiceProperties(Arc<ServiceProperties>),
    /// The writer of a replicated setting changed it (Set Queue ACL, Set Service Properties,
    /// Delete Queue of a queue with an ACL): the runtime applies the replica on every other
    /// shard, then the request succeeds. Boxed: rare and large, it would otherwise make every
    /// reply bigger.
    Replicate(Box<Replica>),
}

/// One queue in a List Queues result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueListing {
    pub name: String,
    /// Present when the listing asked for metadata.
    pub metadata: Option<Metadata>,
}

/// A message as returned to the client; `text` shares the stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageView {
    pub message_id: MessageId,
    pub insertion_ms: u64,
    /// `EXPIRATION_NEVER_MS` for messages put with `messagettl=-1`.
    pub expiration_ms: u64,
    /// Present for Put and Get, absent for Peek.
    pub pop_receipt: Option<PopReceipt>,
    pub time_next_visible_ms: u64,
    pub dequeue_count: u32,
    /// Shares the stored bytes; empty in Put's reply, whose response lists no text.
    pub text: Bytes,
}

/// ExpirationTime of a message that never expires: `Fri, 31 Dec 9999 23:59:59 GMT`.
pub const EXPIRATION_NEVER_MS: u64 = 253_402_300_799_000;

/// A message ID: a UUID, rendered in its hyphenated lowercase form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u128);

/// A pop receipt: where the message lives and which lease of it the holder owns.
/// Encoded for the client as base64 of 12 little-endian bytes (slot, generation, lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PopReceipt {
    /// The message's slab slot.
    pub slot: u32,
    /// The slot's generation when the message was stored; a reused slot has another.
    pub generation: u32,
    /// Which lease of the message this receipt belongs to; each Get and Update makes a new one.
    pub lease: u32,
}

/// Length of a message ID in its hyphenated form (`8-4-4-4-12` hex digits).
const MESSAGE_ID_TEXT_BYTES: usize = 36;
/// Where the hyphenated form has its hyphens.
const MESSAGE_ID_HYPHEN_POSITIONS: [usize; 4] = [8, 13, 18, 23];

impl MessageId {
    /// Parses the hyphenated form, hex digits in either case. Anything else (braces, a `urn:`
    /// prefix, the simple 32-digit form, stray characters) is `None`: Azure only ever hands out
    /// the hyphenated form, so a client that sends another one did not get it from us.
    pub fn parse(text: &str) -> Option<MessageId> {
        let bytes = text.as_bytes();
        if bytes.len() != MESSAGE_ID_TEXT_BYTES {
            return None;
        }
        let mut value: u128 = 0;
        for (position, &byte) in bytes.iter().enumerate() {
            if MESSAGE_ID_HYPHEN_POSITIONS.contains(&position) {
                if byte != b'-' {
                    return None;
                }
                continue;
            }
            let digit = (byte as char).to_digit(16)?;
            value = (value << 4) | u128::from(digit);
        }
        Some(MessageId(value))
    }
}

impl std::fmt::Display for MessageId {
    /// The hyphenated lowercase form, written from a stack buffer (no allocation).
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [b'-'; MESSAGE_ID_TEXT_BYTES];
        let mut remaining = self.0;
        for position in (0..MESSAGE_ID_TEXT_BYTES).rev() {
            if MESSAGE_ID_HYPHEN_POSITIONS.contains(&position) {
                continue;
            }
            text[position] = DIGITS[(remaining & 0xf) as usize];
            remaining >>= 4;
        }
        // Every byte written above is an ASCII hex digit or a hyphen.
        let text = std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?;
        formatter.write_str(text)
    }
}

impl PopReceipt {
    /// Bytes of the receipt before base64: slot, generation and lease, each a little-endian `u32`.
    const RAW_BYTES: usize = 12;
    /// Length of the encoded receipt: 12 bytes are exactly four base64 groups, so no padding.
    pub const ENCODED_BYTES: usize = 16;

    /// Appends the receipt's base64 form (standard alphabet, 16 characters) to `out` without
    /// building an intermediate `String`.
    pub fn encode_into(&self, out: &mut impl bytes::BufMut) {
        use base64::Engine as _;
        let raw = self.to_raw();
        let mut encoded = [0u8; Self::ENCODED_BYTES];
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(raw, &mut encoded)
            .unwrap_or(0);
        // 12 bytes always encode to exactly 16 characters; anything else is a bug in this function.
        assert_eq!(written, Self::ENCODED_BYTES);
        out.put_slice(&encoded);
    }

    /// Decodes a receipt as sent by a client (after URL decoding). `None` for anything that is
    /// not exactly 16 characters of canonical standard base64; the api layer answers
    /// 400 `InvalidQueryParameterValue` for it. A well-formed receipt that points at no message
    /// is the state's business (404 `MessageNotFound`), not this function's.
    pub fn decode(text: &str) -> Option<PopReceipt> {
        use base64::Engine as _;
        if text.len() != Self::ENCODED_BYTES {
            return None;
        }
        // Decoding 16 characters needs room for 12 bytes; the engine wants slack for its estimate.
        let mut raw = [0u8; Self::RAW_BYTES + 3];
        let decoded = base64::engine::general_purpose::STANDARD
            .decode_slice(text.as_bytes(), &mut raw)
            .ok()?;
        if decoded != Self::RAW_BYTES {
            return None;
        }
        let word = |index: usize| {
            u32::from_le_bytes([
                raw[index * 4],
                raw[index * 4 + 1],
                raw[index * 4 + 2],
                raw[index * 4 + 3],
            ])
        };
        Some(PopReceipt {
            slot: word(0),
            generation: word(1),
            lease: word(2),
        })
    }

    fn to_raw(self) -> [u8; Self::RAW_BYTES] {
        let mut raw = [0u8; Self::RAW_BYTES];
        raw[0..4].copy_from_slice(&self.slot.to_le_bytes());
        raw[4..8].copy_from_slice(&self.generation.to_le_bytes());
        raw[8..12].copy_from_slice(&self.lease.to_le_bytes());
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_id_display_is_hyphenated_lowercase() {
        let id = MessageId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(id.to_string(), "01234567-89ab-cdef-fedc-ba9876543210");
        assert_eq!(
            MessageId(0).to_string(),
            "00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(
            MessageId(u128::MAX).to_string(),
            "ffffffff-ffff-ffff-ffff-ffffffffffff"
        );
    }

    #[test]
    fn message_id_parse_table() {
        let valid = [
            (
                "01234567-89ab-cdef-fedc-ba9876543210",
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            ),
            (
                "01234567-89AB-CDEF-FEDC-BA9876543210",
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            ),
            ("00000000-0000-0000-0000-000000000000", 0),
        ];
        for (text, value) in valid {
            assert_eq!(MessageId::parse(text), Some(MessageId(value)), "{text}");
        }
        let invalid = [
            "",
            "0123456789abcdeffedcba9876543210",
            "{01234567-89ab-cdef-fedc-ba9876543210}",
            "urn:uuid:01234567-89ab-cdef-fedc-ba9876543210",
            "01234567-89ab-cdef-fedc-ba987654321",
            "01234567-89ab-cdef-fedc-ba98765432100",
            "01234567089ab-cdef-fedc-ba9876543210",
            "0123456-789ab-cdef-fedc-ba9876543210",
            "01234567-89ab-cdef-fedc-ba987654321g",
            "01234567-89ab-cdef-fedc-ba987654321 ",
            "+1234567-89ab-cdef-fedc-ba9876543210",
            "01234567-89ab-cdef-fedc-ba98765432é",
        ];
        for text in invalid {
            assert_eq!(MessageId::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn message_id_round_trips() {
        let mut rng = fastrand::Rng::with_seed(0x1d);
        for _ in 0..1000 {
            let id = MessageId(rng.u128(..));
            assert_eq!(MessageId::parse(&id.to_string()), Some(id));
        }
    }

    fn encoded(receipt: PopReceipt) -> String {
        let mut out = Vec::new();
        receipt.encode_into(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pop_receipt_encoding_table() {
        let table = [
            (
                PopReceipt {
                    slot: 0,
                    generation: 0,
                    lease: 0,
                },
                "AAAAAAAAAAAAAAAA",
            ),
            (
                PopReceipt {
                    slot: 1,
                    generation: 2,
                    lease: 3,
                },
                "AQAAAAIAAAADAAAA",
            ),
            (
                PopReceipt {
                    slot: u32::MAX,
                    generation: u32::MAX,
                    lease: u32::MAX,
                },
                "////////////////",
            ),
        ];
        for (receipt, text) in table {
            assert_eq!(encoded(receipt), text);
            assert_eq!(PopReceipt::decode(text), Some(receipt));
        }
    }

    #[test]
    fn pop_receipt_decode_rejects_malformed() {
        let invalid = [
            "",
            "AQAAAAIAAAADAAA",
            "AQAAAAIAAAADAAAAA",
            "AQAAAAIAAAADAAAAAAAA",
            "AQAAAAIAAAADAA==",
            "AQAAAAIAAAADAAA=",
            "AQAAAAIAAAADAA-_",
            "AQAAAAIAAAADAA A",
            "AQAAAAIAAAADAA%2",
            "AQAAAAIAAAADAAé",
        ];
        for text in invalid {
            assert_eq!(PopReceipt::decode(text), None, "{text:?}");
        }
    }

    #[test]
    fn pop_receipt_round_trips() {
        let mut rng = fastrand::Rng::with_seed(0x9e);
        for _ in 0..1000 {
            let receipt = PopReceipt {
                slot: rng.u32(..),
                generation: rng.u32(..),
                lease: rng.u32(..),
            };
            let text = encoded(receipt);
            assert_eq!(text.len(), PopReceipt::ENCODED_BYTES);
            assert_eq!(PopReceipt::decode(&text), Some(receipt));
        }
    }
}
