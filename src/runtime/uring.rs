//! The io_uring backend: glommio, one `LocalExecutor` per shard thread, pinned to its CPU. Also
//! the probe that tells, before any executor starts, whether io_uring will serve here: a
//! seccomp profile that denies its system calls (Docker ≥ 25, containerd 2, GitHub Actions
//! service containers), a kernel without it or too old for glommio (5.8), or a locked-memory
//! limit below glommio's minimum would otherwise end in glommio's panic (or error) inside a
//! shard thread.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::time::Duration;

use bytes::BytesMut;
use futures_lite::{AsyncBufReadExt, AsyncWriteExt};
use glommio::channels::shared_channel::{self, ConnectedReceiver, ConnectedSender};
use glommio::channels::shared_channel::{SharedReceiver, SharedSender};
use glommio::net::{Preallocated, TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement};

use super::backend::{Backend, Idle, JoinedMesh, WriteTimeout};
use super::deadline;
use crate::limits::{
    IO_MEMORY_BYTES_PER_SHARD, LISTEN_BACKLOG, LOG_ZERO_FILL_AHEAD_BYTES, STORAGE_BLOCK_BYTES,
};
use crate::storage::files::{shrink_file, Disk};

/// Bytes of glommio's receive buffer per connection: each read copies only what arrived from it.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// glommio on io_uring.
pub struct IoUring;

/// One shard's end of the mesh before it is connected on its thread: glommio's shared
/// channels to and from every other shard, addressed by shard index. (glommio's own
/// `channel_mesh` numbers peers by executor creation order, which is not the shard order once
/// each shard creates its executor on its own thread.)
pub struct MeshEnd<T: Send + 'static> {
    senders: Vec<Option<SharedSender<T>>>,
    receivers: Vec<Option<SharedReceiver<T>>>,
}

impl Backend for IoUring {
    const NAME: &'static str = "io_uring";

    type Listener = TcpListener;
    type Stream = TcpStream<Preallocated>;
    type MeshEnd<T: Send + 'static> = MeshEnd<T>;
    type MeshSenders<T: Send + 'static> = Vec<Option<ConnectedSender<T>>>;
    type MeshReceiver<T: Send + 'static> = ConnectedReceiver<T>;
    type Disk = DmaDisk;
    type Task<T: 'static> = glommio::Task<T>;

    fn disk() -> DmaDisk {
        DmaDisk
    }

    fn run<F: Future<Output = ()> + 'static>(
        cpu: usize,
        idle: Idle,
        main: F,
    ) -> Result<(), String> {
        let mut builder =
            LocalExecutorBuilder::new(Placement::Fixed(cpu)).io_memory(IO_MEMORY_BYTES_PER_SHARD);
        if let Idle::Poll(spin) = idle {
            builder = builder.spin_before_park(spin);
        }
        let executor = builder
            .make()
            .map_err(|error| format!("cannot start io_uring on CPU {cpu}: {error}"))?;
        executor.run(main);
        Ok(())
    }

    fn spawn<F: Future<Output = ()> + 'static>(future: F) {
        glommio::spawn_local(future).detach();
    }

    fn spawn_task<T: 'static, F: Future<Output = T> + 'static>(future: F) -> glommio::Task<T> {
        // glommio's task cancels its future when dropped, as the trait asks.
        glommio::spawn_local(future)
    }

    async fn sleep(duration: Duration) {
        glommio::timer::sleep(duration).await;
    }

    /// glommio's timers are io_uring timeouts, to the nanosecond.
    const SLEEP_GRANULARITY: Duration = Duration::ZERO;
    /// glommio's timers are io_uring timeouts, exact to the nanosecond: `sleep` is precise.
    const SLEEP_PRECISE_GRANULARITY: Duration = Duration::ZERO;

    fn mesh<T: Send + 'static>(shards: usize, capacity: usize) -> Vec<Self::MeshEnd<T>> {
        let mut ends: Vec<MeshEnd<T>> = (0..shards)
            .map(|_| MeshEnd {
                senders: (0..shards).map(|_| None).collect(),
                receivers: (0..shards).map(|_| None).collect(),
            })
            .collect();
        for from in 0..shards {
            for to in (0..shards).filter(|&to| to != from) {
                let (sender, receiver) = shared_channel::new_bounded(capacity);
                ends[from].senders[to] = Some(sender);
                ends[to].receivers[from] = Some(receiver);
            }
        }
        ends
    }

    async fn join_mesh<T: Send + 'static>(
        end: Self::MeshEnd<T>,
    ) -> JoinedMesh<Self::MeshSenders<T>, Self::MeshReceiver<T>> {
        // Each end of a shared channel waits for the other to connect, so every connection is
        // started (as its own task) before any is awaited: in order, two shards would each
        // wait for the other.
        let senders: Vec<_> = end
            .senders
            .into_iter()
            .map(|sender| sender.map(|sender| glommio::spawn_local(sender.connect()).detach()))
            .collect();
        let receivers: Vec<_> = end
            .receivers
            .into_iter()
            .map(|receiver| {
                receiver.map(|receiver| glommio::spawn_local(receiver.connect()).detach())
            })
            .collect();
        let mut connected_senders = Vec::with_capacity(senders.len());
        for sender in senders {
            connected_senders.push(match sender {
                Some(connecting) => Some(connecting.await.ok_or("a mesh sender was cancelled")?),
                None => None,
            });
        }
        let mut connected_receivers = Vec::with_capacity(receivers.len());
        for receiver in receivers {
            connected_receivers.push(match receiver {
                Some(connecting) => Some(connecting.await.ok_or("a mesh receiver was cancelled")?),
                None => None,
            });
        }
        Ok((connected_senders, connected_receivers))
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
        // As glommio's `TcpListener::bind`, plus SO_REUSEADDR: without it the connections of a
        // server killed a moment ago, closing (TIME_WAIT, FIN_WAIT2), keep a new server off the
        // port for up to a minute.
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&address.into())?;
        socket.listen(LISTEN_BACKLOG as i32)?;
        // SAFETY: the descriptor is a bound, listening TCP socket that `socket` gives up.
        Ok(unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) })
    }

    async fn accept(listener: &Self::Listener) -> io::Result<(Self::Stream, SocketAddr)> {
        let stream = listener.accept().await.map_err(io::Error::from)?;
        let peer = stream.peer_addr().map_err(io::Error::from)?;
        stream.set_nodelay(true).map_err(io::Error::from)?;
        // glommio receives into its own buffer (zeroed once, here); each read then copies only
        // the bytes that arrived, instead of zeroing a fresh buffer per read.
        Ok((
            stream.buffered_with(Preallocated::new(READ_BUFFER_BYTES)),
            peer,
        ))
    }

    async fn connect(address: SocketAddr) -> io::Result<Self::Stream> {
        let stream = TcpStream::connect(address).await.map_err(io::Error::from)?;
        stream.set_nodelay(true).map_err(io::Error::from)?;
        Ok(stream.buffered_with(Preallocated::new(READ_BUFFER_BYTES)))
    }

    async fn read(
        stream: &mut Self::Stream,
        input: &mut BytesMut,
        timeout: Duration,
    ) -> io::Result<usize> {
        // Bounded by the shard's sweep, not glommio's read timeout: that one inserts a timer
        // into glommio's reactor every time a read waits, which in a closed loop is every
        // request (`runtime::deadline`).
        deadline::within::<Self, _>(timeout, async {
            let received = stream.fill_buf().await?;
            let count = received.len();
            input.extend_from_slice(received);
            stream.consume(count);
            Ok(count)
        })
        .await
    }

    async fn read_into(
        stream: &mut Self::Stream,
        buffer: &mut [u8],
        timeout: Duration,
    ) -> io::Result<usize> {
        // With glommio's own buffer empty and `buffer` at least as large, the bytes go straight
        // from the socket into `buffer`.
        deadline::within::<Self, _>(timeout, futures_lite::AsyncReadExt::read(stream, buffer)).await
    }

    async fn write_all(
        stream: &mut Self::Stream,
        mut bytes: &[u8],
        mut timeout: WriteTimeout,
    ) -> io::Result<()> {
        while !bytes.is_empty() {
            // glommio fails a write that waits longer than this for the socket with `TimedOut`.
            stream
                .set_write_timeout(timeout.next_wait()?)
                .map_err(io::Error::from)?;
            match AsyncWriteExt::write(stream, bytes).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                written => bytes = &bytes[written..],
            }
        }
        Ok(())
    }

    async fn close(mut stream: Self::Stream) {
        let _ = AsyncWriteExt::close(&mut stream).await;
    }

    fn reset(stream: Self::Stream) {
        // SAFETY: the descriptor belongs to `stream`, which is alive for the borrow's lifetime.
        let descriptor = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
        // With a zero linger, closing (when `stream` drops) sends the RST at once.
        let _ = socket2::SockRef::from(&descriptor).set_linger(Some(Duration::ZERO));
    }
}

/// Files through io_uring: writes and fdatasync submitted to the ring, so the shard never
/// blocks on the device.
pub struct DmaDisk;

/// A file of the log or a snapshot: glommio's `DmaFile` (O_DIRECT, no copy in the page cache),
/// or its `BufferedFile` where the file system refuses O_DIRECT (some FUSE and network file
/// systems, e.g. a container's bind mount on another OS).
pub enum UringFile {
    /// Opened with O_DIRECT (or on tmpfs, which glommio opens without it).
    Direct {
        /// The file.
        file: glommio::io::DmaFile,
        /// How far it is preallocated.
        preallocated: u64,
        /// How far its preallocated blocks hold written zeros or data (see
        /// `LOG_ZERO_FILL_AHEAD_BYTES`).
        zeroed_until: Cell<u64>,
    },
    /// Opened through the page cache.
    Buffered(glommio::io::BufferedFile),
}

impl Disk for DmaDisk {
    type File = UringFile;

    async fn create(&self, path: &std::path::Path, bytes: u64) -> io::Result<UringFile> {
        let mut options = glommio::io::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(true);
        // The OS error codes are read on glommio's own error: converted to `io::Error`, an
        // error glommio enriched with the operation and path keeps only its kind and text.
        let direct = match options.dma_open(path).await {
            Ok(file) => match probe_direct_write(&file).await {
                Ok(()) => Some(file),
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {
                    file.close().await.map_err(io::Error::from)?;
                    None
                }
                Err(error) => return Err(error.into()),
            },
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => None,
            Err(error) => return Err(error.into()),
        };
        let mut file = match direct {
            Some(file) => UringFile::Direct {
                file,
                preallocated: 0,
                zeroed_until: Cell::new(STORAGE_BLOCK_BYTES as u64),
            },
            // Truncated again: the probe's block goes.
            None => {
                UringFile::Buffered(options.buffered_open(path).await.map_err(io::Error::from)?)
            }
        };
        if bytes > 0 {
            // Preallocated and sized, so a sync never has to update the file's length; a file
            // system without fallocate grows the file as it is written instead.
            let allocated = match &mut file {
                UringFile::Direct {
                    file, preallocated, ..
                } => {
                    *preallocated = bytes;
                    file.pre_allocate(bytes, false).await
                }
                UringFile::Buffered(file) => file.pre_allocate(bytes, false).await,
            };
            match allocated {
                Err(error) if error.raw_os_error() != Some(libc::EOPNOTSUPP) => {
                    return Err(error.into())
                }
                _ => {}
            }
        }
        Ok(file)
    }

    async fn write_at(&self, file: &UringFile, offset: u64, blocks: &[u8]) -> io::Result<()> {
        match file {
            UringFile::Direct {
                file,
                preallocated,
                zeroed_until,
            } => {
                let end = offset + blocks.len() as u64;
                if end > zeroed_until.get() && zeroed_until.get() < *preallocated {
                    let from = zeroed_until.get();
                    let until = end.max(from + LOG_ZERO_FILL_AHEAD_BYTES).min(*preallocated);
                    let zeros = vec![0; (until - from) as usize];
                    write_all_at(UringWriter::Direct(file), from, &zeros).await?;
                    zeroed_until.set(until);
                }
                write_all_at(UringWriter::Direct(file), offset, blocks).await
            }
            UringFile::Buffered(file) => {
                write_all_at(UringWriter::Buffered(file), offset, blocks).await
            }
        }
    }

    async fn sync(&self, file: &UringFile) -> io::Result<()> {
        match file {
            UringFile::Direct { file, .. } => file.fdatasync().await,
            UringFile::Buffered(file) => file.fdatasync().await,
        }
        .map_err(io::Error::from)
    }

    async fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> io::Result<()> {
        glommio::io::rename(from, to)
            .await
            .map_err(io::Error::from)?;
        self.sync_directory(to.parent().unwrap_or(std::path::Path::new(".")))
            .await
    }

    /// On glommio's blocking pool (`std::fs`): the file is not open here, and its truncate and
    /// sync, waiting for the device's discards, must not hold the shard's thread.
    async fn shrink(&self, path: &std::path::Path, bytes: u64) -> io::Result<u64> {
        let path = path.to_path_buf();
        glommio::executor()
            .spawn_blocking(move || shrink_file(&path, bytes))
            .await
    }

    async fn remove(&self, path: &std::path::Path) -> io::Result<()> {
        glommio::io::remove(path).await.map_err(io::Error::from)
    }

    async fn sync_directory(&self, path: &std::path::Path) -> io::Result<()> {
        // glommio opens a directory relative to descriptor -1, not the working directory: a
        // relative path (`--location data`) would fail with EBADF.
        let path = std::path::absolute(path)?;
        glommio::io::Directory::open(&path)
            .await
            .map_err(io::Error::from)?
            .sync()
            .await
            .map_err(io::Error::from)
    }

    type ReadFile = UringReadFile;

    /// `DmaFile` (O_DIRECT: no copy in the page cache, so memory stays what `--max-memory`
    /// counts), or a `BufferedFile` where direct reads fail, which shows at the open (EINVAL)
    /// or only at the first read, so one block is read to find out: EINVAL on FUSE, and
    /// EOPNOTSUPP where glommio sends the reads to its polled ring for a device that cannot be
    /// polled. (glommio decides that once per device, with a read of the first block of the
    /// first file it opens there; when that file is empty, as a new log segment is, the read
    /// succeeds without reaching the device and every later direct read fails.)
    async fn open_read(&self, path: &std::path::Path) -> io::Result<UringReadFile> {
        match glommio::io::DmaFile::open(path).await {
            Ok(file) => match file.read_at_aligned(0, file.alignment() as usize).await {
                Ok(_) => return Ok(UringReadFile::Direct(std::rc::Rc::new(file))),
                Err(error)
                    if matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) =>
                {
                    file.close().await.map_err(io::Error::from)?;
                }
                Err(error) => return Err(error.into()),
            },
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => {}
            Err(error) => return Err(error.into()),
        }
        open_buffered(path).await
    }

    /// Direct: glommio's `read_many`, which aligns each range and merges those less than a
    /// block apart into one read of the ring; each answer is copied out of its DMA buffer at
    /// once, so the buffers go back to the pool. Buffered (file systems without O_DIRECT, a
    /// fallback): one `read_at` through the ring a range, in turn.
    async fn read_many(
        &self,
        file: &UringReadFile,
        ranges: &[(u64, u32)],
    ) -> io::Result<Vec<bytes::Bytes>> {
        use futures_lite::StreamExt;
        crate::storage::files::read_batch_bytes(ranges);
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        let file_bytes = match file {
            UringReadFile::Direct(file) => file.file_size().await,
            UringReadFile::Buffered(file) => file.file_size().await,
        }
        .map_err(io::Error::from)?;
        crate::storage::files::ranges_within(ranges, file_bytes)?;
        let wanted = ranges
            .iter()
            .filter(|&&(_, length)| length > 0)
            .map(|&(offset, length)| (offset, length as usize));
        let mut read = std::collections::HashMap::with_capacity(ranges.len());
        match file {
            UringReadFile::Direct(file) => {
                let mut answers = file.read_many(
                    futures_lite::stream::iter(wanted),
                    glommio::io::MergedBufferLimit::DeviceMaxSingleRequest,
                    glommio::io::ReadAmplificationLimit::Custom(STORAGE_BLOCK_BYTES),
                );
                while let Some(answer) = answers.next().await {
                    let (range, bytes) = answer.map_err(io::Error::from)?;
                    read.insert(range, bytes::Bytes::copy_from_slice(&bytes));
                }
            }
            UringReadFile::Buffered(file) => {
                for (offset, length) in wanted {
                    let bytes = file.read_at(offset, length).await;
                    let bytes = bytes.map_err(io::Error::from)?;
                    read.insert((offset, length), bytes::Bytes::copy_from_slice(&bytes));
                }
            }
        }
        ranges
            .iter()
            .map(
                |&(offset, length)| match read.get(&(offset, length as usize)) {
                    Some(bytes) if bytes.len() == length as usize => Ok(bytes.clone()),
                    None if length == 0 => Ok(bytes::Bytes::new()),
                    // The file shrank under the read: past its end after all.
                    _ => Err(crate::storage::files::read_past_end(
                        offset, length, file_bytes,
                    )),
                },
            )
            .collect()
    }
}

/// Opens the file at `path` for reading through the page cache: `Disk::open_read`'s fallback.
async fn open_buffered(path: &std::path::Path) -> io::Result<UringReadFile> {
    let file = glommio::io::BufferedFile::open(path).await;
    Ok(UringReadFile::Buffered(file.map_err(io::Error::from)?))
}

/// A file open for reading (`Disk::open_read`): direct where the file system allows it.
pub enum UringReadFile {
    /// Opened with O_DIRECT; in an `Rc` because glommio's `read_many` holds the file while its
    /// reads are in flight.
    Direct(std::rc::Rc<glommio::io::DmaFile>),
    /// Opened through the page cache.
    Buffered(glommio::io::BufferedFile),
}

/// A file `write_all_at` writes through the ring.
#[derive(Clone, Copy)]
enum UringWriter<'a> {
    Direct(&'a glommio::io::DmaFile),
    Buffered(&'a glommio::io::BufferedFile),
}

/// Writes all of `bytes` at `offset`, writing the rest again after a short write: a file system
/// that fills writes what fits and says nothing more, and only the next write fails with the
/// error that says why (ENOSPC), which the process's last line then names.
async fn write_all_at(file: UringWriter<'_>, mut offset: u64, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let written = match file {
            UringWriter::Direct(file) => {
                let mut buffer = file.alloc_dma_buffer(bytes.len());
                buffer.as_bytes_mut().copy_from_slice(bytes);
                file.write_at(buffer, offset).await
            }
            UringWriter::Buffered(file) => file.write_at(bytes.to_vec(), offset).await,
        }
        .map_err(io::Error::from)?;
        if written == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("wrote nothing of {} bytes at {offset}", bytes.len()),
            ));
        }
        offset += written as u64;
        bytes = &bytes[written..];
    }
    Ok(())
}

/// Writes one block of zeros at the start of a file just opened for direct I/O, the first
/// place a refusal can show: a file system that cannot do O_DIRECT refuses it at open (or at
/// glommio's `fcntl(F_SETFL, O_DIRECT)` after the open) with EINVAL, but the kernel lets every
/// FUSE file take O_DIRECT without asking its server, which can refuse only the I/O itself.
/// The file is new and empty, so the block is one its writer overwrites or zero-fills anyway.
async fn probe_direct_write(file: &glommio::io::DmaFile) -> glommio::Result<(), ()> {
    let mut block = file.alloc_dma_buffer(STORAGE_BLOCK_BYTES);
    block.as_bytes_mut().fill(0);
    match file.write_at(block, 0).await? {
        STORAGE_BLOCK_BYTES => Ok(()),
        written => Err(glommio::GlommioError::IoError(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("wrote {written} of {STORAGE_BLOCK_BYTES} bytes"),
        ))),
    }
}

/// The io_uring operations glommio needs (its `GLOMMIO_URING_OPS`): a kernel that lacks one
/// makes glommio exit the process.
const REQUIRED_OPERATIONS: [(u8, &str); 23] = [
    (0, "NOP"),
    (1, "READV"),
    (2, "WRITEV"),
    (3, "FSYNC"),
    (4, "READ_FIXED"),
    (5, "WRITE_FIXED"),
    (6, "POLL_ADD"),
    (7, "POLL_REMOVE"),
    (9, "SENDMSG"),
    (10, "RECVMSG"),
    (11, "TIMEOUT"),
    (12, "TIMEOUT_REMOVE"),
    (13, "ACCEPT"),
    (15, "LINK_TIMEOUT"),
    (16, "CONNECT"),
    (17, "FALLOCATE"),
    (18, "OPENAT"),
    (19, "CLOSE"),
    (21, "STATX"),
    (22, "READ"),
    (23, "WRITE"),
    (26, "SEND"),
    (27, "RECV"),
];

/// The `io_uring_register` opcode that lists supported operations (linux/io_uring.h).
const IORING_REGISTER_PROBE: libc::c_uint = 8;
/// `io_uring_probe_op.flags`: the kernel supports the operation.
const IO_URING_OP_SUPPORTED: u16 = 1;
/// Operations the probe asks about (the kernel fills in at most this many).
const PROBE_OPERATIONS: usize = 64;

/// `struct io_uring_probe` with room for `PROBE_OPERATIONS` entries.
#[repr(C)]
struct Probe {
    last_op: u8,
    ops_len: u8,
    reserved: u16,
    reserved2: [u32; 3],
    ops: [ProbeOperation; PROBE_OPERATIONS],
}

/// `struct io_uring_probe_op`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProbeOperation {
    op: u8,
    reserved: u8,
    flags: u16,
    reserved2: u32,
}

/// Checks what glommio will need, without glommio: the locked-memory limit it insists on, a
/// ring can be set up (no seccomp filter or kernel setting refuses `io_uring_setup`), and the
/// kernel supports every operation glommio uses. The error names the reason in one line.
pub fn probe() -> Result<(), String> {
    check_memlock_limit()?;
    // `struct io_uring_params` is 120 bytes the kernel reads and fills; zero asks for defaults.
    let mut params = [0u64; 15];
    // SAFETY: io_uring_setup reads and writes a 120-byte io_uring_params, which `params` is.
    let ring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if ring < 0 {
        return Err(refusal("io_uring_setup", io::Error::last_os_error()));
    }
    let ring = ring as libc::c_int;
    let outcome = probe_operations(ring);
    // SAFETY: `ring` is a descriptor this function opened and no longer uses.
    unsafe { libc::close(ring) };
    outcome
}

fn probe_operations(ring: libc::c_int) -> Result<(), String> {
    // SAFETY: Probe is plain data; all zeroes is a valid, empty probe.
    let mut probe: Probe = unsafe { std::mem::zeroed() };
    // SAFETY: IORING_REGISTER_PROBE writes at most `nr_args` entries into `probe`, which has
    // room for PROBE_OPERATIONS of them.
    let registered = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring,
            IORING_REGISTER_PROBE,
            &mut probe as *mut Probe,
            PROBE_OPERATIONS as libc::c_uint,
        )
    };
    if registered < 0 {
        return Err(refusal(
            "io_uring_register(PROBE)",
            io::Error::last_os_error(),
        ));
    }
    let known = usize::from(probe.ops_len).min(PROBE_OPERATIONS);
    let missing: Vec<&str> = REQUIRED_OPERATIONS
        .iter()
        .filter(|(op, _)| {
            !probe.ops[..known]
                .iter()
                .any(|entry| entry.op == *op && entry.flags & IO_URING_OP_SUPPORTED != 0)
        })
        .map(|(_, name)| *name)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the kernel's io_uring lacks {} (glommio needs Linux 5.8 or later)",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// glommio refuses to create an executor when the locked-memory limit (`ulimit -l`) is below
/// this (its `MIN_MEMLOCK_LIMIT`), whatever the buffers it asks for.
const MEMLOCK_BYTES_MIN: u64 = 512 * 1024;

/// Checks the locked-memory limit glommio checks before it creates a ring.
fn check_memlock_limit() -> Result<(), String> {
    // SAFETY: getrlimit fills a plain rlimit struct owned by this frame.
    let limit = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) != 0 {
            return Err(refusal("getrlimit(MEMLOCK)", io::Error::last_os_error()));
        }
        limit.rlim_cur
    };
    if limit != libc::RLIM_INFINITY && (limit as u64) < MEMLOCK_BYTES_MIN {
        return Err(format!(
            "the locked-memory limit (ulimit -l) is {} KiB; glommio needs at least {} KiB",
            limit / 1024,
            MEMLOCK_BYTES_MIN / 1024
        ));
    }
    Ok(())
}

/// One line naming why a system call refused io_uring, telling a seccomp filter's denial (the
/// kernel has io_uring, a container runtime's default profile denies it: ENOSYS under podman's,
/// EPERM under Docker's) from a kernel without io_uring and from the io_uring_disabled sysctl.
fn refusal(call: &str, error: io::Error) -> String {
    let circumstances = match error.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EACCES) => Circumstances::read(),
        _ => Circumstances::default(),
    };
    format!(
        "{call} failed: {error}{}",
        explanation(&error, &circumstances)
    )
}

/// The parenthesis `refusal` adds to the error, from what else is known.
fn explanation(error: &io::Error, known: &Circumstances) -> String {
    let seccomp = "denied by this process's seccomp filter: the kernel has io_uring, but the \
                   container runtime's default profile blocks it \
                   (deploy/seccomp/default-with-io-uring.json allows it)";
    let text = match (error.raw_os_error(), known) {
        (Some(libc::ENOMEM), _) => "out of locked memory: raise ulimit -l",
        (
            Some(libc::EPERM) | Some(libc::EACCES),
            Circumstances {
                io_uring_disabled: Some(2),
                ..
            },
        ) => "disabled for every process by the sysctl kernel.io_uring_disabled=2",
        (
            Some(libc::EPERM) | Some(libc::EACCES),
            Circumstances {
                io_uring_disabled: Some(1),
                seccomp_filter: Some(false) | None,
                ..
            },
        ) => "kernel.io_uring_disabled=1 allows it only to the group kernel.io_uring_group",
        (
            Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EACCES),
            Circumstances {
                seccomp_filter: Some(true),
                kernel_has_io_uring: Some(true),
                ..
            },
        ) => seccomp,
        (
            Some(libc::ENOSYS),
            Circumstances {
                kernel_has_io_uring: Some(false),
                ..
            }
            | Circumstances {
                seccomp_filter: Some(false),
                ..
            },
        ) => "this kernel has no io_uring",
        (Some(libc::ENOSYS), _) => "denied by a seccomp filter, or this kernel has no io_uring",
        (Some(libc::EPERM) | Some(libc::EACCES), _) => {
            "denied: a seccomp profile such as Docker's default blocks io_uring, or \
             kernel.io_uring_disabled is set"
        }
        _ => return String::new(),
    };
    format!(" ({text})")
}

/// What the process can learn about an io_uring refusal besides the error: whether a seccomp
/// filter is in force on it, and whether the kernel has io_uring at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Circumstances {
    /// `Seccomp: 2` in /proc/self/status: a filter decides this process's system calls.
    pub seccomp_filter: Option<bool>,
    /// The kernel has io_uring: /proc/sys/kernel/io_uring_disabled exists (Linux 6.6+) or
    /// /proc/kallsyms names io_uring_setup; `None` when neither could be read.
    pub kernel_has_io_uring: Option<bool>,
    /// The value of kernel.io_uring_disabled (0, 1 or 2), where the kernel has the sysctl.
    pub io_uring_disabled: Option<u8>,
}

impl Circumstances {
    /// Reads them from /proc (only on the refusal path: kallsyms is large).
    pub fn read() -> Circumstances {
        let seccomp_filter = std::fs::read_to_string("/proc/self/status")
            .ok()
            .map(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("Seccomp:"))
                    .is_some_and(|mode| mode.trim() == "2")
            });
        let io_uring_disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .ok()
            .and_then(|value| value.trim().parse().ok());
        let kernel_has_io_uring = if io_uring_disabled.is_some() {
            Some(true)
        } else {
            kallsyms_names_io_uring()
        };
        Circumstances {
            seccomp_filter,
            kernel_has_io_uring,
            io_uring_disabled,
        }
    }
}

/// Whether /proc/kallsyms lists an io_uring_setup symbol; `None` when it cannot be read.
fn kallsyms_names_io_uring() -> Option<bool> {
    use std::io::BufRead;
    let file = std::fs::File::open("/proc/kallsyms").ok()?;
    let mut lines = std::io::BufReader::new(file).lines();
    let mut any = false;
    for line in lines.by_ref() {
        let line = line.ok()?;
        any = true;
        if line.ends_with("sys_io_uring_setup") {
            return Some(true);
        }
    }
    any.then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_layouts_match_the_kernel() {
        // linux/io_uring.h: io_uring_probe is 16 bytes of header, io_uring_probe_op 8 bytes.
        assert_eq!(std::mem::size_of::<ProbeOperation>(), 8);
        assert_eq!(std::mem::size_of::<Probe>(), 16 + 8 * PROBE_OPERATIONS);
    }

    #[test]
    fn refusals_name_the_call_and_the_reason() {
        let denied = refusal("io_uring_setup", io::Error::from_raw_os_error(libc::EPERM));
        assert!(denied.starts_with("io_uring_setup failed: "), "{denied}");
        assert!(denied.contains("seccomp") || denied.contains("io_uring_disabled"));
        let memory = refusal("io_uring_setup", io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(
            memory.ends_with("(out of locked memory: raise ulimit -l)"),
            "{memory}"
        );
    }

    /// A seccomp denial (ENOSYS under podman's default profile, EPERM under Docker's) is told
    /// from a kernel without io_uring and from the sysctl, by what /proc says.
    #[test]
    fn explanations_table() {
        let known = |seccomp_filter, kernel_has_io_uring, io_uring_disabled| Circumstances {
            seccomp_filter,
            kernel_has_io_uring,
            io_uring_disabled,
        };
        let cases = [
            (
                libc::ENOSYS,
                known(Some(true), Some(true), Some(0)),
                "seccomp filter: the kernel",
            ),
            (
                libc::EPERM,
                known(Some(true), Some(true), None),
                "seccomp filter: the kernel",
            ),
            (
                libc::ENOSYS,
                known(Some(false), None, None),
                "this kernel has no io_uring",
            ),
            (
                libc::ENOSYS,
                known(Some(true), Some(false), None),
                "this kernel has no io_uring",
            ),
            (
                libc::ENOSYS,
                known(Some(true), None, None),
                "a seccomp filter, or this kernel",
            ),
            (
                libc::EPERM,
                known(Some(false), Some(true), Some(2)),
                "io_uring_disabled=2",
            ),
            (
                libc::EPERM,
                known(Some(true), Some(true), Some(2)),
                "io_uring_disabled=2",
            ),
            (
                libc::EPERM,
                known(Some(false), Some(true), Some(1)),
                "kernel.io_uring_group",
            ),
            (
                libc::EPERM,
                known(None, None, None),
                "or kernel.io_uring_disabled is set",
            ),
        ];
        for (errno, circumstances, expected) in cases {
            let text = explanation(&io::Error::from_raw_os_error(errno), &circumstances);
            assert!(text.contains(expected), "{errno} {circumstances:?}: {text}");
        }
        assert_eq!(
            explanation(
                &io::Error::from_raw_os_error(libc::EINVAL),
                &known(None, None, None)
            ),
            ""
        );
    }

    /// Reads on io_uring pass `storage::read_checks`, direct (O_DIRECT, glommio's merged
    /// `read_many`) where glommio allows it in this process, and through the page cache (the
    /// fallback), where io_uring serves here.
    #[test]
    fn reads_pass_the_read_checks() {
        use crate::storage::read_checks;
        if probe().is_err() {
            return;
        }
        let (directory, path, missing) = read_checks::scratch_file("uring");
        IoUring::run(0, Idle::Park, async move {
            let disk = DmaDisk;
            // Direct where glommio still sends this device's direct reads to its main ring;
            // buffered once an empty file opened first made it pick its polled ring (another
            // test of this process may have: see `open_read`). Both are checked either way.
            let file = disk.open_read(&path).await.expect("opened");
            read_checks::check_boundaries(&disk, &file).await;
            read_checks::check_random_batches(&disk, &file).await;
            let buffered = open_buffered(&path).await.expect("opened");
            read_checks::check_boundaries(&disk, &buffered).await;
            read_checks::check_random_batches(&disk, &buffered).await;
            let error = disk.open_read(&missing).await.err().expect("no such file");
            assert_eq!(error.kind(), io::ErrorKind::NotFound);
        })
        .expect("a glommio loop");
        std::fs::remove_dir_all(&directory).expect("removed");
    }

    /// `deadline::check_on` on glommio (where io_uring serves here).
    #[test]
    fn a_waiting_read_times_out_on_glommio() {
        if probe().is_err() {
            return;
        }
        IoUring::run(0, Idle::Park, deadline::check_on::<IoUring>()).expect("a glommio loop");
    }

    /// /proc answers, and agrees with the probe: where io_uring serves, the kernel has it.
    #[test]
    fn circumstances_of_this_process() {
        let here = Circumstances::read();
        assert!(here.seccomp_filter.is_some(), "{here:?}");
        if probe().is_ok() {
            assert_ne!(here.kernel_has_io_uring, Some(false), "{here:?}");
        }
    }
}
