//! The scenarios as per-lane state machines: which request a lane sends next, and how an answer
//! moves it on. A lane is one sequential stream of requests on a connection (a connection with
//! `--pipeline N` carries N lanes). Pure: the engine feeds answers in and asks for the next step.
//!
//! A chain starts with a Put, Get or Peek (the requests an open loop schedules); a Get's messages
//! are then deleted (and, in `update`, first updated) one request at a time, each sent as soon
//! as the previous answer arrives.

use crate::scenario::{Operation, Role};
use crate::wire::listing::{ListedMessage, MESSAGE_ID_BYTES_MAX, POP_RECEIPT_BYTES_MAX};
use crate::wire::mark::{parse_put_mark, parse_timestamp, PutMark};

/// The next request of a lane. `Update` and `Delete` name an index into the lane's messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Put,
    Get,
    Peek,
    Update(usize),
    Delete(usize),
    /// A Put that replaces a deleted message (a follow-up, not scheduled).
    Refill,
}

impl Step {
    /// The REST operation of this step.
    pub fn operation(self) -> Operation {
        match self {
            Step::Put | Step::Refill => Operation::Put,
            Step::Get => Operation::Get,
            Step::Peek => Operation::Peek,
            Step::Update(_) => Operation::Update,
            Step::Delete(_) => Operation::Delete,
        }
    }

    /// Whether this step starts a chain (and so follows the open-loop schedule).
    pub fn starts_chain(self) -> bool {
        matches!(self, Step::Put | Step::Get | Step::Peek)
    }
}

/// A message a Get handed to this lane, kept in fixed storage so that no answer allocates.
#[derive(Clone, Copy, Debug)]
pub struct HeldMessage {
    message_id: [u8; MESSAGE_ID_BYTES_MAX],
    message_id_bytes: usize,
    pop_receipt: [u8; POP_RECEIPT_BYTES_MAX],
    pop_receipt_bytes: usize,
    /// Deliveries of the message so far, this one included.
    pub dequeue_count: u32,
    /// The producer's send timestamp at the start of the text, when a producer wrote it.
    pub sent_unix_us: Option<u64>,
    /// Which put wrote it, with which attempt, when the text has room for the mark.
    pub put_mark: Option<PutMark>,
}

impl HeldMessage {
    const EMPTY: HeldMessage = HeldMessage {
        message_id: [0; MESSAGE_ID_BYTES_MAX],
        message_id_bytes: 0,
        pop_receipt: [0; POP_RECEIPT_BYTES_MAX],
        pop_receipt_bytes: 0,
        dequeue_count: 0,
        sent_unix_us: None,
        put_mark: None,
    };

    /// The message ID.
    pub fn message_id(&self) -> &[u8] {
        &self.message_id[..self.message_id_bytes]
    }

    /// The latest pop receipt.
    pub fn pop_receipt(&self) -> &[u8] {
        &self.pop_receipt[..self.pop_receipt_bytes]
    }

    fn set_pop_receipt(&mut self, pop_receipt: &[u8]) -> bool {
        if pop_receipt.is_empty() || pop_receipt.len() > POP_RECEIPT_BYTES_MAX {
            return false;
        }
        self.pop_receipt[..pop_receipt.len()].copy_from_slice(pop_receipt);
        self.pop_receipt_bytes = pop_receipt.len();
        true
    }
}

/// Why an answer could not be taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneError {
    /// A message ID or pop receipt was missing or longer than the lane keeps.
    UnusableMessage,
}

/// One sequential stream of requests.
#[derive(Clone, Debug)]
pub struct Lane {
    pub role: Role,
    /// Index of the queue this lane works on.
    pub queue: usize,
    /// The number of queues the lane takes in turn, one chain each, from `queue` on
    /// (`rotating`); 0 when it keeps to `queue`.
    turns: usize,
    /// Messages of the last Get still to update or delete; capacity `batch`, never grown.
    held: Vec<HeldMessage>,
    /// Position in the follow-up sequence of `held`: per message, an updater's Update, then the
    /// Delete, then the refill Put when refilling.
    follow_up: usize,
    /// Whether each deleted message is replaced by a new one.
    refill: bool,
}

impl Lane {
    /// A lane with `role` on `queue` whose Gets ask for `batch` messages, replacing each
    /// deleted message when `refill`.
    pub fn new(role: Role, queue: usize, batch: usize, refill: bool) -> Lane {
        assert!(batch > 0);
        Lane {
            role,
            queue,
            turns: 0,
            held: Vec::with_capacity(batch),
            follow_up: 0,
            refill,
        }
    }

    /// The same lane taking every one of `queues` queues in turn, one chain each (a Put, a
    /// Peek, or a Get and what follows it), from its own: where a run has more queues than
    /// lanes, every queue is worked on, and as often as every other.
    pub fn rotating(mut self, queues: usize) -> Lane {
        assert!(self.queue < queues);
        self.turns = queues;
        self
    }

    /// Moves to the next queue once a chain has ended, when rotating.
    fn end_of_chain(&mut self) {
        if self.turns > 0 && self.is_between_chains() {
            self.queue = (self.queue + 1) % self.turns;
        }
    }

    fn steps_per_message(&self) -> usize {
        let updates = usize::from(self.role == Role::Updater);
        updates + 1 + usize::from(self.refill)
    }

    /// Skips the remaining steps of the current message.
    fn skip_message(&mut self) {
        let per_message = self.steps_per_message();
        self.follow_up = (self.follow_up / per_message + 1) * per_message;
    }

    /// The request this lane sends next.
    pub fn next_step(&self) -> Step {
        let per_message = self.steps_per_message();
        if self.follow_up < self.held.len() * per_message {
            let index = self.follow_up / per_message;
            let position = self.follow_up % per_message;
            let update_steps = usize::from(self.role == Role::Updater);
            return if position < update_steps {
                Step::Update(index)
            } else if position == update_steps {
                Step::Delete(index)
            } else {
                Step::Refill
            };
        }
        match self.role {
            Role::Producer => Step::Put,
            Role::Consumer | Role::Updater | Role::Getter | Role::Worker => Step::Get,
            Role::Peeker => Step::Peek,
        }
    }

    /// The held message `index`.
    pub fn held(&self, index: usize) -> &HeldMessage {
        &self.held[index]
    }

    /// Takes in a successful Get's messages; the follow-ups start with the first. Messages
    /// beyond `batch` are ignored (the server sent more than asked).
    pub fn on_get<'a>(
        &mut self,
        messages: impl Iterator<Item = ListedMessage<'a>>,
    ) -> Result<(), LaneError> {
        let taken = self.take_get(messages);
        self.end_of_chain();
        taken
    }

    fn take_get<'a>(
        &mut self,
        messages: impl Iterator<Item = ListedMessage<'a>>,
    ) -> Result<(), LaneError> {
        assert!(self.next_step() == Step::Get, "a Get answer without a Get");
        self.held.clear();
        self.follow_up = 0;
        if self.role == Role::Getter {
            return Ok(());
        }
        for listed in messages.take(self.held.capacity()) {
            let id = listed.message_id;
            if id.is_empty() || id.len() > MESSAGE_ID_BYTES_MAX {
                self.held.clear();
                return Err(LaneError::UnusableMessage);
            }
            let mut held = HeldMessage::EMPTY;
            held.message_id[..id.len()].copy_from_slice(id);
            held.message_id_bytes = id.len();
            held.dequeue_count = listed.dequeue_count;
            held.sent_unix_us = parse_timestamp(listed.message_text);
            held.put_mark = parse_put_mark(listed.message_text);
            if !held.set_pop_receipt(listed.pop_receipt) {
                self.held.clear();
                return Err(LaneError::UnusableMessage);
            }
            self.held.push(held);
        }
        Ok(())
    }

    /// Takes in an Update's answer: `Some(receipt)` on success (the Delete then uses the new
    /// receipt), `None` on failure (the old receipt is void, so the Delete is skipped).
    pub fn on_update(&mut self, new_pop_receipt: Option<&[u8]>) -> Result<(), LaneError> {
        let Step::Update(index) = self.next_step() else {
            panic!("an Update answer without an Update");
        };
        match new_pop_receipt {
            Some(receipt) => {
                if !self.held[index].set_pop_receipt(receipt) {
                    self.skip_message();
                    self.end_of_chain();
                    return Err(LaneError::UnusableMessage);
                }
                self.follow_up += 1;
            }
            None => self.skip_message(),
        }
        self.end_of_chain();
        Ok(())
    }

    /// Takes in a Delete's answer. A failed Delete removed nothing, so nothing is refilled.
    pub fn on_delete(&mut self, deleted: bool) {
        assert!(
            matches!(self.next_step(), Step::Delete(_)),
            "a Delete answer without a Delete"
        );
        if deleted {
            self.follow_up += 1;
        } else {
            self.skip_message();
        }
        self.end_of_chain();
    }

    /// Messages the last Get handed to this lane.
    pub fn held_messages(&self) -> &[HeldMessage] {
        &self.held
    }

    /// Gives up the next message without a request: a worker that crashed before deleting it.
    /// The message comes back when its lease runs out.
    pub fn abandon(&mut self) {
        assert!(
            matches!(self.next_step(), Step::Delete(_)),
            "nothing to abandon"
        );
        self.skip_message();
        self.end_of_chain();
    }

    /// Takes in a refill Put's answer, successful or not.
    pub fn on_refill(&mut self) {
        assert!(
            self.next_step() == Step::Refill,
            "a refill answer without a refill"
        );
        self.follow_up += 1;
        self.end_of_chain();
    }

    /// Takes in an answer to a Put or Peek, or a failed Get: the lane starts a new chain.
    pub fn on_chain_end(&mut self) {
        self.held.clear();
        self.follow_up = 0;
        self.end_of_chain();
    }

    /// Whether the lane is between chains (its next step starts one).
    pub fn is_between_chains(&self) -> bool {
        self.next_step().starts_chain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed<'a>(id: &'a [u8], receipt: &'a [u8]) -> ListedMessage<'a> {
        ListedMessage {
            message_id: id,
            pop_receipt: receipt,
            message_text: b"",
            dequeue_count: 1,
        }
    }

    #[test]
    fn consumer_deletes_each_message_then_gets_again() {
        let mut lane = Lane::new(Role::Consumer, 3, 32, false);
        assert_eq!(lane.next_step(), Step::Get);
        lane.on_get([listed(b"a", b"ra"), listed(b"b", b"rb")].into_iter())
            .unwrap();
        assert_eq!(lane.next_step(), Step::Delete(0));
        assert_eq!(lane.held(0).message_id(), b"a");
        assert_eq!(lane.held(0).pop_receipt(), b"ra");
        lane.on_delete(true);
        assert_eq!(lane.next_step(), Step::Delete(1));
        lane.on_delete(true);
        assert_eq!(lane.next_step(), Step::Get);
        // An empty Get leads straight to the next Get.
        lane.on_get(std::iter::empty()).unwrap();
        assert_eq!(lane.next_step(), Step::Get);
    }

    /// A rotating lane takes every queue in turn, one chain each: the Get and the Deletes of
    /// its messages on one queue, then the next.
    #[test]
    fn a_rotating_lane_moves_to_the_next_queue_once_a_chain_ends() {
        let mut lane = Lane::new(Role::Consumer, 6, 32, false).rotating(8);
        lane.on_get([listed(b"a", b"ra"), listed(b"b", b"rb")].into_iter())
            .unwrap();
        lane.on_delete(true);
        assert_eq!(lane.queue, 6, "the Deletes go where the Get was");
        lane.on_delete(false);
        assert_eq!(lane.queue, 7);
        lane.on_get(std::iter::empty()).unwrap();
        assert_eq!(lane.queue, 0, "back to the first after the last");
        let mut producer = Lane::new(Role::Producer, 1, 1, false).rotating(3);
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(producer.queue);
            producer.on_chain_end();
        }
        assert_eq!(seen, [1, 2, 0, 1]);
        let mut fixed = Lane::new(Role::Producer, 2, 1, false);
        fixed.on_chain_end();
        assert_eq!(fixed.queue, 2, "a lane that was not made rotating stays");
    }

    #[test]
    fn updater_updates_then_deletes_with_the_new_receipt() {
        let mut lane = Lane::new(Role::Updater, 0, 2, false);
        lane.on_get([listed(b"a", b"r1"), listed(b"b", b"s1")].into_iter())
            .unwrap();
        assert_eq!(lane.next_step(), Step::Update(0));
        lane.on_update(Some(b"r2")).unwrap();
        assert_eq!(lane.next_step(), Step::Delete(0));
        assert_eq!(lane.held(0).pop_receipt(), b"r2");
        lane.on_delete(true);
        assert_eq!(lane.next_step(), Step::Update(1));
        // A failed Update voids the receipt: its Delete is skipped.
        lane.on_update(None).unwrap();
        assert_eq!(lane.next_step(), Step::Get);
    }

    #[test]
    fn refilling_consumers_put_back_what_they_deleted() {
        let mut lane = Lane::new(Role::Consumer, 0, 3, true);
        lane.on_get([listed(b"a", b"r"), listed(b"b", b"r"), listed(b"c", b"r")].into_iter())
            .unwrap();
        assert_eq!(lane.next_step(), Step::Delete(0));
        lane.on_delete(true);
        assert_eq!(lane.next_step(), Step::Refill);
        assert!(
            !lane.is_between_chains(),
            "a refill is a follow-up, not a scheduled start"
        );
        lane.on_refill();
        // A failed Delete removed nothing: no refill for it.
        lane.on_delete(false);
        assert_eq!(lane.next_step(), Step::Delete(2));
        lane.on_delete(true);
        lane.on_refill();
        assert_eq!(lane.next_step(), Step::Get);

        let mut updater = Lane::new(Role::Updater, 0, 1, true);
        updater.on_get([listed(b"a", b"r")].into_iter()).unwrap();
        assert_eq!(updater.next_step(), Step::Update(0));
        updater.on_update(Some(b"r2")).unwrap();
        assert_eq!(updater.next_step(), Step::Delete(0));
        updater.on_delete(true);
        assert_eq!(updater.next_step(), Step::Refill);
        updater.on_refill();
        assert_eq!(updater.next_step(), Step::Get);
    }

    #[test]
    fn unusable_messages_are_refused_and_the_lane_starts_over() {
        let mut lane = Lane::new(Role::Consumer, 0, 4, false);
        let long_id = [b'a'; MESSAGE_ID_BYTES_MAX + 1];
        assert_eq!(
            lane.on_get([listed(b"a", b"r"), listed(&long_id, b"r")].into_iter()),
            Err(LaneError::UnusableMessage)
        );
        assert_eq!(lane.next_step(), Step::Get);
        assert_eq!(
            lane.on_get([listed(b"a", b"")].into_iter()),
            Err(LaneError::UnusableMessage)
        );
        assert_eq!(lane.next_step(), Step::Get);
    }

    #[test]
    fn gets_keep_at_most_batch_messages() {
        let mut lane = Lane::new(Role::Consumer, 0, 1, false);
        lane.on_get([listed(b"a", b"r"), listed(b"b", b"r")].into_iter())
            .unwrap();
        assert_eq!(lane.next_step(), Step::Delete(0));
        lane.on_delete(true);
        assert!(lane.is_between_chains());
    }

    #[test]
    fn getter_gets_again_and_holds_nothing() {
        let mut lane = Lane::new(Role::Getter, 0, 32, false);
        assert_eq!(lane.next_step(), Step::Get);
        lane.on_get([listed(b"id-1", b"receipt-1"), listed(b"id-2", b"receipt-2")].into_iter())
            .unwrap();
        // No Delete follows: the next request starts a new chain with another Get.
        assert_eq!(lane.next_step(), Step::Get);
        assert!(lane.is_between_chains());
    }
}
