//! `ForeignIds`: the IDs of messages a shard restored from another shard's files (a start with
//! another shard count, `Restorer::moved_message`, or a snapshot that recorded such a message),
//! which are not this shard's prefix and sequence. By slot, to answer with them, and by ID, for
//! the pop receipts handed out before that start, which name the slot the message had on the
//! old shard.
//!
//! Two maps held the ID each (`HashMap<u32, MessageId>` and `HashMap<MessageId, u32>`): a
//! `u128`'s alignment made each bucket 32 bytes, so a moved message cost about 130 bytes of
//! RSS beside its slot's 104, for as long as it lived (a change of count from one shard to two
//! left 225-246 bytes a message). Here the ID is stored once, with its slot, in a table of 20
//! bytes a bucket, and the table by ID holds slots alone (4 bytes a bucket), each compared
//! through the first: 26 bytes a bucket pair against 66. Both are given back whole once the
//! last such message goes.

use hashbrown::HashTable;

use crate::queue::key::MessageId;

/// The foreign IDs of a shard's messages, by slot and by ID.
#[derive(Debug, Default)]
pub(crate) struct ForeignIds {
    /// (slot, ID as little-endian bytes, which keep the bucket at 4-byte alignment) by slot.
    by_slot: HashTable<(u32, [u8; 16])>,
    /// The same slots by their IDs, each ID read from `by_slot`.
    by_id: HashTable<u32>,
    hasher: ahash::RandomState,
}

impl ForeignIds {
    /// Whether no message has a foreign ID (every shard but after a change of count).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_slot.is_empty()
    }

    /// How many messages have one.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_slot.len()
    }

    /// The foreign ID of the message in `slot`. Nothing is hashed while none has one, as on
    /// every shard but after a change of count: each message freed and each ID given asks.
    pub fn id(&self, slot: u32) -> Option<MessageId> {
        if self.by_slot.is_empty() {
            return None;
        }
        id_in(&self.by_slot, &self.hasher, slot)
    }

    /// The slot of the message whose foreign ID is `id`.
    pub fn slot(&self, id: MessageId) -> Option<u32> {
        if self.by_slot.is_empty() {
            return None;
        }
        let ForeignIds {
            by_slot,
            by_id,
            hasher,
        } = self;
        let found = by_id.find(hasher.hash_one(id.0), |&slot| {
            id_in(by_slot, hasher, slot) == Some(id)
        });
        found.copied()
    }

    /// Notes `id` as the ID of the message in `slot`, which has none yet.
    pub fn insert(&mut self, slot: u32, id: MessageId) {
        assert!(
            self.id(slot).is_none(),
            "slot {slot} has a foreign ID already"
        );
        let ForeignIds {
            by_slot,
            by_id,
            hasher,
        } = self;
        let bytes = id.0.to_le_bytes();
        by_slot.insert_unique(hasher.hash_one(slot), (slot, bytes), |&(slot, _)| {
            hasher.hash_one(slot)
        });
        by_id.insert_unique(hasher.hash_one(id.0), slot, |&slot| {
            hasher.hash_one(
                id_in(by_slot, hasher, slot)
                    .expect("every slot by ID has its ID")
                    .0,
            )
        });
    }

    /// Forgets the foreign ID of the message in `slot` (it goes), if it has one; the tables are
    /// given back once none is left.
    pub fn remove(&mut self, slot: u32) -> Option<MessageId> {
        if self.by_slot.is_empty() {
            return None;
        }
        let ForeignIds {
            by_slot,
            by_id,
            hasher,
        } = self;
        let entry = by_slot
            .find_entry(hasher.hash_one(slot), |&(at, _)| at == slot)
            .ok()?;
        let ((_, bytes), _) = entry.remove();
        let id = u128::from_le_bytes(bytes);
        let Ok(by_its_id) = by_id.find_entry(hasher.hash_one(id), |&at| at == slot) else {
            unreachable!("slot {slot}'s foreign ID is in both tables");
        };
        by_its_id.remove();
        if by_slot.is_empty() {
            *by_slot = HashTable::new();
            *by_id = HashTable::new();
        }
        Some(MessageId(id))
    }

    /// Bytes the two tables have allocated.
    #[cfg(test)]
    pub fn allocated_bytes(&self) -> usize {
        self.by_slot.allocation_size() + self.by_id.allocation_size()
    }
}

/// The ID `by_slot` holds for `slot`.
fn id_in(
    by_slot: &HashTable<(u32, [u8; 16])>,
    hasher: &ahash::RandomState,
    slot: u32,
) -> Option<MessageId> {
    let found = by_slot.find(hasher.hash_one(slot), |&(at, _)| at == slot);
    found.map(|&(_, bytes)| MessageId(u128::from_le_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::random::SplitMix64;

    /// The tables answer as two plain maps given the same inserts and removals: random slots
    /// (few, so they are reused) and IDs (some sharing their low or high 64 bits, some the
    /// same hash bucket by chance), checked after every step, every slot and ID asked, and the
    /// memory given back once empty.
    #[test]
    fn the_tables_answer_as_two_maps() {
        for seed in 0..40 {
            let mut random = SplitMix64::new(seed);
            let mut foreign = ForeignIds::default();
            let (mut ids, mut slots) = (HashMap::new(), HashMap::new());
            let slot_range = 1 + random.next_u64() % 300;
            for step in 0..3000 {
                let slot = (random.next_u64() % slot_range) as u32;
                if random.next_u64() % 3 == 0 || ids.contains_key(&slot) {
                    let removed = foreign.remove(slot);
                    assert_eq!(removed, ids.remove(&slot), "{seed} {step}");
                    if let Some(id) = removed {
                        slots.remove(&id);
                    }
                } else {
                    let id = match random.next_u64() % 4 {
                        0 => MessageId(u128::from(random.next_u64())),
                        1 => MessageId(u128::from(random.next_u64()) << 64),
                        _ => MessageId(
                            u128::from(random.next_u64()) << 64 | u128::from(random.next_u64()),
                        ),
                    };
                    if slots.contains_key(&id) {
                        continue;
                    }
                    foreign.insert(slot, id);
                    ids.insert(slot, id);
                    slots.insert(id, slot);
                }
                assert_eq!(foreign.len(), ids.len());
                assert_eq!(foreign.is_empty(), ids.is_empty());
                if step % 97 == 0 {
                    for at in 0..slot_range as u32 {
                        assert_eq!(foreign.id(at), ids.get(&at).copied(), "{seed} {step}");
                    }
                    for (&id, &slot) in &slots {
                        assert_eq!(foreign.slot(id), Some(slot), "{seed} {step}");
                        assert_eq!(
                            foreign.slot(MessageId(id.0 ^ 1)),
                            slots.get(&MessageId(id.0 ^ 1)).copied()
                        );
                    }
                }
            }
            for slot in ids.keys().copied().collect::<Vec<_>>() {
                assert_eq!(foreign.remove(slot), ids.remove(&slot));
            }
            assert!(foreign.is_empty());
            assert_eq!(foreign.allocated_bytes(), 0, "given back once empty");
        }
    }

    /// A slot holds one foreign ID: a second is a bug.
    #[test]
    #[should_panic(expected = "has a foreign ID already")]
    fn a_slot_with_two_foreign_ids_is_a_bug() {
        let mut foreign = ForeignIds::default();
        foreign.insert(3, MessageId(1));
        foreign.insert(3, MessageId(2));
    }

    /// A million entries (the tables grown to them) take 26 bytes a bucket pair (and a group's
    /// control bytes), against the 66 of the two maps before (each bucket a `u128`'s 32 bytes
    /// and its control byte), and answer.
    #[test]
    fn a_million_ids_take_26_bytes_a_bucket_pair() {
        const IDS: usize = 1 << 20;
        let mut foreign = ForeignIds::default();
        for slot in 0..IDS as u32 {
            foreign.insert(
                slot,
                MessageId(u128::from(slot) * 0x9e37_79b9_7f4a_7c15_f39c),
            );
        }
        let buckets = (IDS * 8 / 7).next_power_of_two();
        let allocated = foreign.allocated_bytes();
        assert!(
            allocated <= buckets * 26 + 2 * 64,
            "{allocated} for {buckets} buckets"
        );
        for slot in (0..IDS as u32).step_by(4099) {
            let id = MessageId(u128::from(slot) * 0x9e37_79b9_7f4a_7c15_f39c);
            assert_eq!((foreign.id(slot), foreign.slot(id)), (Some(id), Some(slot)));
        }
    }
}
