//! The one place the load generator touches its async runtime (glommio today): starting an
//! executor pinned to a CPU, spawning and cancelling tasks on it, sleeping, TCP connect, read and
//! write, and the channel cores report on. Everything else (scenarios, accounting, reports) sees
//! only this narrow interface, so another backend (a tokio current-thread runtime per pinned
//! thread, for machines where io_uring is blocked) can be slotted in here alone.
//!
//! The interface promises, whatever the backend:
//! - `start_core` runs a future to completion on a new thread pinned to one CPU, and nothing
//!   else runs on that thread; `CoreHandle::join` waits for the result.
//! - `spawn` runs a future on the calling core; dropping its `Task` cancels it.
//! - `TcpStream::read` is safe to cancel (a read that loses a race leaves the stream usable).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::mpsc::{Receiver, SyncSender};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::{LocalExecutorBuilder, Placement};

/// Memory each executor registers for io_uring. glommio's 10 MiB default exceeds the locked
/// memory limit (`ulimit -l`) of many machines; the client's buffers are its own, not glommio's.
const IO_MEMORY_BYTES: usize = 512 * 1024;

/// How to start one core.
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// The CPU the core's thread is pinned to.
    pub cpu: usize,
    /// The thread's name.
    pub name: String,
    /// Keep polling this long before sleeping in the kernel when idle: punctual wake-ups for an
    /// open loop, at the price of a busy CPU. `None` sleeps at once.
    pub spin_before_park: Option<Duration>,
}

/// A started core; `join` waits for its future's result.
pub struct CoreHandle<T: Send + 'static>(glommio::ExecutorJoinHandle<T>);

impl<T: Send + 'static> CoreHandle<T> {
    /// Waits for the core's thread to finish and returns what its future returned.
    pub fn join(self) -> Result<T, String> {
        self.0.join().map_err(|error| error.to_string())
    }
}

/// Starts a thread pinned to `options.cpu` that runs the future `make` returns.
pub fn start_core<T, F, Fut>(options: CoreOptions, make: F) -> Result<CoreHandle<T>, String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let mut builder = LocalExecutorBuilder::new(Placement::Fixed(options.cpu))
        .name(&options.name)
        .io_memory(IO_MEMORY_BYTES);
    if let Some(spin) = options.spin_before_park {
        builder = builder.spin_before_park(spin);
    }
    builder
        .spawn(make)
        .map(CoreHandle)
        .map_err(|error| format!("cannot start an executor on CPU {}: {error}", options.cpu))
}

/// A task on the calling core. Dropping it cancels it; awaiting it gives its result.
pub struct Task<T>(glommio::Task<T>);

impl<T> Future for Task<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<T> {
        Pin::new(&mut self.0).poll(context)
    }
}

/// Runs `future` on the calling core, beside the current task.
pub fn spawn<T: 'static>(future: impl Future<Output = T> + 'static) -> Task<T> {
    Task(glommio::spawn_local(future))
}

/// Waits for `duration` on the calling core.
pub async fn sleep(duration: Duration) {
    glommio::timer::sleep(duration).await;
}

/// A client TCP connection on the calling core.
pub struct TcpStream(glommio::net::TcpStream);

impl TcpStream {
    /// Connects to `address` with Nagle off (requests are written whole) and reads that fail
    /// after `read_timeout`.
    pub async fn connect(address: SocketAddr, read_timeout: Duration) -> io::Result<TcpStream> {
        let stream = glommio::net::TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(read_timeout))?;
        Ok(TcpStream(stream))
    }

    /// Reads what has arrived into `buffer` (0 bytes: the peer closed). Safe to cancel: glommio
    /// keeps a pending read's readiness poll in the stream.
    pub async fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.0.read(buffer).await
    }

    /// Writes all of `bytes`.
    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes).await
    }
}

/// The sending end of a channel from the cores to the main thread. Sends block when the
/// channel is full; the main thread drains it continuously, so a bounded capacity is only a
/// safety net.
pub type ReportSender<T> = SyncSender<T>;

/// A bounded channel from the cores to the main thread.
pub fn report_channel<T>(capacity: usize) -> (ReportSender<T>, Receiver<T>) {
    std::sync::mpsc::sync_channel(capacity)
}
