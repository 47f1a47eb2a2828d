//! The portable backend: a tokio current-thread runtime with a `LocalSet` per shard thread, so
//! that a shard's tasks stay on its thread (`Rc`, no `Send`) exactly as on glommio. tokio polls
//! with epoll on Linux (kqueue, IOCP elsewhere), which no container's default seccomp profile
//! denies; its timers are a per-runtime wheel; the mesh is a full matrix of tokio's bounded
//! `mpsc` channels, one per ordered pair of shards.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

use super::backend::{Backend, Idle, JoinedMesh, WriteTimeout};
use super::deadline;
use crate::limits::{LISTEN_BACKLOG, LOG_ZERO_FILL_BUFFERED_BYTES};
use crate::storage::files::{shrink_file, sync_directory, Disk};

/// Room made in the read buffer before each read, so a read takes what a segment brings.
const READ_RESERVE_BYTES: usize = 16 * 1024;

/// tokio's current-thread runtime.
pub struct Portable;

/// One shard's end of the mesh: a sender to every other shard and a receiver from each.
pub struct MeshEnd<T> {
    senders: Vec<Option<mpsc::Sender<T>>>,
    receivers: Vec<Option<mpsc::Receiver<T>>>,
}

impl Backend for Portable {
    const NAME: &'static str = "portable";

    type Listener = TcpListener;
    type Stream = TcpStream;
    type MeshEnd<T: Send + 'static> = MeshEnd<T>;
    type MeshSenders<T: Send + 'static> = Vec<Option<mpsc::Sender<T>>>;
    type MeshReceiver<T: Send + 'static> = mpsc::Receiver<T>;
    type Disk = BlockingDisk;
    type Task<T: 'static> = AbortOnDrop<T>;

    fn disk() -> BlockingDisk {
        BlockingDisk
    }

    fn run<F: Future<Output = ()> + 'static>(
        cpu: usize,
        idle: Idle,
        main: F,
    ) -> Result<(), String> {
        super::os::pin_current_thread(cpu);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|error| format!("cannot start the portable runtime on CPU {cpu}: {error}"))?;
        let tasks = tokio::task::LocalSet::new();
        if let Idle::Poll(_) = idle {
            // A task that always yields: tokio defers its wake-up until the loop has run out
            // of ready tasks, then polls for I/O without waiting (epoll_wait with a zero
            // timeout) instead of sleeping. It ends with the loop, when `main` returns.
            tasks.spawn_local(async {
                loop {
                    tokio::task::yield_now().await;
                }
            });
        }
        tasks.block_on(&runtime, main);
        Ok(())
    }

    fn spawn<F: Future<Output = ()> + 'static>(future: F) {
        drop(tokio::task::spawn_local(future));
    }

    fn spawn_task<T: 'static, F: Future<Output = T> + 'static>(future: F) -> AbortOnDrop<T> {
        AbortOnDrop(tokio::task::spawn_local(future))
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    /// tokio's timer wheel fires on whole milliseconds, rounding every deadline up.
    const SLEEP_GRANULARITY: Duration = Duration::from_millis(1);

    /// On Linux a timerfd of its own, which the loop's epoll wakes on to the kernel's precision
    /// (tokio's wheel would round the deadline up to the next millisecond); elsewhere, or when
    /// no timerfd can be made, tokio's `sleep`.
    async fn sleep_precise(duration: Duration) {
        #[cfg(target_os = "linux")]
        if let Ok(timer) = precise::Timer::armed(duration) {
            timer.expired().await;
            return;
        }
        tokio::time::sleep(duration).await;
    }

    /// On Linux the timerfd's precision; elsewhere tokio's millisecond.
    const SLEEP_PRECISE_GRANULARITY: Duration = if cfg!(target_os = "linux") {
        Duration::ZERO
    } else {
        Duration::from_millis(1)
    };

    fn mesh<T: Send + 'static>(shards: usize, capacity: usize) -> Vec<Self::MeshEnd<T>> {
        let mut ends: Vec<MeshEnd<T>> = (0..shards)
            .map(|_| MeshEnd {
                senders: (0..shards).map(|_| None).collect(),
                receivers: (0..shards).map(|_| None).collect(),
            })
            .collect();
        for from in 0..shards {
            for to in (0..shards).filter(|&to| to != from) {
                let (sender, receiver) = mpsc::channel(capacity);
                ends[from].senders[to] = Some(sender);
                ends[to].receivers[from] = Some(receiver);
            }
        }
        ends
    }

    async fn join_mesh<T: Send + 'static>(
        end: Self::MeshEnd<T>,
    ) -> JoinedMesh<Self::MeshSenders<T>, Self::MeshReceiver<T>> {
        Ok((end.senders, end.receivers))
    }

    async fn send_to<T: Send + 'static>(
        senders: &Self::MeshSenders<T>,
        peer: usize,
        value: T,
    ) -> bool {
        match &senders[peer] {
            Some(sender) => sender.send(value).await.is_ok(),
            None => false,
        }
    }

    async fn receive<T: Send + 'static>(receiver: &mut Self::MeshReceiver<T>) -> Option<T> {
        receiver.recv().await
    }

    fn bind(address: SocketAddr) -> io::Result<Self::Listener> {
        let socket = match address {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        #[cfg(unix)]
        socket.set_reuseport(true)?;
        socket.bind(address)?;
        socket.listen(LISTEN_BACKLOG)
    }

    async fn accept(listener: &Self::Listener) -> io::Result<(Self::Stream, SocketAddr)> {
        let (stream, peer) = listener.accept().await?;
        stream.set_nodelay(true)?;
        Ok((stream, peer))
    }

    async fn connect(address: SocketAddr) -> io::Result<Self::Stream> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    async fn read(
        stream: &mut Self::Stream,
        input: &mut BytesMut,
        timeout: Duration,
    ) -> io::Result<usize> {
        input.reserve(READ_RESERVE_BYTES);
        // tokio reads into the buffer's spare capacity directly: no intermediate copy. Bounded
        // by the shard's sweep rather than a tokio timer per waiting read (`runtime::deadline`).
        deadline::within::<Self, _>(timeout, stream.read_buf(input)).await
    }

    async fn read_into(
        stream: &mut Self::Stream,
        buffer: &mut [u8],
        timeout: Duration,
    ) -> io::Result<usize> {
        deadline::within::<Self, _>(timeout, stream.read(buffer)).await
    }

    async fn write_all(
        stream: &mut Self::Stream,
        mut bytes: &[u8],
        mut timeout: WriteTimeout,
    ) -> io::Result<()> {
        while !bytes.is_empty() {
            // A write the socket takes at once (the common case: an answer fits its send
            // buffer) needs no timer, nor the clock reads that arming one costs.
            let written = match stream.try_write(bytes) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    let write = stream.write(bytes);
                    match timeout.next_wait()? {
                        None => write.await?,
                        Some(wait) => match tokio::time::timeout(wait, write).await {
                            Ok(outcome) => outcome?,
                            Err(_elapsed) => return Err(io::ErrorKind::TimedOut.into()),
                        },
                    }
                }
                outcome => outcome?,
            };
            if written == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[written..];
        }
        Ok(())
    }

    async fn close(mut stream: Self::Stream) {
        let _ = AsyncWriteExt::shutdown(&mut stream).await;
    }

    fn reset(stream: Self::Stream) {
        // With a zero linger, closing sends the RST at once and never blocks.
        let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    }
}

/// A tokio task that is cancelled when dropped (a `JoinHandle` would let it run on) and whose
/// output is the future's own: a panic in the task resumes in the awaiting one.
pub struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = T;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        match std::pin::Pin::new(&mut self.0).poll(context) {
            std::task::Poll::Pending => std::task::Poll::Pending,
            std::task::Poll::Ready(Ok(output)) => std::task::Poll::Ready(output),
            std::task::Poll::Ready(Err(error)) if error.is_panic() => {
                std::panic::resume_unwind(error.into_panic())
            }
            // Only dropping this handle (or the loop) cancels the task, and neither can happen
            // while it is being awaited.
            std::task::Poll::Ready(Err(error)) => unreachable!("an awaited task ended: {error}"),
        }
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Files through tokio's blocking pool: `std::fs` calls (pwrite, fdatasync) on a worker
/// thread, so the shard's loop never waits for the device.
pub struct BlockingDisk;

/// A file of the log or a snapshot on the portable backend.
pub struct BlockingFile {
    file: std::fs::File,
    /// How far it is preallocated (0: not preallocated).
    preallocated: u64,
    /// How far its preallocated blocks hold written zeros or data
    /// (`LOG_ZERO_FILL_BUFFERED_BYTES`). Only the one write in flight moves it.
    zeroed_until: AtomicU64,
}

/// The zeros `BlockingFile::write_at` writes, allocated once, not for each fill (a fresh
/// mapping and its page faults each time). Not a `static` array: that would add its MiB to the
/// binary.
static ZEROS: OnceLock<Box<[u8]>> = OnceLock::new();

impl BlockingFile {
    /// Writes `blocks` at `offset` and, when they reach past the zeroed blocks, zeros after
    /// them up to `LOG_ZERO_FILL_BUFFERED_BYTES` further (within the preallocated size), in the
    /// same trip to the worker thread: preallocated blocks are "unwritten" extents, and the
    /// sync after a write into them has to commit their conversion (a journal commit on ext4),
    /// while the sync after an overwrite of written blocks does not.
    fn write_at(&self, blocks: &[u8], offset: u64) -> io::Result<()> {
        write_all_at(&self.file, blocks, offset)?;
        let end = offset + blocks.len() as u64;
        let zeroed = self.zeroed_until.load(Ordering::Relaxed);
        if end > zeroed {
            let until = (end + LOG_ZERO_FILL_BUFFERED_BYTES).min(self.preallocated);
            if until > end {
                let zeros =
                    ZEROS.get_or_init(|| vec![0; LOG_ZERO_FILL_BUFFERED_BYTES as usize].into());
                write_all_at(&self.file, &zeros[..(until - end) as usize], end)?;
            }
            self.zeroed_until.store(until.max(end), Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Runs `work` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| std::io::Error::other(format!("a file task failed: {error}")))?
}

impl Disk for BlockingDisk {
    type File = Arc<BlockingFile>;

    async fn create(&self, path: &std::path::Path, bytes: u64) -> io::Result<Self::File> {
        let path = path.to_path_buf();
        blocking(move || {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            if bytes > 0 {
                preallocate(&file, bytes)?;
            }
            Ok(Arc::new(BlockingFile {
                file,
                preallocated: bytes,
                zeroed_until: AtomicU64::new(0),
            }))
        })
        .await
    }

    async fn write_at(&self, file: &Self::File, offset: u64, blocks: &[u8]) -> io::Result<()> {
        let (file, blocks) = (file.clone(), blocks.to_vec());
        blocking(move || file.write_at(&blocks, offset)).await
    }

    async fn sync(&self, file: &Self::File) -> io::Result<()> {
        let file = file.clone();
        blocking(move || file.file.sync_data()).await
    }

    /// pwrite and fdatasync in one trip to the blocking pool, not one each: each trip wakes a
    /// worker thread and then this loop (futexes, an eventfd write, an epoll wake-up).
    async fn write_synced(&self, file: &Self::File, offset: u64, blocks: &[u8]) -> io::Result<()> {
        let (file, blocks) = (file.clone(), blocks.to_vec());
        blocking(move || {
            file.write_at(&blocks, offset)?;
            file.file.sync_data()
        })
        .await
    }

    async fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> io::Result<()> {
        let (from, to) = (from.to_path_buf(), to.to_path_buf());
        blocking(move || {
            std::fs::rename(&from, &to)?;
            sync_directory(to.parent().unwrap_or(std::path::Path::new(".")))
        })
        .await
    }

    async fn shrink(&self, path: &std::path::Path, bytes: u64) -> io::Result<u64> {
        let path = path.to_path_buf();
        blocking(move || shrink_file(&path, bytes)).await
    }

    async fn remove(&self, path: &std::path::Path) -> io::Result<()> {
        let path = path.to_path_buf();
        blocking(move || std::fs::remove_file(&path)).await
    }

    async fn sync_directory(&self, path: &std::path::Path) -> io::Result<()> {
        let path = path.to_path_buf();
        blocking(move || sync_directory(&path)).await
    }

    type ReadFile = Arc<std::fs::File>;

    async fn open_read(&self, path: &std::path::Path) -> io::Result<Arc<std::fs::File>> {
        let path = path.to_path_buf();
        blocking(move || std::fs::File::open(&path).map(Arc::new)).await
    }

    /// Every range of the batch in one trip to the blocking pool (pread each), then the span
    /// read dropped from the page cache: the texts are copied out, and a container's page cache
    /// counts against its memory limit.
    async fn read_many(
        &self,
        file: &Arc<std::fs::File>,
        ranges: &[(u64, u32)],
    ) -> io::Result<Vec<bytes::Bytes>> {
        crate::storage::files::read_batch_bytes(ranges);
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        let (file, ranges) = (file.clone(), ranges.to_vec());
        blocking(move || {
            let read = read_ranges(&file, &ranges)?;
            drop_cached(&file, &ranges);
            Ok(read)
        })
        .await
    }

    /// pread goes through the page cache, which keeps the pages texts smaller than a page
    /// share (`drop_cached` drops only whole pages).
    fn page_cached(&self) -> bool {
        true
    }
}

/// Reads each range of `ranges` from `file` whole (pread), or fails.
fn read_ranges(file: &std::fs::File, ranges: &[(u64, u32)]) -> io::Result<Vec<bytes::Bytes>> {
    crate::storage::files::ranges_within(ranges, file.metadata()?.len())?;
    let mut read = Vec::with_capacity(ranges.len());
    for &(offset, length) in ranges {
        let mut bytes = vec![0; length as usize];
        read_exact_at(file, &mut bytes, offset)?;
        read.push(bytes::Bytes::from(bytes));
    }
    Ok(read)
}

/// Asks the kernel to drop the cached pages of `ranges`, span by span (`read_spans`;
/// posix_fadvise DONTNEED: clean pages only, so it never costs a write, and only the pages
/// wholly inside a span); a hint, whose failure changes nothing. Not the one span from the
/// first range to the last: the texts of a queue among many lie far apart in the log, and that
/// span dropped the pages of every other queue's texts between them, which their next Gets
/// then read from the device. What it trades: texts smaller than a page that lie apart drop
/// no page at all, so the log's pages they share stay cached (clean, so the kernel reclaims
/// them under pressure; at most the files' size), as the pages the log writes always did.
fn drop_cached(file: &std::fs::File, ranges: &[(u64, u32)]) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        for (start, end) in read_spans(ranges) {
            // SAFETY: posix_fadvise reads the descriptor and three integers.
            unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    start as libc::off_t,
                    (end - start) as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, ranges);
}

/// The bytes `ranges` cover, as (start, end) spans in file order, ranges that overlap or touch
/// joined; empty ranges cover nothing (an empty span given to posix_fadvise would mean "to the
/// end of the file").
#[cfg(any(target_os = "linux", test))]
fn read_spans(ranges: &[(u64, u32)]) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|&&(_, length)| length > 0)
        .map(|&(offset, length)| (offset, offset + u64::from(length)))
        .collect();
    sorted.sort_unstable();
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (start, end) in sorted {
        match spans.last_mut() {
            Some((_, span_end)) if start <= *span_end => *span_end = (*span_end).max(end),
            _ => spans.push((start, end)),
        }
    }
    spans
}

/// Fills `bytes` from `file` at `offset` (pread until whole).
#[cfg(unix)]
fn read_exact_at(file: &std::fs::File, bytes: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, bytes, offset)
}

/// Fills `bytes` from `file` at `offset`.
#[cfg(windows)]
fn read_exact_at(file: &std::fs::File, mut bytes: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, bytes, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            read => {
                bytes = &mut bytes[read..];
                offset += read as u64;
            }
        }
    }
    Ok(())
}

/// Reserves `bytes` for `file` and sizes it, so a sync never has to update its length: real
/// blocks on Linux (fallocate), a sized file elsewhere or where the file system has no
/// fallocate (not glibc's posix_fallocate, which then writes a byte into every block: 16,384
/// writes for a segment, each a round trip on a FUSE file system).
fn preallocate(file: &std::fs::File, bytes: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: fallocate reads the descriptor and three integers.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bytes as libc::off_t) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(error);
        }
    }
    file.set_len(bytes)
}

/// Writes all of `bytes` at `offset`.
#[cfg(unix)]
fn write_all_at(file: &std::fs::File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Writes all of `bytes` at `offset`.
#[cfg(windows)]
fn write_all_at(file: &std::fs::File, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        let written = std::os::windows::fs::FileExt::seek_write(file, bytes, offset)?;
        bytes = &bytes[written..];
        offset += written as u64;
    }
    Ok(())
}

/// `Portable::sleep_precise` on Linux: a one-shot timerfd, registered with the loop's epoll
/// through tokio's `AsyncFd`, so the wake-up comes when the kernel's high-resolution timer
/// fires rather than on the timer wheel's next millisecond.
#[cfg(target_os = "linux")]
mod precise {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// An armed one-shot timer; dropping it closes the descriptor (and deregisters it).
    pub(super) struct Timer(AsyncFd<OwnedFd>);

    impl Timer {
        /// A timer that expires `duration` from now (at once for a zero duration).
        pub(super) fn armed(duration: Duration) -> io::Result<Timer> {
            // SAFETY: timerfd_create takes two integers and returns a new descriptor or -1.
            let fd = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just created and is owned by nothing else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // An all-zero it_value disarms the timer: the shortest wait is a nanosecond.
            let nanoseconds = duration.as_nanos().max(1);
            let value = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: (nanoseconds / 1_000_000_000) as libc::time_t,
                    tv_nsec: (nanoseconds % 1_000_000_000) as libc::c_long,
                },
            };
            // SAFETY: `fd` is a timerfd; `value` is a valid itimerspec, the old value unwanted.
            let armed =
                unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &value, std::ptr::null_mut()) };
            if armed != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: an `OwnedFd` is a valid, open descriptor that stays open and the same
            // until it is dropped, which only the `AsyncFd` that owns it can do.
            let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
            registered.map(Timer).map_err(|error| error.into_parts().1)
        }

        /// Completes when the timer has expired, or early if the descriptor fails (never
        /// seen; the waiters poll until their deadline anyway).
        pub(super) async fn expired(self) {
            loop {
                let Ok(mut ready) = self.0.readable().await else {
                    return;
                };
                let mut expirations = [0u8; 8];
                // SAFETY: reads at most 8 bytes into the 8-byte buffer from the timerfd.
                let read = unsafe {
                    libc::read(
                        self.0.get_ref().as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                if read == 8 {
                    return;
                }
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::WouldBlock {
                    return;
                }
                ready.clear_ready();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Instant;

    use super::*;

    /// `sleep_precise` never completes before its duration, a zero duration completes, and
    /// two timers at once each complete (each its own descriptor), the shorter first.
    #[test]
    fn a_precise_sleep_completes_after_its_duration_and_not_before() {
        let finished = Rc::new(Cell::new(false));
        let done = finished.clone();
        Portable::run(0, Idle::Park, async move {
            Portable::sleep_precise(Duration::ZERO).await;
            let start = Instant::now();
            let order = Rc::new(std::cell::RefCell::new(Vec::new()));
            let (first, second) = (order.clone(), order.clone());
            let long = Portable::spawn_task(async move {
                Portable::sleep_precise(Duration::from_millis(6)).await;
                first.borrow_mut().push(6);
            });
            Portable::sleep_precise(Duration::from_millis(2)).await;
            second.borrow_mut().push(2);
            assert!(start.elapsed() >= Duration::from_millis(2));
            long.await;
            assert!(start.elapsed() >= Duration::from_millis(6));
            assert_eq!(*order.borrow(), [2, 6]);
            done.set(true);
        })
        .expect("a portable loop");
        assert!(finished.get());
    }

    /// A segment's write leaves `LOG_ZERO_FILL_BUFFERED_BYTES` of written zeros after it (data
    /// to SEEK_HOLE: in the page cache or written, not preallocated blocks nobody wrote), and
    /// the zeros stop at the preallocated size.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_zeros_the_preallocated_blocks_ahead_of_it() {
        use std::os::unix::io::AsRawFd;
        let directory = std::env::temp_dir().join(format!("azq-zero-fill-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("a temporary directory");
        let path = directory.join("segment");
        let block = crate::limits::STORAGE_BLOCK_BYTES as u64;
        let preallocated = 2 * LOG_ZERO_FILL_BUFFERED_BYTES;
        let hole_after = |file: &BlockingFile| {
            // SAFETY: lseek reads the descriptor and two integers.
            unsafe { libc::lseek(file.file.as_raw_fd(), 0, libc::SEEK_HOLE) as u64 }
        };
        Portable::run(0, Idle::Park, async move {
            let disk = BlockingDisk;
            let file = disk.create(&path, preallocated).await.expect("created");
            disk.write_synced(&file, 0, &vec![7; block as usize])
                .await
                .expect("written");
            assert_eq!(hole_after(&file), block + LOG_ZERO_FILL_BUFFERED_BYTES);
            // Within the zeros: nothing more is zeroed.
            disk.write_at(&file, block, &vec![7; block as usize])
                .await
                .expect("written");
            assert_eq!(hole_after(&file), block + LOG_ZERO_FILL_BUFFERED_BYTES);
            // Past them: zeros again, up to the preallocated size and no further.
            let offset = LOG_ZERO_FILL_BUFFERED_BYTES;
            disk.write_at(&file, offset, &vec![7; 2 * block as usize])
                .await
                .expect("written");
            assert_eq!(hole_after(&file), preallocated);
            assert_eq!(
                std::fs::metadata(&path).expect("metadata").len(),
                preallocated
            );
            let contents = std::fs::read(&path).expect("read");
            assert!(contents[..2 * block as usize].iter().all(|&byte| byte == 7));
            assert!(contents[2 * block as usize..offset as usize]
                .iter()
                .all(|&byte| byte == 0));
            assert!(contents[offset as usize..][..2 * block as usize]
                .iter()
                .all(|&byte| byte == 7));
            assert!(contents[(offset + 2 * block) as usize..]
                .iter()
                .all(|&byte| byte == 0));
        })
        .expect("a portable loop");
        std::fs::remove_dir_all(&directory).expect("removed");
    }

    /// `read_spans` at its boundaries: ranges that touch join, a byte apart they do not;
    /// overlapping, contained, repeated and unordered ranges; empty ranges anywhere.
    #[test]
    fn read_spans_join_ranges_that_overlap_or_touch_and_nothing_else() {
        assert!(read_spans(&[]).is_empty());
        assert!(read_spans(&[(5, 0), (0, 0)]).is_empty());
        for length in [1, 2, 4095, 4096, 4097] {
            let end = 100 + u64::from(length);
            assert_eq!(read_spans(&[(end, 3), (100, length)]), [(100, end + 3)]);
            assert_eq!(
                read_spans(&[(end + 1, 3), (100, length)]),
                [(100, end), (end + 1, end + 4)]
            );
            assert_eq!(read_spans(&[(100, length), (end - 1, 1)]), [(100, end)]);
            assert_eq!(read_spans(&[(100, length), (end, 0)]), [(100, end)]);
        }
        assert_eq!(
            read_spans(&[(50, 10), (40, 30), (45, 5), (50, 10), (90, 1), (71, 0)]),
            [(40, 70), (90, 91)]
        );
    }

    /// `read_spans` over random batches: spans in file order, apart by a byte or more, each
    /// byte of a non-empty range in one of them, and each span's bytes in some range.
    #[test]
    fn read_spans_cover_exactly_the_bytes_of_the_ranges() {
        for seed in 0..500 {
            let mut random = crate::random::SplitMix64::new(seed);
            let count = 1 + random.next_u64() % 40;
            let ranges: Vec<(u64, u32)> = (0..count)
                .map(|_| (random.next_u64() % 600, (random.next_u64() % 40) as u32))
                .collect();
            let spans = read_spans(&ranges);
            let mut covered = vec![false; 700];
            for &(offset, length) in &ranges {
                for byte in offset..offset + u64::from(length) {
                    covered[byte as usize] = true;
                }
            }
            let mut in_spans = vec![false; 700];
            for (position, &(start, end)) in spans.iter().enumerate() {
                assert!(start < end, "seed {seed}");
                if let Some(&(next_start, _)) = spans.get(position + 1) {
                    assert!(next_start > end, "seed {seed}: {spans:?}");
                }
                for byte in start..end {
                    in_spans[byte as usize] = true;
                }
            }
            assert_eq!(covered, in_spans, "seed {seed}: {ranges:?} as {spans:?}");
        }
    }

    /// Reads on the portable backend (pread on the blocking pool) pass
    /// `storage::read_checks`; a missing file is NotFound.
    #[test]
    fn reads_pass_the_read_checks() {
        use crate::storage::read_checks;
        let (directory, path, missing) = read_checks::scratch_file("portable");
        Portable::run(0, Idle::Park, async move {
            let disk = BlockingDisk;
            let file = disk.open_read(&path).await.expect("opened");
            read_checks::check_boundaries(&disk, &file).await;
            read_checks::check_random_batches(&disk, &file).await;
            let error = disk.open_read(&missing).await.expect_err("no such file");
            assert_eq!(error.kind(), io::ErrorKind::NotFound);
        })
        .expect("a portable loop");
        std::fs::remove_dir_all(&directory).expect("removed");
    }

    /// `deadline::check_on` on the portable backend.
    #[test]
    fn a_waiting_read_times_out_and_frees_its_slot() {
        Portable::run(0, Idle::Park, deadline::check_on::<Portable>()).expect("a portable loop");
    }
}
