//! Micro-benchmarks of the queue hot paths: the slab, the timer wheel with a million timers, and a
//! shard's Put → Get → Delete and Peek(32) at depths 10, 1,000 and 1,000,000 (their cost must not
//! depend on depth; Peek at depth 10 returns only 10 messages, hence the middle depth). Before the
//! benchmarks it measures, with a counting allocator, the heap bytes a stored message costs beyond
//! its text.
//!
//! Run: `cargo bench --bench queue -- --warm-up-time 1 --measurement-time 3`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};

use azq::queue::slab::{Message, MessageSlab, TTL_S_NEVER};
use azq::queue::wheel::TimerWheel;
use azq::queue::{Command, MessageView, QueueKey, Reply, ShardState};
use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput};

/// The system allocator, counting the bytes currently allocated.
struct CountingAllocator;

static ALLOCATED_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the counter is a side
// effect.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        ALLOCATED_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, size_new: usize) -> *mut u8 {
        ALLOCATED_BYTES.fetch_add(
            size_new as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(pointer, layout, size_new) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const NOW: u64 = 1_700_000_000_000;
const DEEP: usize = 1_000_000;
const SHALLOW: usize = 10;
/// Deep enough for Peek(32) to return 32, shallow enough to stay in cache.
const MEDIUM: usize = 1_000;
const TEXT_BYTES: usize = 16;
/// Azure's default TTL, so every message also carries an expiry timer.
const TTL_S: u64 = 604_800;

fn queue_key() -> QueueKey {
    QueueKey {
        account: "devstoreaccount1".to_string(),
        name: "bench".to_string(),
    }
}

fn text() -> Bytes {
    // A fresh allocation per message, as the api layer makes when it copies a decoded body.
    Bytes::copy_from_slice(&[b'x'; TEXT_BYTES])
}

fn messages(reply: Result<Reply, azq::error::StorageError>) -> Vec<MessageView> {
    match reply {
        Ok(Reply::Messages(views)) => views,
        other => panic!("expected messages, got {other:?}"),
    }
}

fn put(state: &mut ShardState, now_ms: u64) -> MessageView {
    let command = Command::PutMessage {
        queue: queue_key(),
        text: text(),
        visibility_timeout_s: 0,
        ttl_s: Some(TTL_S),
    };
    messages(state.apply(command, now_ms)).remove(0)
}

/// A shard with one queue holding `depth` visible messages.
fn shard_with(depth: usize) -> ShardState {
    let mut state = ShardState::new(0, 1);
    let create = Command::CreateQueue {
        queue: queue_key(),
        metadata: vec![],
    };
    state.apply(create, NOW).unwrap();
    for index in 0..depth {
        put(&mut state, NOW + index as u64 / 1000);
    }
    state
}

/// Heap bytes per message beyond its text, in three situations: just put (the put's reply has
/// shared the text, which gives it a reference count), after each message was leased once and its
/// lease ran out (it reappears behind newer messages, in the out-of-order map), and the slab and
/// wheel alone (capacity included, so this is what a deep queue really costs).
fn report_memory() {
    let allocated = || ALLOCATED_BYTES.load(Ordering::Relaxed);
    let before = allocated();
    let mut slab = MessageSlab::new();
    for sequence in 0..DEEP as u64 {
        slab.insert(Message::new(0, Bytes::new(), sequence, NOW, 0, TTL_S_NEVER))
            .unwrap();
    }
    println!(
        "memory: slab alone {:.1} bytes per message (80-byte slots + Vec capacity)",
        (allocated() - before) as f64 / DEEP as f64
    );
    drop(slab);
    let wheel = wheel_with(&spread_deadlines());
    println!(
        "memory: wheel alone {:.1} bytes per timer (16-byte nodes + Vec capacity)",
        (allocated() - before) as f64 / DEEP as f64
    );
    drop(wheel);
    let before = allocated();
    let mut state = shard_with(DEEP);
    let after_put = ALLOCATED_BYTES.load(Ordering::Relaxed);
    let per_message = |bytes: isize| (bytes as f64 / DEEP as f64) - TEXT_BYTES as f64;
    println!(
        "memory: {:.1} bytes per visible message beyond its {TEXT_BYTES}-byte text: slot 80 + \
         wheel node 16 + the text's 24-byte reference count (bytes' `Shared`, made when a reply \
         first shares the text; Put's does) + Vec capacity beyond length",
        per_message(after_put - before)
    );
    // Lease every message for 1 s, put one newer message, and let the leases run out: each
    // reappears behind the newer one, in the out-of-order map.
    let leased_at = NOW + 10_000;
    for _ in 0..DEEP / 32 + 1 {
        let command = Command::GetMessages {
            queue: queue_key(),
            count: 32,
            visibility_timeout_s: 1,
        };
        drop(messages(state.apply(command, leased_at)));
    }
    put(&mut state, leased_at + 500);
    while state.advance(leased_at + 1_000, usize::MAX) {}
    let after_reappear = ALLOCATED_BYTES.load(Ordering::Relaxed);
    println!(
        "memory: {:.1} bytes per message reappeared out of order (adds its BTreeMap entry)",
        per_message(after_reappear - before)
    );
    drop(state);
    println!(
        "memory: {} bytes left allocated after dropping the shard",
        ALLOCATED_BYTES.load(Ordering::Relaxed) - before
    );
}

fn bench_slab(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("slab");
    for resident in [SHALLOW, DEEP] {
        let mut slab = MessageSlab::new();
        for sequence in 0..resident as u64 {
            slab.insert(Message::new(0, Bytes::new(), sequence, NOW, 0, TTL_S_NEVER))
                .unwrap();
        }
        group.bench_function(format!("insert+remove/{resident}_resident"), |bencher| {
            let mut sequence = resident as u64;
            bencher.iter(|| {
                sequence += 1;
                let message = Message::new(0, Bytes::new(), sequence, NOW, 0, TTL_S_NEVER);
                let (slot, _) = slab.insert(message).unwrap();
                black_box(slab.remove(slot));
            })
        });
    }
    group.finish();
}

/// Deadlines of a million timers spread over a week, as TTLs and leases would be.
fn spread_deadlines() -> Vec<u64> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..DEEP).map(|_| NOW + rng.u64(1..604_800_000)).collect()
}

fn wheel_with(deadlines: &[u64]) -> TimerWheel {
    let mut wheel = TimerWheel::new();
    let mut budget = usize::MAX;
    assert!(wheel.pop_due(NOW, &mut budget).is_none());
    for (timer, &deadline_ms) in deadlines.iter().enumerate() {
        wheel.schedule(timer as u32, deadline_ms);
    }
    wheel
}

fn bench_wheel(criterion: &mut Criterion) {
    let deadlines = spread_deadlines();
    let mut group = criterion.benchmark_group("wheel");
    group.sample_size(10);
    group.throughput(Throughput::Elements(DEEP as u64));
    group.bench_function("schedule/1m", |bencher| {
        bencher.iter_batched(
            || {
                let mut wheel = wheel_with(&[]);
                // Pre-size the nodes so the batch measures scheduling, not Vec growth.
                wheel.schedule(DEEP as u32, NOW + 1);
                wheel.cancel(DEEP as u32);
                wheel
            },
            |mut wheel| {
                for (timer, &deadline_ms) in deadlines.iter().enumerate() {
                    wheel.schedule(timer as u32, deadline_ms);
                }
                wheel
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("cancel/1m", |bencher| {
        bencher.iter_batched(
            || wheel_with(&deadlines),
            |mut wheel| {
                for timer in 0..DEEP as u32 {
                    wheel.cancel(timer);
                }
                wheel
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("advance_fire_all/1m", |bencher| {
        bencher.iter_batched(
            || wheel_with(&deadlines),
            |mut wheel| {
                let mut budget = usize::MAX;
                let mut fired = 0;
                while let Some(timer) = wheel.pop_due(NOW + 604_800_000, &mut budget) {
                    black_box(timer);
                    fired += 1;
                }
                assert_eq!(fired, DEEP);
                wheel
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    let mut group = criterion.benchmark_group("wheel");
    let mut wheel = wheel_with(&deadlines);
    group.bench_function("schedule+cancel/1m_resident", |bencher| {
        let mut rng = fastrand::Rng::with_seed(9);
        bencher.iter(|| {
            wheel.schedule(DEEP as u32, NOW + rng.u64(1..604_800_000));
            wheel.cancel(DEEP as u32);
        })
    });
    group.finish();
}

fn bench_shard(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("shard");
    for depth in [SHALLOW, MEDIUM, DEEP] {
        let mut state = shard_with(depth);
        let mut now_ms = NOW + 1_000;
        group.bench_function(format!("put+get+delete/{depth}"), |bencher| {
            bencher.iter(|| {
                now_ms += 1;
                black_box(put(&mut state, now_ms));
                let get = Command::GetMessages {
                    queue: queue_key(),
                    count: 1,
                    visibility_timeout_s: 30,
                };
                let view = messages(state.apply(get, now_ms)).remove(0);
                let delete = Command::DeleteMessage {
                    queue: queue_key(),
                    message_id: view.message_id,
                    pop_receipt: view.pop_receipt.unwrap(),
                };
                state.apply(delete, now_ms).unwrap();
            })
        });
        group.bench_function(format!("peek32/{depth}"), |bencher| {
            bencher.iter(|| {
                let peek = Command::PeekMessages {
                    queue: queue_key(),
                    count: 32,
                };
                let views = messages(state.apply(peek, now_ms));
                assert_eq!(views.len(), depth.min(32));
                black_box(views);
            })
        });
    }
    group.finish();
}

fn main() {
    report_memory();
    let mut criterion = Criterion::default().configure_from_args();
    bench_slab(&mut criterion);
    bench_wheel(&mut criterion);
    bench_shard(&mut criterion);
    criterion.final_summary();
}
