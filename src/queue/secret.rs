//! The server's secret and what it makes: message IDs nobody can predict and pop receipts nobody
//! can forge. One 256-bit secret per server (random at start-up in memory-only mode; kept in the
//! data directory otherwise, so receipts and IDs survive a restart and a change of shard count)
//! gives two SipHash-2-4 keys: one for IDs, one for receipt tags.
//!
//! SipHash-2-4 is a pseudorandom function designed for short inputs: about 200 instructions for
//! an ID or a tag, where HMAC-SHA-256 would cost thousands on every Get and Delete.
//! - A message ID is SipHash-128 (key one) of the shard's ID prefix and the message's sequence,
//!   with the UUID version (4) and variant bits set: a keyed counter-mode generator, so IDs are
//!   unique by construction of the input, random-looking to anyone without the key, and
//!   recomputed rather than stored (the slot stays 80 bytes, the log records the sequence only).
//! - A receipt's tag is SipHash-64 (key two) of the message ID, slot, generation and lease: a
//!   MAC only the server can produce, so finding a valid receipt takes about 2^64 guesses.

use std::hash::Hasher as _;

use siphasher::sip::SipHasher24;
use siphasher::sip128::{Hasher128 as _, SipHasher24 as SipHasher24Wide};

use super::key::MessageId;

/// Bytes of a server secret.
pub const SECRET_BYTES: usize = 32;

/// The UUID version nibble (4: random) and the variant bits (`10`) of a message ID.
const UUID_VERSION_MASK: u128 = 0xf << 76;
const UUID_VERSION_4: u128 = 0x4 << 76;
const UUID_VARIANT_MASK: u128 = 0b11 << 62;
const UUID_VARIANT: u128 = 0b10 << 62;

/// The keys derived from a server secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret {
    /// SipHash key of message IDs.
    id_key: [u64; 2],
    /// SipHash key of pop receipts' tags.
    receipt_key: [u64; 2],
}

impl std::fmt::Debug for Secret {
    /// Never prints the keys: a secret in a log line would be a secret no more.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Secret(..)")
    }
}

impl Secret {
    /// The keys of the secret `bytes`.
    pub fn from_bytes(bytes: &[u8; SECRET_BYTES]) -> Secret {
        let word = |index: usize| {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(&bytes[index * 8..index * 8 + 8]);
            u64::from_le_bytes(eight)
        };
        Secret {
            id_key: [word(0), word(1)],
            receipt_key: [word(2), word(3)],
        }
    }

    /// A secret made from a 64-bit seed, for tests and simulations that need reproducible IDs.
    /// Never for a server: 64 bits of seed are 64 bits of key at most.
    pub fn from_seed(seed: u64) -> Secret {
        let mut stream = crate::random::SplitMix64::new(seed);
        let mut bytes = [0u8; SECRET_BYTES];
        for chunk in bytes.chunks_exact_mut(8) {
            chunk.copy_from_slice(&stream.next_u64().to_le_bytes());
        }
        Secret::from_bytes(&bytes)
    }

    /// The ID of the message a shard with `id_prefix` put with `sequence`.
    pub fn message_id(&self, id_prefix: u64, sequence: u64) -> MessageId {
        let mut hasher = SipHasher24Wide::new_with_keys(self.id_key[0], self.id_key[1]);
        hasher.write_u64(id_prefix);
        hasher.write_u64(sequence);
        let value = hasher.finish128().as_u128();
        MessageId(
            (value & !(UUID_VERSION_MASK | UUID_VARIANT_MASK)) | UUID_VERSION_4 | UUID_VARIANT,
        )
    }

    /// The tag of the receipt for lease `lease` of message `message_id`, stored in
    /// (`slot`, `generation`).
    pub fn receipt_tag(
        &self,
        message_id: MessageId,
        slot: u32,
        generation: u32,
        lease: u32,
    ) -> u64 {
        let mut hasher = SipHasher24::new_with_keys(self.receipt_key[0], self.receipt_key[1]);
        hasher.write_u128(message_id.0);
        hasher.write_u64(u64::from(slot) | (u64::from(generation) << 32));
        hasher.write_u32(lease);
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_uuid_v4_and_depend_on_every_input() {
        let secret = Secret::from_seed(1);
        let id = secret.message_id(7, 0);
        let uuid = uuid::Uuid::from_u128(id.0);
        assert_eq!(uuid.get_version_num(), 4);
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(id, secret.message_id(7, 0));
        assert_ne!(id, secret.message_id(7, 1));
        assert_ne!(id, secret.message_id(8, 0));
        assert_ne!(id, Secret::from_seed(2).message_id(7, 0));
        // Consecutive sequences share no visible structure: about half the bits differ.
        let differing = (id.0 ^ secret.message_id(7, 1).0).count_ones();
        assert!((30..=92).contains(&differing), "{differing}");
    }

    #[test]
    fn receipt_tags_depend_on_every_input_and_the_key() {
        let secret = Secret::from_seed(1);
        let id = secret.message_id(7, 0);
        let tag = secret.receipt_tag(id, 1, 2, 3);
        assert_eq!(tag, secret.receipt_tag(id, 1, 2, 3));
        for other in [
            secret.receipt_tag(MessageId(id.0 ^ 1), 1, 2, 3),
            secret.receipt_tag(id, 2, 2, 3),
            secret.receipt_tag(id, 1, 3, 3),
            secret.receipt_tag(id, 1, 2, 4),
            Secret::from_seed(2).receipt_tag(id, 1, 2, 3),
        ] {
            assert_ne!(tag, other);
        }
    }

    #[test]
    fn the_secret_splits_into_two_keys() {
        let mut bytes = [0u8; SECRET_BYTES];
        let zero = Secret::from_bytes(&bytes);
        bytes[31] = 1;
        let receipt_changed = Secret::from_bytes(&bytes);
        let id = zero.message_id(0, 0);
        assert_eq!(id, receipt_changed.message_id(0, 0));
        assert_ne!(
            zero.receipt_tag(id, 0, 0, 0),
            receipt_changed.receipt_tag(id, 0, 0, 0)
        );
        assert_eq!(format!("{zero:?}"), "Secret(..)");
    }
}
