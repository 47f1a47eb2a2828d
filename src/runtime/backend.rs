//! The seam between azq's runtime and the event loop under it. Everything above this trait (the
//! shard's main task, the connection loop, the mesh, the timer task) is written once, generic
//! over `Backend`; each backend provides a single-threaded executor on the current thread,
//! timers, TCP sockets and bounded cross-thread channels:
//!
//! - `uring::IoUring`: glommio on io_uring (Linux only), with `--runtime io_uring`;
//! - `portable::Portable`: a tokio current-thread runtime per shard thread (epoll, kqueue or
//!   IOCP), the default (`auto`: measured faster, `select`'s doc), and the one that serves
//!   where io_uring is blocked (Docker's and containerd's default seccomp profiles, gVisor,
//!   hardened kernels) and on systems other than Linux.
//!
//! Both keep the design: one thread per shard, pinned to its CPU where the system can pin, whose
//! tasks share nothing with other shards' but bounded channels.
//!
//! azq-loadgen runs its client cores on the same trait (a pinned thread per core, tasks,
//! timers, TCP connect, read and write), chosen by the same `select`: what it needs beyond a
//! server (a loop that polls rather than sleeps, tasks it can await or cancel) is here too.
//!
//! This file is only the seam: which backend a run uses, and the io_uring probe behind that
//! choice, are `select`'s.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::storage::files::Disk;

/// A joined mesh end: the senders, and one receiver per peer (`None` at the shard's own index);
/// or why the mesh could not be joined.
pub type JoinedMesh<Senders, Receiver> = Result<(Senders, Vec<Option<Receiver>>), String>;

/// A single-threaded event loop and its I/O, as one shard (or one azq-loadgen core) uses it.
/// Every method but `run` must be called on a thread inside `run`.
pub trait Backend: Sized + 'static {
    /// The backend's name in the ready line and the health endpoint.
    const NAME: &'static str;

    /// A listening TCP socket of one shard.
    type Listener;
    /// A TCP connection, accepted or connected.
    type Stream;
    /// One shard's end of a full mesh of bounded channels carrying `T`, before the shard's
    /// thread has joined it (it moves into that thread).
    type MeshEnd<T: Send + 'static>: Send;
    /// The joined sending side of a mesh: one channel to every other shard.
    type MeshSenders<T: Send + 'static>;
    /// The joined receiving side of a mesh from one peer, owned by the task that reads it.
    type MeshReceiver<T: Send + 'static>;
    /// Files as a durable shard's log and snapshots write them on this event loop.
    type Disk: Disk;

    /// The disk of the current thread's loop.
    fn disk() -> Self::Disk;

    /// A task started with `spawn_task`: awaiting it gives the future's output, dropping it
    /// cancels the future.
    type Task<T: 'static>: Future<Output = T>;

    /// Creates the event loop on the current thread, pinned to `cpu` where the system can pin,
    /// and runs `main` on it to completion; `idle` says how the loop waits for work. An error
    /// is why the loop could not be created.
    fn run<F: Future<Output = ()> + 'static>(cpu: usize, idle: Idle, main: F)
        -> Result<(), String>;

    /// Runs `future` on the current thread's loop, detached from the caller.
    fn spawn<F: Future<Output = ()> + 'static>(future: F);

    /// Runs `future` on the current thread's loop beside the caller, which may await its
    /// output or cancel it by dropping the task.
    fn spawn_task<T: 'static, F: Future<Output = T> + 'static>(future: F) -> Self::Task<T>;

    /// Completes after `duration`.
    fn sleep(duration: Duration) -> impl Future<Output = ()>;

    /// How late `sleep` may complete by design (its timer's tick), beyond scheduling delays: a
    /// waiter that must be punctual (azq-loadgen's open-loop schedule) sleeps until this much
    /// before its deadline and polls for the rest.
    const SLEEP_GRANULARITY: Duration;

    /// Completes after `duration`, to the kernel's precision rather than the timer wheel's: for
    /// waiters that must wake on time without polling long (azq-loadgen's parked cores, group
    /// commit's holds of well under a millisecond). Costs a few system calls more than `sleep`,
    /// so the server's other timers use `sleep`.
    fn sleep_precise(duration: Duration) -> impl Future<Output = ()> {
        Self::sleep(duration)
    }

    /// How late `sleep_precise` may complete by design (`SLEEP_GRANULARITY` where it cannot do
    /// better than `sleep`).
    const SLEEP_PRECISE_GRANULARITY: Duration;

    /// A full mesh of `shards` ends (one per shard) whose channels hold `capacity` values.
    fn mesh<T: Send + 'static>(shards: usize, capacity: usize) -> Vec<Self::MeshEnd<T>>;

    /// Joins a mesh end on its shard's thread, once every shard does (it waits for the others):
    /// the senders, and one receiver per peer (`None` at the shard's own index).
    fn join_mesh<T: Send + 'static>(
        end: Self::MeshEnd<T>,
    ) -> impl Future<Output = JoinedMesh<Self::MeshSenders<T>, Self::MeshReceiver<T>>>;

    /// Sends `value` to shard `peer`, waiting while its channel is full (backpressure); false
    /// when the peer has gone.
    fn send_to<T: Send + 'static>(
        senders: &Self::MeshSenders<T>,
        peer: usize,
        value: T,
    ) -> impl Future<Output = bool>;

    /// The next value from the receiver's peer; `None` once the peer has gone.
    fn receive<T: Send + 'static>(
        receiver: &mut Self::MeshReceiver<T>,
    ) -> impl Future<Output = Option<T>>;

    /// A listener on `address` with SO_REUSEPORT, so that every shard listens on the same
    /// address and the kernel spreads connections between them.
    fn bind(address: SocketAddr) -> io::Result<Self::Listener>;

    /// The next connection, with Nagle's algorithm off, and its peer's address.
    fn accept(
        listener: &Self::Listener,
    ) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>>;

    /// A connection to `address`, with Nagle's algorithm off.
    fn connect(address: SocketAddr) -> impl Future<Output = io::Result<Self::Stream>>;

    /// Appends what arrives next to `input`: the byte count, 0 at end of stream, or an error
    /// (`TimedOut` when nothing arrived within `timeout` of the read's first wait, found by
    /// `deadline`'s sweep: up to `READ_DEADLINE_SWEEP_MS` late).
    fn read(
        stream: &mut Self::Stream,
        input: &mut BytesMut,
        timeout: Duration,
    ) -> impl Future<Output = io::Result<usize>>;

    /// Reads what arrives next into `buffer`, which the caller owns and reuses: the byte count,
    /// 0 at end of stream, or an error (`TimedOut` as `read`'s).
    /// Safe to cancel: a read that loses a race loses no byte. Where `read` appends to a
    /// growing `BytesMut` (on glommio, a copy out of glommio's own buffer), this fills a
    /// fixed, zeroed-once buffer in place, straight from the socket: azq-loadgen's connections
    /// read this way, 3-4% fewer instructions per Put than through `read` (callgrind).
    fn read_into(
        stream: &mut Self::Stream,
        buffer: &mut [u8],
        timeout: Duration,
    ) -> impl Future<Output = io::Result<usize>>;

    /// Writes all of `bytes`, or fails with `TimedOut` when a write makes no progress for as
    /// long as `timeout` allows, or all of them have not finished by its deadline (a client
    /// that does not read its answers).
    fn write_all(
        stream: &mut Self::Stream,
        bytes: &[u8],
        timeout: WriteTimeout,
    ) -> impl Future<Output = io::Result<()>>;

    /// Closes the connection after what was written.
    fn close(stream: Self::Stream) -> impl Future<Output = ()>;

    /// Aborts the connection: SO_LINGER 0, so the peer gets a TCP RST rather than a FIN and
    /// anything unsent is dropped (a reset fault).
    fn reset(stream: Self::Stream);
}

/// What an event loop does when it has nothing to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Sleep in the kernel until I/O or a timer is due, leaving the CPU to others: a shard.
    Park,
    /// Keep polling for I/O and timers rather than sleep: wake-ups are punctual and cheap, at
    /// the price of a busy CPU (azq-loadgen's pinned or open-loop cores, whose latency figures
    /// would otherwise include the kernel's wake-up). glommio polls for this long after its
    /// last task ran before it sleeps; the portable backend polls for as long as the loop runs
    /// (tokio cannot tell when it last had work).
    Poll(Duration),
}

/// How long writing one batch of bytes may take: each write may wait `stalled` for the peer to
/// take a byte (a write timeout, as nginx's `send_timeout`), and the whole batch must be
/// written by its deadline. `None` waits as long as it takes.
#[derive(Clone, Copy, Debug)]
pub struct WriteTimeout {
    stalled: Option<Duration>,
    deadline: Deadline,
}

/// When a batch of writes must be done.
#[derive(Clone, Copy, Debug)]
enum Deadline {
    /// No bound.
    Never,
    /// By this instant.
    At(Instant),
    /// This long after the first write that asks (`next_wait`): a batch the socket takes at
    /// once, without asking, costs no clock read.
    After(Duration),
}

impl WriteTimeout {
    /// Each write may wait `stalled` for progress, and all of them together `total` from the
    /// first one that asks how long it may wait (a write the socket takes at once need not ask:
    /// the bound starts, microseconds later than the call, when a write first may have to wait).
    pub fn new(stalled: Duration, total: Duration) -> WriteTimeout {
        WriteTimeout {
            stalled: Some(stalled),
            deadline: Deadline::After(total),
        }
    }

    /// Every write must be done by `deadline` (a handshake or a read's deadline).
    pub fn until(deadline: Instant) -> WriteTimeout {
        WriteTimeout {
            stalled: None,
            deadline: Deadline::At(deadline),
        }
    }

    /// No bound: a client (azq-loadgen) that waits for the server as long as it takes.
    pub fn unbounded() -> WriteTimeout {
        WriteTimeout {
            stalled: None,
            deadline: Deadline::Never,
        }
    }

    /// This bound with its deadline fixed now, for a batch written in several calls of
    /// `Backend::write_all` (each call gets a copy: a deadline still to be fixed would start
    /// afresh in each).
    pub fn fixed(mut self) -> WriteTimeout {
        if let Deadline::After(total) = self.deadline {
            self.deadline = Instant::now()
                .checked_add(total)
                .map_or(Deadline::Never, Deadline::At);
        }
        self
    }

    /// How long the next write may wait for the peer (`None`: as long as it takes);
    /// `TimedOut` once the deadline has passed. The first call fixes a deadline given as a
    /// duration.
    pub fn next_wait(&mut self) -> io::Result<Option<Duration>> {
        let now = Instant::now();
        let deadline = match self.deadline {
            Deadline::Never => return Ok(self.stalled),
            Deadline::At(deadline) => deadline,
            Deadline::After(total) => {
                let Some(deadline) = now.checked_add(total) else {
                    self.deadline = Deadline::Never;
                    return Ok(self.stalled);
                };
                self.deadline = Deadline::At(deadline);
                deadline
            }
        };
        let left = deadline
            .checked_duration_since(now)
            .filter(|left| !left.is_zero())
            .ok_or(io::ErrorKind::TimedOut)?;
        Ok(Some(self.stalled.map_or(left, |stalled| stalled.min(left))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A total given as a duration starts when a write first asks (so a batch the socket takes
    /// at once reads no clock), and a fixed one is shared by every copy.
    #[test]
    fn write_timeout_fixes_its_deadline_when_first_asked() {
        let stalled = Duration::from_secs(10);
        let total = Duration::from_secs(1);
        let mut timeout = WriteTimeout::new(stalled, total);
        assert!(matches!(timeout.deadline, Deadline::After(_)));
        let wait = timeout.next_wait().unwrap().unwrap();
        assert!(wait <= total && !wait.is_zero());
        assert!(matches!(timeout.deadline, Deadline::At(_)));

        let fixed = WriteTimeout::new(stalled, total).fixed();
        assert!(matches!(fixed.deadline, Deadline::At(_)));
        let mut passed = WriteTimeout::new(stalled, Duration::ZERO).fixed();
        assert_eq!(
            passed.next_wait().unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        assert_eq!(WriteTimeout::unbounded().next_wait().unwrap(), None);
        let mut endless = WriteTimeout::new(stalled, Duration::MAX);
        assert_eq!(endless.next_wait().unwrap(), Some(stalled));
    }
}
