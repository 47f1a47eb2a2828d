//! The shard's timer wheel: one timer per stored message, for the moment it becomes visible again
//! (a lease or a delayed put runs out) or expires (its TTL runs out), whichever comes first.
//!
//! Hierarchical, 1 ms resolution: level `l` has 64 slots of `64^l` ms each. Eleven levels cover
//! every `u64` deadline (the top level uses the last 4 bits), so there is no overflow list and a
//! TTL of years is scheduled like a lease of seconds. A timer sits at the level of the highest
//! 6-bit group in which its deadline differs from the wheel's time; when the wheel's time reaches
//! the start of a slot above level 0, the slot's timers move down ("cascade"), and level-0 slots
//! fire. Each timer moves at most ten times in its life.
//!
//! Timers are intrusive: a timer's identity is a `u32` (the message's slab slot), and its node
//! (deadline + links) lives in `nodes`, indexed by that identity. Each slot of the wheel is a
//! circular doubly-linked list through a sentinel node, so schedule and cancel are O(1) and a
//! cancelled timer leaves nothing behind. That is why cancellation is eager, not lazy: a lazily
//! cancelled entry lives until its deadline, and a message deleted right after its Put would
//! leave its expiry entry (default TTL: 7 days) in the wheel for a week; at a few thousand
//! deletes per second that is billions of dead entries. Eager cancellation keeps the wheel at
//! exactly one 16-byte node per scheduled timer.
//!
//! Work is bounded: `pop_due` spends one unit of the caller's budget per timer it fires or
//! cascades, and `next_deadline_ms` reads one occupancy bitmap per level, never the timers.

/// Levels of the wheel; `LEVELS * SLOT_BITS >= 64`, so every `u64` deadline has a level.
const LEVELS: usize = 11;
/// log2 of the slots per level.
const SLOT_BITS: u32 = 6;
/// Slots per level; one occupancy bit each in a `u64`.
const SLOTS_PER_LEVEL: usize = 1 << SLOT_BITS;
/// The first `SENTINELS` nodes are the heads of the wheel's slots; timer `t` is node `SENTINELS +
/// t`.
const SENTINELS: usize = LEVELS * SLOTS_PER_LEVEL;
/// The link value of a node that is in no slot (an unscheduled timer).
const UNLINKED: u32 = u32::MAX;

/// Most timers one wheel holds: identities are `0..TIMERS_MAX`, and a node index must stay below
/// `UNLINKED`.
pub const TIMERS_MAX: usize = UNLINKED as usize - SENTINELS;

const _: () = assert!(LEVELS * SLOT_BITS as usize >= u64::BITS as usize);
const _: () = assert!((LEVELS - 1) * (SLOT_BITS as usize) < u64::BITS as usize);
const _: () = assert!(SLOTS_PER_LEVEL == u64::BITS as usize);

/// A timer's deadline and its links in the circular list of its wheel slot. Also the shape of a
/// slot's sentinel, whose links point at itself when the slot is empty.
#[derive(Clone, Copy, Debug)]
struct Node {
    deadline_ms: u64,
    previous: u32,
    next: u32,
}

/// Bytes the wheel holds per timer identity, scheduled or not (one node).
pub const NODE_BYTES: usize = std::mem::size_of::<Node>();
const _: () = assert!(NODE_BYTES == 16);

/// A timer taken off the wheel by `pop_due`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The identity it was scheduled under (a message's slab slot).
    pub timer: u32,
    /// When it was due, ms on the caller's clock, at or before the `now_ms` that fired it.
    pub deadline_ms: u64,
}

/// A hierarchical timer wheel over `u32` timer identities.
#[derive(Debug)]
pub struct TimerWheel {
    /// Sentinels first, then one node per timer identity ever scheduled.
    nodes: Vec<Node>,
    /// Bit `i` of `occupied[l]` is set iff slot `i` of level `l` holds a timer.
    occupied: [u64; LEVELS],
    /// The wheel's time: every timer with a deadline before it has fired. Slots are laid out
    /// relative to it, and it never moves backwards (a clock that does is tolerated: its timers
    /// simply wait for the wheel's time to be reached again).
    elapsed_ms: u64,
    /// Timers currently scheduled.
    scheduled: usize,
}

impl Default for TimerWheel {
    fn default() -> Self {
        Self::new()
    }
}

impl TimerWheel {
    /// An empty wheel whose time is 0; the first `pop_due` moves it to the caller's time.
    pub fn new() -> TimerWheel {
        let nodes = (0..SENTINELS as u32)
            .map(|sentinel| Node {
                deadline_ms: 0,
                previous: sentinel,
                next: sentinel,
            })
            .collect();
        TimerWheel {
            nodes,
            occupied: [0; LEVELS],
            elapsed_ms: 0,
            scheduled: 0,
        }
    }

    /// Timers currently scheduled.
    pub fn len(&self) -> usize {
        self.scheduled
    }

    /// Whether no timer is scheduled.
    pub fn is_empty(&self) -> bool {
        self.scheduled == 0
    }

    /// Whether `timer` is scheduled.
    pub fn is_scheduled(&self, timer: u32) -> bool {
        self.nodes
            .get(Self::node_index(timer))
            .is_some_and(|node| node.previous != UNLINKED)
    }

    /// The deadline of `timer` if it is scheduled.
    pub fn deadline_ms(&self, timer: u32) -> Option<u64> {
        self.is_scheduled(timer)
            .then(|| self.nodes[Self::node_index(timer)].deadline_ms)
    }

    /// Schedules `timer`, which must not be scheduled, to fire at `deadline_ms`. O(1). A deadline
    /// already behind the wheel's time fires on the next `pop_due`.
    pub fn schedule(&mut self, timer: u32, deadline_ms: u64) {
        let node = Self::node_index(timer);
        if node >= self.nodes.len() {
            // Grow to a power of two of timers, as the slab's slots grow; plain doubling of the
            // node Vec would give capacities of 704 × 2^k, up to 44% more than the slab's.
            let timers_capacity = (timer as usize + 1).next_power_of_two();
            self.nodes
                .reserve_exact(SENTINELS + timers_capacity - self.nodes.len());
            self.nodes.resize(
                node + 1,
                Node {
                    deadline_ms: 0,
                    previous: UNLINKED,
                    next: UNLINKED,
                },
            );
        }
        assert_eq!(
            self.nodes[node].previous, UNLINKED,
            "timer already scheduled"
        );
        self.nodes[node].deadline_ms = deadline_ms;
        self.link(node);
        self.scheduled += 1;
    }

    /// Cancels `timer`, which must be scheduled. O(1).
    pub fn cancel(&mut self, timer: u32) {
        assert!(self.is_scheduled(timer), "cancelling an unscheduled timer");
        self.unlink(Self::node_index(timer));
        self.scheduled -= 1;
    }

    /// When the wheel next has work: `None` when no timer is scheduled, otherwise a time no later
    /// than the earliest deadline. It is that deadline exactly when the timer sits at level 0
    /// (within 64 ms of the wheel's time); otherwise it is the start of the timer's slot, where
    /// the timer moves down a level, so a runtime that sleeps until this time wakes at most ten
    /// extra times per timer. A time at or before the caller's now means work is due. O(levels).
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.next_slot().map(|slot| slot.start_ms)
    }

    /// Takes the next timer whose deadline is at or before `now_ms` off the wheel, in deadline
    /// order (timers with equal deadlines in no promised order). Each timer fired or moved down a
    /// level costs one unit of `work_budget`; `None` means nothing more is due or the budget is
    /// spent (then `next_deadline_ms() <= now_ms` tells which).
    pub fn pop_due(&mut self, now_ms: u64, work_budget: &mut usize) -> Option<Fired> {
        loop {
            let Some(slot) = self.next_slot().filter(|slot| slot.start_ms <= now_ms) else {
                // Nothing is due before now: the wheel's time may jump to it, since every
                // occupied slot still starts after it.
                self.elapsed_ms = self.elapsed_ms.max(now_ms);
                return None;
            };
            if *work_budget == 0 {
                return None;
            }
            *work_budget -= 1;
            assert!(slot.start_ms >= self.elapsed_ms);
            self.elapsed_ms = slot.start_ms;
            let sentinel = slot.level * SLOTS_PER_LEVEL + slot.index;
            let node = self.nodes[sentinel].next as usize;
            assert!(node >= SENTINELS, "an occupied slot is empty");
            self.unlink(node);
            if slot.level == 0 {
                self.scheduled -= 1;
                return Some(Fired {
                    timer: (node - SENTINELS) as u32,
                    deadline_ms: self.nodes[node].deadline_ms,
                });
            }
            // The slot's range starts at the wheel's time now, so the timer lands lower.
            self.link(node);
        }
    }

    fn node_index(timer: u32) -> usize {
        assert!((timer as usize) < TIMERS_MAX, "timer identity out of range");
        timer as usize + SENTINELS
    }

    /// The level and slot of a deadline relative to the wheel's time: the highest 6-bit group in
    /// which they differ. Deadlines behind the wheel's time go to the current level-0 slot.
    fn slot_for(&self, deadline_ms: u64) -> (usize, usize) {
        let deadline_ms = deadline_ms.max(self.elapsed_ms);
        let difference = deadline_ms ^ self.elapsed_ms;
        let level = if difference == 0 {
            0
        } else {
            ((u64::BITS - 1 - difference.leading_zeros()) / SLOT_BITS) as usize
        };
        let index = (deadline_ms >> (SLOT_BITS * level as u32)) as usize % SLOTS_PER_LEVEL;
        (level, index)
    }

    /// Appends `node` to the slot its deadline belongs in.
    fn link(&mut self, node: usize) {
        let (level, index) = self.slot_for(self.nodes[node].deadline_ms);
        let sentinel = level * SLOTS_PER_LEVEL + index;
        let tail = self.nodes[sentinel].previous as usize;
        self.nodes[node].previous = tail as u32;
        self.nodes[node].next = sentinel as u32;
        self.nodes[tail].next = node as u32;
        self.nodes[sentinel].previous = node as u32;
        self.occupied[level] |= 1 << index;
    }

    /// Takes `node` out of its slot, clearing the slot's occupancy bit if it was the last.
    fn unlink(&mut self, node: usize) {
        let Node { previous, next, .. } = self.nodes[node];
        assert_ne!(previous, UNLINKED);
        self.nodes[previous as usize].next = next;
        self.nodes[next as usize].previous = previous;
        if previous == next && (previous as usize) < SENTINELS {
            let sentinel = previous as usize;
            self.occupied[sentinel / SLOTS_PER_LEVEL] &= !(1 << (sentinel % SLOTS_PER_LEVEL));
        }
        self.nodes[node].previous = UNLINKED;
        self.nodes[node].next = UNLINKED;
    }

    /// The occupied slot that starts first (on a tie, the higher level, so that timers cascading
    /// into a level-0 slot arrive before that slot fires).
    ///
    /// Every occupied slot is at or after the wheel's position in its level: a timer placed at
    /// level `l` shares every bit above group `l` with the wheel's time, and the wheel's time
    /// never passes the start of an occupied slot. So the search needs no wrap-around.
    fn next_slot(&self) -> Option<SlotPosition> {
        let mut best: Option<SlotPosition> = None;
        for level in (0..LEVELS).rev() {
            let occupied = self.occupied[level];
            if occupied == 0 {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let current = ((self.elapsed_ms >> shift) % SLOTS_PER_LEVEL as u64) as u32;
            assert_eq!(
                occupied & ((1u64 << current) - 1),
                0,
                "an occupied wheel slot is behind the wheel's time"
            );
            let index = current + (occupied >> current).trailing_zeros();
            let span_shift = shift + SLOT_BITS;
            let base_ms = if span_shift >= u64::BITS {
                0
            } else {
                self.elapsed_ms >> span_shift << span_shift
            };
            let start_ms = base_ms | (u64::from(index) << shift);
            if best.is_none_or(|best| start_ms < best.start_ms) {
                best = Some(SlotPosition {
                    level,
                    index: index as usize,
                    start_ms,
                });
            }
        }
        best
    }

    /// Checks every structural invariant by walking every slot: O(timers). For tests.
    #[cfg(test)]
    pub fn verify(&self) {
        let mut linked = 0;
        for level in 0..LEVELS {
            for index in 0..SLOTS_PER_LEVEL {
                let sentinel = level * SLOTS_PER_LEVEL + index;
                let mut previous = sentinel;
                let mut node = self.nodes[sentinel].next as usize;
                let mut count = 0;
                while node != sentinel {
                    assert!(node >= SENTINELS);
                    assert_eq!(self.nodes[node].previous as usize, previous);
                    let deadline_ms = self.nodes[node].deadline_ms;
                    if self.slot_for(deadline_ms) != (level, index) {
                        // A slot the wheel's time has reached, partly cascaded when a budget ran
                        // out: its timers are still within its range, which holds that time.
                        let shift = SLOT_BITS * level as u32;
                        assert!(level > 0);
                        assert_eq!(deadline_ms >> shift, self.elapsed_ms >> shift);
                    }
                    previous = node;
                    node = self.nodes[node].next as usize;
                    count += 1;
                }
                assert_eq!(self.nodes[sentinel].previous as usize, previous);
                assert_eq!(self.occupied[level] & (1 << index) != 0, count > 0);
                linked += count;
            }
        }
        assert_eq!(linked, self.scheduled);
        let unlinked_nodes = self.nodes[SENTINELS..]
            .iter()
            .filter(|node| node.previous == UNLINKED)
            .count();
        assert_eq!(
            unlinked_nodes + self.scheduled,
            self.nodes.len() - SENTINELS
        );
    }
}

/// One slot of the wheel and the time its range starts.
#[derive(Clone, Copy, Debug)]
struct SlotPosition {
    level: usize,
    index: usize,
    start_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn drain(wheel: &mut TimerWheel, now_ms: u64) -> Vec<Fired> {
        let mut budget = usize::MAX;
        let mut fired = Vec::new();
        while let Some(timer) = wheel.pop_due(now_ms, &mut budget) {
            fired.push(timer);
        }
        fired
    }

    #[test]
    fn empty_wheel_has_no_deadline() {
        let mut wheel = TimerWheel::new();
        assert_eq!(wheel.next_deadline_ms(), None);
        assert_eq!(drain(&mut wheel, 1_000), vec![]);
        assert!(wheel.is_empty());
        wheel.verify();
    }

    #[test]
    fn fires_at_deadline_not_before() {
        let mut wheel = TimerWheel::new();
        let now_ms = 1_700_000_000_000;
        assert_eq!(drain(&mut wheel, now_ms), vec![]);
        wheel.schedule(7, now_ms + 30_000);
        assert!(wheel.is_scheduled(7));
        assert_eq!(wheel.deadline_ms(7), Some(now_ms + 30_000));
        assert!(wheel.next_deadline_ms().unwrap() <= now_ms + 30_000);
        assert_eq!(drain(&mut wheel, now_ms + 29_999), vec![]);
        assert_eq!(
            drain(&mut wheel, now_ms + 30_000),
            vec![Fired {
                timer: 7,
                deadline_ms: now_ms + 30_000
            }]
        );
        assert!(!wheel.is_scheduled(7));
        assert_eq!(wheel.next_deadline_ms(), None);
        wheel.verify();
    }

    #[test]
    fn cancelled_timer_never_fires_and_is_reusable() {
        let mut wheel = TimerWheel::new();
        wheel.schedule(1, 500);
        wheel.schedule(2, 500);
        wheel.cancel(1);
        wheel.verify();
        assert_eq!(
            drain(&mut wheel, 1_000),
            vec![Fired {
                timer: 2,
                deadline_ms: 500
            }]
        );
        wheel.schedule(1, 2_000);
        assert_eq!(drain(&mut wheel, 2_000).len(), 1);
        wheel.verify();
    }

    #[test]
    fn past_deadline_fires_on_next_pop() {
        let mut wheel = TimerWheel::new();
        assert_eq!(drain(&mut wheel, 10_000), vec![]);
        wheel.schedule(3, 5_000);
        wheel.verify();
        assert_eq!(wheel.next_deadline_ms(), Some(10_000));
        assert_eq!(
            drain(&mut wheel, 10_000),
            vec![Fired {
                timer: 3,
                deadline_ms: 5_000
            }]
        );
    }

    #[test]
    fn clock_going_backwards_fires_nothing_early() {
        let mut wheel = TimerWheel::new();
        assert_eq!(drain(&mut wheel, 10_000), vec![]);
        wheel.schedule(1, 10_500);
        assert_eq!(drain(&mut wheel, 9_000), vec![]);
        assert_eq!(drain(&mut wheel, 10_499), vec![]);
        assert_eq!(drain(&mut wheel, 10_500).len(), 1);
    }

    #[test]
    fn far_deadlines_cover_the_whole_range() {
        let mut wheel = TimerWheel::new();
        let now_ms = 1_700_000_000_000;
        assert_eq!(drain(&mut wheel, now_ms), vec![]);
        let deadlines = [
            now_ms + 1,
            now_ms + 64,
            now_ms + 86_400_000 * 365 * 100,
            crate::queue::EXPIRATION_NEVER_MS - 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        for (timer, &deadline_ms) in deadlines.iter().enumerate() {
            wheel.schedule(timer as u32, deadline_ms);
        }
        wheel.verify();
        let fired = drain(&mut wheel, u64::MAX);
        let fired_deadlines: Vec<u64> = fired.iter().map(|fired| fired.deadline_ms).collect();
        assert_eq!(fired_deadlines, deadlines);
        wheel.verify();
    }

    #[test]
    fn budget_bounds_work_and_resumes() {
        let mut wheel = TimerWheel::new();
        for timer in 0..100 {
            wheel.schedule(timer, 1_000 + u64::from(timer) * 1_000);
        }
        let mut fired = Vec::new();
        let mut calls = 0;
        loop {
            let mut budget = 3;
            while let Some(timer) = wheel.pop_due(1_000_000, &mut budget) {
                fired.push(timer);
            }
            calls += 1;
            wheel.verify();
            if wheel
                .next_deadline_ms()
                .is_none_or(|deadline| deadline > 1_000_000)
            {
                break;
            }
            assert_eq!(budget, 0);
        }
        assert_eq!(fired.len(), 100);
        assert!(calls > 100 / 3);
        assert!(fired
            .windows(2)
            .all(|pair| pair[0].deadline_ms <= pair[1].deadline_ms));
    }

    /// Random schedules, cancels and advances (small steps and jumps of up to years) against a
    /// `BTreeSet<(deadline, timer)>`: each advance fires exactly the due timers, in deadline order,
    /// never one early; with a budget, the fired ones are the earliest due.
    #[test]
    fn matches_btree_model() {
        for seed in 0..40u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_model(&mut rng, seed)
            }));
            if let Err(panic) = result {
                eprintln!("wheel model failed with seed {seed}");
                std::panic::resume_unwind(panic);
            }
        }
    }

    fn run_model(rng: &mut fastrand::Rng, seed: u64) {
        const TIMERS: u32 = 300;
        let mut wheel = TimerWheel::new();
        let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
        let mut deadlines: Vec<Option<u64>> = vec![None; TIMERS as usize];
        let mut now_ms: u64 = if seed % 2 == 0 {
            0
        } else {
            1_700_000_000_000 + rng.u64(..1 << 30)
        };
        for _ in 0..3_000 {
            match rng.u32(..10) {
                0..=4 => {
                    let timer = rng.u32(..TIMERS);
                    if deadlines[timer as usize].is_some() {
                        continue;
                    }
                    let delay_ms = match rng.u32(..6) {
                        0 => rng.u64(..64),
                        1 => rng.u64(..5_000),
                        2 => rng.u64(..604_800_000),
                        3 => rng.u64(..1 << 40),
                        4 => rng.u64(..u64::MAX - now_ms),
                        _ => rng.u64(1..300),
                    };
                    let deadline_ms = now_ms + delay_ms;
                    wheel.schedule(timer, deadline_ms);
                    model.insert((deadline_ms, timer));
                    deadlines[timer as usize] = Some(deadline_ms);
                }
                5 => {
                    let timer = rng.u32(..TIMERS);
                    if let Some(deadline_ms) = deadlines[timer as usize].take() {
                        wheel.cancel(timer);
                        assert!(model.remove(&(deadline_ms, timer)));
                    }
                }
                _ => {
                    now_ms = now_ms.saturating_add(match rng.u32(..8) {
                        0 => 0,
                        1..=4 => rng.u64(..2_000),
                        5 => rng.u64(..100_000_000),
                        6 => rng.u64(..1 << 38),
                        _ => rng.u64(..1 << 45),
                    });
                    let mut budget = if rng.bool() {
                        usize::MAX
                    } else {
                        rng.usize(1..50)
                    };
                    let mut fired = Vec::new();
                    while let Some(timer) = wheel.pop_due(now_ms, &mut budget) {
                        fired.push(timer);
                    }
                    let mut previous_ms = 0;
                    for timer in &fired {
                        assert!(timer.deadline_ms <= now_ms, "fired early");
                        assert!(timer.deadline_ms >= previous_ms, "out of deadline order");
                        previous_ms = timer.deadline_ms;
                        assert_eq!(
                            deadlines[timer.timer as usize].take(),
                            Some(timer.deadline_ms)
                        );
                        // Everything strictly earlier than a fired timer has fired already.
                        let earliest = model.first().copied();
                        assert!(earliest
                            .is_some_and(|(deadline_ms, _)| deadline_ms == timer.deadline_ms));
                        assert!(model.remove(&(timer.deadline_ms, timer.timer)));
                    }
                    let more_due = wheel
                        .next_deadline_ms()
                        .is_some_and(|deadline| deadline <= now_ms);
                    if !more_due {
                        assert!(
                            model
                                .first()
                                .is_none_or(|&(deadline_ms, _)| deadline_ms > now_ms),
                            "a due timer did not fire"
                        );
                    } else {
                        assert_eq!(budget, 0);
                    }
                }
            }
            assert_eq!(wheel.len(), model.len());
            match (wheel.next_deadline_ms(), model.first()) {
                (None, None) => {}
                (Some(next_ms), Some(&(earliest_ms, _))) => assert!(next_ms <= earliest_ms),
                (next, earliest) => panic!("next deadline {next:?} but earliest {earliest:?}"),
            }
        }
        wheel.verify();
    }
}
