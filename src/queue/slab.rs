//! The message slab: every message a shard stores, in one `Vec` of fixed-size slots addressed by
//! `u32` index, with a generation counter per slot and a free list threaded through free slots.
//!
//! A message is identified inside the shard by `(slot, generation)`: the generation changes when a
//! slot is freed, so a pop receipt naming a freed or reused slot is recognised as stale. The text
//! is stored once, as the `Bytes` the request brought, and replies share it (a `TextSlot`;
//! with `--text-memory`, once written, a locator of its record on disk instead).
//!
//! The slot is the bulk of the per-message memory, so it is compact: `u32` indices and counters,
//! times in ms, the TTL and the put delay as `u32` seconds, and the links of the intrusive lists
//! (`MessageList`) the state keeps messages in. Per-message overhead beyond the text:
//! `SLOT_BYTES` (80) + the timer wheel's node (`wheel::NODE_BYTES`, 16) = 96 bytes of azq's own,
//! plus the text's 24-byte reference count that `bytes` allocates once a reply shares the text,
//! plus `Vec` capacity beyond length (both grow by powers of two: 4.9% at a million messages).
//! Measured by `benches/queue.rs` with a counting allocator: 124.7 bytes per message at a depth of
//! a million. A message that reappears out of order also has an entry in its queue's `BTreeMap`
//! (measured 41 bytes) while it stays visible.

use bytes::Bytes;

use super::command::EXPIRATION_NEVER_MS;

/// The "no slot" value of a link, and the end of a list.
pub const NONE: u32 = u32::MAX;

/// Most messages one slab holds. Far beyond any memory the machine has (2^31 × 96 bytes), it keeps
/// slot indices clear of `NONE` and of the timer wheel's sentinels.
pub const SLOTS_MAX: usize = 1 << 31;
const _: () = assert!(SLOTS_MAX <= super::wheel::TIMERS_MAX);

/// The stored TTL of a message that never expires.
pub const TTL_S_NEVER: u32 = u32::MAX;

/// Bits of `queue_and_place` that hold the queue index; the top two hold the `Place`.
const QUEUE_BITS: u32 = 30;
const QUEUE_MASK: u32 = (1 << QUEUE_BITS) - 1;
/// Most queue indices a message can name.
pub const QUEUE_INDEX_MAX: usize = QUEUE_MASK as usize;
const _: () = assert!(crate::limits::QUEUES_PER_SHARD_MAX <= QUEUE_INDEX_MAX);

/// Where a message is kept, which says what its `previous`/`next` links mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The slot is free; `next` links the free list.
    Free = 0,
    /// Visible, in its queue's in-order list (order keys ascending along `next`).
    VisibleInOrder = 1,
    /// Visible, in its queue's out-of-order `BTreeMap` (a message that reappeared at its original
    /// position after its lease ran out); links unused.
    VisibleOutOfOrder = 2,
    /// Leased, or delayed by its put: in its queue's invisible list, waiting for its timer.
    Invisible = 3,
}

/// A stored message in its slot: 80 bytes, generation included (a separate slot struct would
/// pad the 76 bytes of message to 80 and then add 8).
#[derive(Clone, Debug)]
pub struct Message {
    /// The text exactly as put, shared with every reply that returns it; or, once evicted,
    /// where it is on disk (tiered storage).
    pub text: TextSlot,
    /// The shard-wide insertion sequence: the low half of the message ID, and the order key's
    /// tie-break.
    pub sequence: u64,
    /// `InsertionTime`, ms since the Unix epoch: the base of expiry and of the order key.
    pub insertion_ms: u64,
    /// Seconds from insertion to expiry, or `TTL_S_NEVER`.
    pub ttl_s: u32,
    /// The put's visibility delay, seconds: the order key's time is `insertion + delay`.
    pub delay_s: u32,
    /// Times Get Messages has leased the message; Peek and Update leave it alone.
    pub dequeue_count: u32,
    /// Which lease the current pop receipt belongs to; 0 is the put's receipt.
    pub lease: u32,
    /// Queue index (low 30 bits) and `Place` (top 2 bits), packed to keep the slot at 80 bytes.
    queue_and_place: u32,
    /// Links of the list the `Place` names: the preceding slot, or `NONE` at the front.
    pub previous: u32,
    /// The following slot in that list (or in the free list), or `NONE` at the end.
    pub next: u32,
    /// The slot's generation: changes each time the slot is freed, so old `(slot, generation)`
    /// pairs go stale. Only the slab changes it.
    generation: u32,
}

/// A message's text where the message keeps it: in memory, or (docs/TIERED-STORAGE.md §11
/// step 2) only on disk, in the log record its locator names. 32 bytes either way (the
/// variant hides in `Bytes`'s non-null pointer), so the slot stays 80 bytes.
#[derive(Clone, Debug)]
pub enum TextSlot {
    /// In memory: the `Bytes` the request brought, shared with every reply.
    Resident(Bytes),
    /// Evicted once its record was durable (`--text-memory`): read back through the record's
    /// locator when a Get or Peek needs it (`Reply::Wait`).
    OnDisk {
        /// The record that last wrote the text.
        locator: super::key::TextLocator,
        /// The text's length, for the counts (`text_bytes`, `--max-memory`).
        text_bytes: u32,
    },
}
const _: () = assert!(std::mem::size_of::<TextSlot>() == std::mem::size_of::<Bytes>());

impl TextSlot {
    /// The text's length, bytes, resident or not.
    pub fn len(&self) -> usize {
        match self {
            TextSlot::Resident(text) => text.len(),
            TextSlot::OnDisk { text_bytes, .. } => *text_bytes as usize,
        }
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text, when it is in memory.
    pub fn resident(&self) -> Option<&Bytes> {
        match self {
            TextSlot::Resident(text) => Some(text),
            TextSlot::OnDisk { .. } => None,
        }
    }

    /// The text, which must be in memory: Get and Peek wait for texts on disk only before
    /// they return them (`Reply::Wait`), a snapshot takes those it records from what it read
    /// (`ShardState::snapshot_messages`), and Update journals the text it has just set.
    pub fn expect_resident(&self) -> &Bytes {
        self.resident()
            .expect("a text on disk only is read back before it is used")
    }
}

/// A message's position in its queue's visible order: (time it first became visible, sequence).
pub type OrderKey = (u64, u64);

impl Message {
    /// A message of queue `queue`, not yet in any list. Its place reads `Invisible` until the state
    /// links it into its queue's invisible list or visible order, right after inserting it.
    pub fn new(
        queue: u32,
        text: Bytes,
        sequence: u64,
        insertion_ms: u64,
        delay_s: u32,
        ttl_s: u32,
    ) -> Message {
        assert!(queue as usize <= QUEUE_INDEX_MAX);
        Message {
            text: TextSlot::Resident(text),
            sequence,
            insertion_ms,
            ttl_s,
            delay_s,
            dequeue_count: 0,
            lease: 0,
            queue_and_place: queue | ((Place::Invisible as u32) << QUEUE_BITS),
            previous: NONE,
            next: NONE,
            generation: 0,
        }
    }

    fn free(next: u32, generation: u32) -> Message {
        Message {
            text: TextSlot::Resident(Bytes::new()),
            sequence: 0,
            insertion_ms: 0,
            ttl_s: 0,
            delay_s: 0,
            dequeue_count: 0,
            lease: 0,
            queue_and_place: 0,
            previous: NONE,
            next,
            generation,
        }
    }

    /// The queue the message belongs to.
    pub fn queue(&self) -> u32 {
        self.queue_and_place & QUEUE_MASK
    }

    /// Where the message is kept, from the top two bits of `queue_and_place`.
    pub fn place(&self) -> Place {
        match self.queue_and_place >> QUEUE_BITS {
            0 => Place::Free,
            1 => Place::VisibleInOrder,
            2 => Place::VisibleOutOfOrder,
            _ => Place::Invisible,
        }
    }

    /// Records the list the message moved to; `Free` is the slab's alone to set.
    pub fn set_place(&mut self, place: Place) {
        assert_ne!(place, Place::Free, "only the slab frees slots");
        self.queue_and_place = self.queue() | ((place as u32) << QUEUE_BITS);
    }

    /// When the message expires; `EXPIRATION_NEVER_MS` if it never does.
    pub fn expiration_ms(&self) -> u64 {
        if self.ttl_s == TTL_S_NEVER {
            EXPIRATION_NEVER_MS
        } else {
            self.insertion_ms + u64::from(self.ttl_s) * 1000
        }
    }

    /// Its key in the queue's visible order: when it first became visible, then its sequence.
    pub fn order_key(&self) -> OrderKey {
        (
            self.insertion_ms + u64::from(self.delay_s) * 1000,
            self.sequence,
        )
    }
}

/// Bytes of one slot: the per-message cost of the slab.
pub const SLOT_BYTES: usize = std::mem::size_of::<Message>();
const _: () = assert!(SLOT_BYTES == 80);

/// Fixed-size message slots with generations and a free list.
#[derive(Debug, Default)]
pub struct MessageSlab {
    /// Every slot ever allocated; a free one has `Place::Free` and links the free list.
    slots: Vec<Message>,
    /// First free slot, or `NONE`. Last freed is reused first: its memory is the warmest.
    free_head: u32,
    /// Occupied slots.
    occupied: usize,
}

impl MessageSlab {
    /// An empty slab; slots are allocated as messages arrive and reused once freed.
    pub fn new() -> MessageSlab {
        MessageSlab {
            slots: Vec::new(),
            free_head: NONE,
            occupied: 0,
        }
    }

    /// Messages stored.
    pub fn len(&self) -> usize {
        self.occupied
    }

    /// No message is stored (slots may still be allocated).
    pub fn is_empty(&self) -> bool {
        self.occupied == 0
    }

    /// Slots ever allocated, free or not.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Stores `message` and returns its `(slot, generation)`; `None` when `SLOTS_MAX` are in use.
    pub fn insert(&mut self, mut message: Message) -> Option<(u32, u32)> {
        assert_ne!(message.place(), Place::Free);
        let slot = if self.free_head != NONE {
            let slot = self.free_head;
            let free = &mut self.slots[slot as usize];
            assert_eq!(free.place(), Place::Free);
            self.free_head = free.next;
            message.generation = free.generation;
            *free = message;
            slot
        } else {
            if self.slots.len() >= SLOTS_MAX {
                return None;
            }
            message.generation = 0;
            self.slots.push(message);
            (self.slots.len() - 1) as u32
        };
        self.occupied += 1;
        Some((slot, self.slots[slot as usize].generation))
    }

    /// Frees `slot`, which must be occupied, and returns its message.
    pub fn remove(&mut self, slot: u32) -> Message {
        let free_head = self.free_head;
        let entry = &mut self.slots[slot as usize];
        assert_ne!(entry.place(), Place::Free, "freeing a free slot");
        let generation = entry.generation.wrapping_add(1);
        let message = std::mem::replace(entry, Message::free(free_head, generation));
        self.free_head = slot;
        self.occupied -= 1;
        message
    }

    /// The message in `slot`, which must be occupied.
    pub fn get(&self, slot: u32) -> &Message {
        let message = &self.slots[slot as usize];
        assert_ne!(message.place(), Place::Free, "reading a free slot");
        message
    }

    /// The message in `slot`, which must be occupied.
    pub fn get_mut(&mut self, slot: u32) -> &mut Message {
        let message = &mut self.slots[slot as usize];
        assert_ne!(message.place(), Place::Free, "writing a free slot");
        message
    }

    /// The message `(slot, generation)` names, if it is still stored: the check behind every
    /// pop receipt, which may come from anywhere and so may name any slot.
    pub fn lookup(&self, slot: u32, generation: u32) -> Option<&Message> {
        self.slots
            .get(slot as usize)
            .filter(|message| message.generation == generation && message.place() != Place::Free)
    }

    /// The generation of `slot`, which must be occupied.
    pub fn generation(&self, slot: u32) -> u32 {
        self.get(slot).generation
    }

    /// The message in `slot`, if it holds one (a slot past the end holds none).
    pub fn occupant(&self, slot: u32) -> Option<&Message> {
        self.slots
            .get(slot as usize)
            .filter(|message| message.place() != Place::Free)
    }

    /// Stores `message` in `slot` with `generation`, as it was before a restart: the slab grows
    /// to reach the slot, with free slots (generation 0) in between. `slot` must be free. The
    /// free list is stale until `rebuild_free_list`; call it before the next `insert`.
    pub fn insert_at(&mut self, slot: u32, generation: u32, mut message: Message) {
        assert_ne!(message.place(), Place::Free);
        assert!((slot as usize) < SLOTS_MAX);
        while self.slots.len() <= slot as usize {
            self.slots.push(Message::free(NONE, 0));
        }
        let entry = &mut self.slots[slot as usize];
        assert_eq!(
            entry.place(),
            Place::Free,
            "restoring into an occupied slot"
        );
        message.generation = generation;
        *entry = message;
        self.occupied += 1;
    }

    /// Links every free slot into the free list (lowest first), after `insert_at`.
    pub fn rebuild_free_list(&mut self) {
        self.free_head = NONE;
        for slot in (0..self.slots.len()).rev() {
            let entry = &mut self.slots[slot];
            if entry.place() == Place::Free {
                entry.next = self.free_head;
                self.free_head = slot as u32;
            }
        }
    }

    /// Every occupied slot's message: O(slots), for inspection while the wheel is behind and
    /// for invariant checks in tests.
    pub fn occupied_messages(&self) -> impl Iterator<Item = &Message> {
        self.slots
            .iter()
            .filter(|message| message.place() != Place::Free)
    }
}

/// An intrusive doubly-linked list of messages through their `previous`/`next` links. A message
/// is in at most one list at a time (its `Place` says which), so one pair of links serves all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageList {
    /// The first slot, or `NONE` when the list is empty.
    pub head: u32,
    /// The last slot, where `push_back` appends, or `NONE` when the list is empty.
    pub tail: u32,
}

impl Default for MessageList {
    fn default() -> Self {
        MessageList::EMPTY
    }
}

impl MessageList {
    /// A list with no message: both ends `NONE`.
    pub const EMPTY: MessageList = MessageList {
        head: NONE,
        tail: NONE,
    };

    /// Whether the list holds no message.
    pub fn is_empty(&self) -> bool {
        self.head == NONE
    }

    /// Appends `slot`, which must be in no list, and gives it `place`.
    pub fn push_back(&mut self, slab: &mut MessageSlab, slot: u32, place: Place) {
        let message = slab.get_mut(slot);
        message.set_place(place);
        message.previous = self.tail;
        message.next = NONE;
        if self.tail == NONE {
            self.head = slot;
        } else {
            slab.get_mut(self.tail).next = slot;
        }
        self.tail = slot;
    }

    /// Takes `slot`, which must be in this list, out of it.
    pub fn unlink(&mut self, slab: &mut MessageSlab, slot: u32) {
        let message = slab.get_mut(slot);
        let (previous, next) = (message.previous, message.next);
        message.previous = NONE;
        message.next = NONE;
        if previous == NONE {
            assert_eq!(self.head, slot);
            self.head = next;
        } else {
            slab.get_mut(previous).next = next;
        }
        if next == NONE {
            assert_eq!(self.tail, slot);
            self.tail = previous;
        } else {
            slab.get_mut(next).previous = previous;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn message(sequence: u64) -> Message {
        Message::new(
            (sequence % 7) as u32,
            Bytes::from(sequence.to_string()),
            sequence,
            1_000 + sequence,
            0,
            60,
        )
    }

    #[test]
    fn sizes_are_as_documented() {
        assert_eq!(std::mem::size_of::<Message>(), 80);
        assert_eq!(SLOT_BYTES, 80);
    }

    #[test]
    fn packed_queue_and_place() {
        let mut stored = Message::new(QUEUE_INDEX_MAX as u32, Bytes::new(), 0, 0, 0, 1);
        for place in [
            Place::Invisible,
            Place::VisibleInOrder,
            Place::VisibleOutOfOrder,
        ] {
            stored.set_place(place);
            assert_eq!(stored.place(), place);
            assert_eq!(stored.queue() as usize, QUEUE_INDEX_MAX);
        }
    }

    #[test]
    fn expiration_and_order_key() {
        let stored = Message::new(0, Bytes::new(), 9, 5_000, 3, 10);
        assert_eq!(stored.expiration_ms(), 15_000);
        assert_eq!(stored.order_key(), (8_000, 9));
        let never = Message::new(0, Bytes::new(), 9, 5_000, 0, TTL_S_NEVER);
        assert_eq!(never.expiration_ms(), EXPIRATION_NEVER_MS);
    }

    #[test]
    fn freed_slot_is_reused_with_a_new_generation() {
        let mut slab = MessageSlab::new();
        let (slot, generation) = slab.insert(message(1)).unwrap();
        assert_eq!(slab.lookup(slot, generation).unwrap().sequence, 1);
        assert_eq!(slab.remove(slot).sequence, 1);
        assert!(slab.lookup(slot, generation).is_none());
        let (reused, new_generation) = slab.insert(message(2)).unwrap();
        assert_eq!(reused, slot);
        assert_ne!(new_generation, generation);
        assert!(slab.lookup(slot, generation).is_none());
        assert_eq!(slab.lookup(slot, new_generation).unwrap().sequence, 2);
        assert!(slab.lookup(slot + 1, 0).is_none());
        assert!(slab.lookup(NONE, 0).is_none());
    }

    #[test]
    #[should_panic(expected = "freeing a free slot")]
    fn double_free_is_a_bug() {
        let mut slab = MessageSlab::new();
        let (slot, _) = slab.insert(message(1)).unwrap();
        slab.remove(slot);
        slab.remove(slot);
    }

    #[test]
    fn list_push_and_unlink_anywhere() {
        let mut slab = MessageSlab::new();
        let slots: Vec<u32> = (0..5).map(|n| slab.insert(message(n)).unwrap().0).collect();
        let mut list = MessageList::EMPTY;
        for &slot in &slots {
            list.push_back(&mut slab, slot, Place::VisibleInOrder);
        }
        let walk = |slab: &MessageSlab, list: &MessageList| {
            let mut out = Vec::new();
            let mut slot = list.head;
            while slot != NONE {
                out.push(slot);
                slot = slab.get(slot).next;
            }
            out
        };
        list.unlink(&mut slab, slots[2]);
        list.unlink(&mut slab, slots[0]);
        list.unlink(&mut slab, slots[4]);
        assert_eq!(walk(&slab, &list), vec![slots[1], slots[3]]);
        assert_eq!((list.head, list.tail), (slots[1], slots[3]));
        list.unlink(&mut slab, slots[1]);
        list.unlink(&mut slab, slots[3]);
        assert!(list.is_empty());
        assert_eq!(list, MessageList::EMPTY);
    }

    /// Random inserts, removes and lookups (including of stale handles) against a `HashMap`.
    #[test]
    fn matches_hash_map_model() {
        for seed in 0..20u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut slab = MessageSlab::new();
                let mut model: HashMap<(u32, u32), u64> = HashMap::new();
                // The live handles in a Vec too: picking from the map would follow its random
                // iteration order and make the run depend on more than the seed.
                let mut live: Vec<(u32, u32)> = Vec::new();
                let mut stale: Vec<(u32, u32)> = Vec::new();
                let mut sequence = 0;
                for _ in 0..5_000 {
                    if rng.u32(..3) < 2 && live.len() < 400 {
                        sequence += 1;
                        let handle = slab.insert(message(sequence)).unwrap();
                        assert!(model.insert(handle, sequence).is_none(), "handle reused");
                        live.push(handle);
                    } else if !live.is_empty() {
                        let handle = live.swap_remove(rng.usize(..live.len()));
                        let removed = slab.remove(handle.0);
                        assert_eq!(Some(removed.sequence), model.remove(&handle));
                        stale.push(handle);
                    }
                    assert_eq!(slab.len(), model.len());
                    for (&(slot, generation), &sequence) in &model {
                        assert_eq!(slab.lookup(slot, generation).unwrap().sequence, sequence);
                        assert_eq!(slab.generation(slot), generation);
                    }
                    for &(slot, generation) in stale.iter().rev().take(20) {
                        assert!(slab.lookup(slot, generation).is_none());
                    }
                    assert!(slab.slots() <= 400);
                }
            }));
            if let Err(panic) = result {
                eprintln!("slab model failed with seed {seed}");
                std::panic::resume_unwind(panic);
            }
        }
    }
}
