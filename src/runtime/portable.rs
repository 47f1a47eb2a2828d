//! The portable backend: a tokio current-thread runtime with a `LocalSet` per shard thread, so
//! that a shard's tasks stay on its thread (`Rc`, no `Send`) exactly as on glommio. tokio polls
//! with epoll on Linux (kqueue, IOCP elsewhere), which no container's default seccomp profile
//! denies; its timers are a per-runtime wheel; the mesh is a full matrix of tokio's bounded
//! `mpsc` channels, one per ordered pair of shards.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

use super::backend::{Backend, JoinedMesh};

/// Connections a listener queues before the shard accepts them.
const LISTEN_BACKLOG: u32 = 1024;
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

    fn run<F: Future<Output = ()> + 'static>(cpu: usize, main: F) -> Result<(), String> {
        super::pin_current_thread(cpu);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|error| format!("cannot start the portable runtime on CPU {cpu}: {error}"))?;
        tokio::task::LocalSet::new().block_on(&runtime, main);
        Ok(())
    }

    fn spawn<F: Future<Output = ()> + 'static>(future: F) {
        drop(tokio::task::spawn_local(future));
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }

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
        // tokio reads into the buffer's spare capacity directly: no intermediate copy.
        match tokio::time::timeout(timeout, stream.read_buf(input)).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(io::ErrorKind::TimedOut.into()),
        }
    }

    async fn write_all(stream: &mut Self::Stream, bytes: &[u8]) -> io::Result<()> {
        AsyncWriteExt::write_all(stream, bytes).await
    }

    async fn close(mut stream: Self::Stream) {
        let _ = AsyncWriteExt::shutdown(&mut stream).await;
    }
}
