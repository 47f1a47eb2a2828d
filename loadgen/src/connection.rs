//! One keep-alive HTTP/1.1 connection on a client core: write encoded requests, read answers in
//! order into a buffer that is reused (and grows only for a larger answer), and hand out each
//! answer's status, the headers the scenarios need, and its body.
//!
//! The stream is the backend's TCP stream, or for an `https://` endpoint a TLS session over it
//! (`azq::runtime::tls_stream`, the server's own code), touched in three places only:
//! `connect`, `send` and `fill`; nothing else sees the stream.

use std::io;
use std::time::Duration;

use azq::runtime::backend::{Backend, WriteTimeout};
use azq::runtime::tls_stream::TlsStream;

use crate::endpoint::Endpoint;

use crate::wire::response::{
    parse_response_head, ChunkedDecoder, Framing, ResponseError, ResponseHead,
};

/// Bytes the read buffer starts with: a Get of 32 one-KiB messages fits.
const READ_BUFFER_BYTES_INITIAL: usize = 64 * 1024;
/// The largest answer accepted: 32 messages of 64 KiB, XML-escaped at worst, fit.
pub const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// How long an answer may take before the connection counts as broken: bounds a run against a
/// server that stops answering.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection cannot go on.
#[derive(Debug)]
pub enum ConnectionError {
    /// Connect, read or write failed, or timed out.
    Io(io::Error),
    /// The server closed the connection.
    Closed,
    /// The answer was not HTTP the reader understands.
    Protocol(ResponseError),
}

impl std::fmt::Display for ConnectionError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectionError::Io(error) => write!(formatter, "{error}"),
            ConnectionError::Closed => formatter.write_str("the server closed the connection"),
            ConnectionError::Protocol(error) => write!(formatter, "bad response: {error:?}"),
        }
    }
}

/// An answer; borrows the connection until the next read.
#[derive(Debug)]
pub struct Response<'a> {
    pub status: u16,
    pub error_code: Option<&'a [u8]>,
    pub pop_receipt: Option<&'a [u8]>,
    pub approximate_messages_count: Option<u64>,
    pub body: &'a [u8],
    /// The server will close the connection after this answer.
    pub close: bool,
}

impl<'a> Response<'a> {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The one whole answer in `bytes`, its body framed by `Content-Length` as azq frames it:
    /// how the simulator (`engine::simulate`) reads the answers of its in-process service.
    pub fn parse_whole(bytes: &'a [u8]) -> Result<Response<'a>, ResponseError> {
        let head = parse_response_head(bytes)?.ok_or(ResponseError::Malformed("truncated"))?;
        let Framing::Length(length) = head.framing else {
            return Err(ResponseError::Malformed("not framed by Content-Length"));
        };
        let body = bytes
            .get(head.head_bytes..head.head_bytes + length)
            .ok_or(ResponseError::Malformed("truncated body"))?;
        Ok(Response {
            status: head.status,
            error_code: head.error_code.map(|range| &bytes[range]),
            pop_receipt: head.pop_receipt.map(|range| &bytes[range]),
            approximate_messages_count: head.approximate_messages_count,
            body,
            close: head.close,
        })
    }
}

/// The stream under a connection.
enum Stream<B: Backend> {
    /// HTTP.
    Plain(B::Stream),
    /// HTTPS (boxed: a session holds rustls's state and its buffers).
    Tls(Box<TlsStream<B>>),
}

/// A client connection on backend `B`.
pub struct Connection<B: Backend> {
    stream: Stream<B>,
    /// Received bytes live in `buffer[start..end]`; the rest is free space.
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    /// The head of the answer being read, once it has arrived: parsed once, however many reads
    /// its body takes. Its ranges are relative to `start`, which stays put until the answer is
    /// complete (moving unread bytes to the front keeps offsets from `start`).
    head: Option<ResponseHead>,
    /// Where decoding of the current chunked body stopped.
    chunked: ChunkedDecoder,
    /// The decoded body of a chunked answer.
    chunked_body: Vec<u8>,
}

impl<B: Backend> Connection<B> {
    /// Connects to `endpoint` with Nagle off (requests are written whole), and completes the
    /// TLS handshake of an `https://` endpoint within `RESPONSE_TIMEOUT`.
    pub async fn connect(endpoint: &Endpoint) -> Result<Connection<B>, ConnectionError> {
        let stream = B::connect(endpoint.address)
            .await
            .map_err(ConnectionError::Io)?;
        let stream = match &endpoint.tls {
            None => Stream::Plain(stream),
            Some(tls) => Stream::Tls(Box::new(
                TlsStream::connect(
                    stream,
                    tls.config.clone(),
                    tls.server_name.clone(),
                    RESPONSE_TIMEOUT,
                )
                .await
                .map_err(ConnectionError::Io)?,
            )),
        };
        Ok(Connection::over(stream))
    }

    /// Connects to a plain HTTP peer at `address` (the tests' scripted peers).
    #[cfg(test)]
    async fn connect_plain(
        address: std::net::SocketAddr,
    ) -> Result<Connection<B>, ConnectionError> {
        let stream = B::connect(address).await.map_err(ConnectionError::Io)?;
        Ok(Connection::over(Stream::Plain(stream)))
    }

    fn over(stream: Stream<B>) -> Connection<B> {
        Connection {
            stream,
            buffer: vec![0; READ_BUFFER_BYTES_INITIAL],
            start: 0,
            end: 0,
            head: None,
            chunked: ChunkedDecoder::default(),
            chunked_body: Vec::new(),
        }
    }

    /// Writes `bytes` (one or more encoded requests).
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), ConnectionError> {
        match &mut self.stream {
            // The client waits for the server as long as it takes, as it always has.
            Stream::Plain(stream) => B::write_all(stream, bytes, WriteTimeout::unbounded()).await,
            Stream::Tls(session) => session.write_all(bytes, WriteTimeout::unbounded()).await,
        }
        .map_err(ConnectionError::Io)
    }

    /// Reads the next answer. Safe to cancel: bytes already read stay in the buffer, and the
    /// backend's read is itself safe to cancel (see `runtime`).
    pub async fn read_response(&mut self) -> Result<Response<'_>, ConnectionError> {
        loop {
            if self.head.is_none() {
                let received = &self.buffer[self.start..self.end];
                self.head = parse_response_head(received).map_err(ConnectionError::Protocol)?;
                if self.head.is_some() {
                    self.chunked = ChunkedDecoder::default();
                    self.chunked_body.clear();
                }
            }
            if let Some(head) = &self.head {
                let body_start = self.start + head.head_bytes;
                // Once the body is complete: the bytes it occupies, and whether it lies in the
                // buffer as is (Content-Length) or was decoded into `chunked_body`.
                let complete = match head.framing {
                    Framing::Length(length) => {
                        if length > RESPONSE_BYTES_MAX {
                            return Err(ConnectionError::Protocol(ResponseError::TooLarge));
                        }
                        (self.end - body_start >= length).then_some((length, false))
                    }
                    Framing::Chunked => self
                        .chunked
                        .decode(
                            &self.buffer[body_start..self.end],
                            &mut self.chunked_body,
                            RESPONSE_BYTES_MAX,
                        )
                        .map_err(ConnectionError::Protocol)?
                        .map(|bytes| (bytes, true)),
                };
                if let Some((body_bytes, decoded)) = complete {
                    let Some(head) = self.head.take() else {
                        unreachable!("the head was just read");
                    };
                    // `head`'s ranges are relative to the answer's first byte.
                    let head_base = self.start;
                    self.start = body_start + body_bytes;
                    let absolute = |range: std::ops::Range<usize>| {
                        &self.buffer[head_base + range.start..head_base + range.end]
                    };
                    return Ok(Response {
                        status: head.status,
                        error_code: head.error_code.map(absolute),
                        pop_receipt: head.pop_receipt.map(absolute),
                        approximate_messages_count: head.approximate_messages_count,
                        body: if decoded {
                            &self.chunked_body
                        } else {
                            &self.buffer[body_start..body_start + body_bytes]
                        },
                        close: head.close,
                    });
                }
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes, first making room: moving unread bytes to the front, then growing.
    async fn fill(&mut self) -> Result<(), ConnectionError> {
        if self.end == self.buffer.len() {
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buffer.len() < RESPONSE_BYTES_MAX + READ_BUFFER_BYTES_INITIAL {
                let grown =
                    (self.buffer.len() * 2).min(RESPONSE_BYTES_MAX + READ_BUFFER_BYTES_INITIAL);
                self.buffer.resize(grown, 0);
            } else {
                return Err(ConnectionError::Protocol(ResponseError::TooLarge));
            }
        } else if self.start == self.end {
            // Nothing unread: start over at the front so the buffer never creeps.
            self.start = 0;
            self.end = 0;
        }
        let free = &mut self.buffer[self.end..];
        let read = match &mut self.stream {
            Stream::Plain(stream) => B::read_into(stream, free, RESPONSE_TIMEOUT).await,
            Stream::Tls(session) => session.read_into(free, RESPONSE_TIMEOUT).await,
        };
        match read {
            Ok(0) => Err(ConnectionError::Closed),
            Ok(read) => {
                self.end += read;
                Ok(())
            }
            Err(error) => Err(ConnectionError::Io(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{start_core, CoreOptions};
    use azq::runtime::backend::Idle;
    use azq::runtime::select::{io_uring_refusal, OnBackend, Selected};
    use std::io::{Read, Write};
    use std::net::SocketAddr;

    /// Runs `test` on backend `B` on a core of its own, and returns its result.
    fn on_core<B: Backend, T: Send + 'static, Fut: std::future::Future<Output = T> + 'static>(
        test: impl FnOnce() -> Fut + Send + 'static,
    ) -> T {
        let options = CoreOptions {
            cpu: azq::machine::allowed_cpus()[0],
            name: "connection-test".to_string(),
            idle: Idle::Park,
        };
        start_core::<B, _, _, _>(options, test)
            .unwrap()
            .join()
            .unwrap()
    }

    /// Runs `check` on every backend this machine can run: the portable one always, io_uring
    /// where the kernel allows it.
    fn on_every_backend(check: impl OnBackend<Output = ()> + Copy) {
        Selected::Portable.dispatch(check);
        if io_uring_refusal().is_none() {
            Selected::IoUring.dispatch(check);
        }
    }

    /// A plain TCP peer that waits for `before` from the client, writes `first` one byte at a
    /// time (the worst split there is), then waits for `between` and writes `second` likewise.
    fn peer(
        before: &'static [u8],
        first: &'static [u8],
        between: &'static [u8],
        second: &'static [u8],
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.set_nodelay(true).unwrap();
            for (expected, answer) in [(before, first), (between, second)] {
                let mut request = vec![0u8; expected.len()];
                stream.read_exact(&mut request).unwrap();
                assert_eq!(request, expected);
                for byte in answer {
                    stream.write_all(std::slice::from_ref(byte)).unwrap();
                    stream.flush().unwrap();
                }
            }
        });
        (address, thread)
    }

    /// An answer as the tests compare it: status, body, pop receipt, error code, close.
    type Seen = (u16, Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>, bool);

    fn seen(answer: &Response<'_>) -> Seen {
        (
            answer.status,
            answer.body.to_vec(),
            answer.pop_receipt.map(<[u8]>::to_vec),
            answer.error_code.map(<[u8]>::to_vec),
            answer.close,
        )
    }

    /// A chunked answer with a trailer, then a pipelined Content-Length answer, then one that
    /// closes, each split into single bytes: each is read whole and in order, with its headers.
    #[test]
    fn answers_split_into_single_bytes_are_read_whole_and_in_order() {
        #[derive(Clone, Copy)]
        struct Check;
        impl OnBackend for Check {
            type Output = ();
            fn run<B: Backend>(self) {
                let answers: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                5\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n\
                HTTP/1.1 204 No Content\r\nx-ms-popreceipt: AgAA+/w=\r\n\r\n\
                HTTP/1.1 404 Not Found\r\nx-ms-error-code: MessageNotFound\r\n\
                Content-Length: 3\r\nConnection: close\r\n\r\nabc";
                let (address, peer) = peer(b"ping", answers, b"", b"");
                let read = on_core::<B, _, _>(move || async move {
                    let mut connection = Connection::<B>::connect_plain(address).await.unwrap();
                    connection.send(b"ping").await.unwrap();
                    let mut read = Vec::new();
                    for _ in 0..3 {
                        read.push(seen(&connection.read_response().await.unwrap()));
                    }
                    read
                });
                peer.join().unwrap();
                assert_eq!(
                    read,
                    vec![
                        (200, b"hello, world".to_vec(), None, None, false),
                        (204, Vec::new(), Some(b"AgAA+/w=".to_vec()), None, false),
                        (
                            404,
                            b"abc".to_vec(),
                            None,
                            Some(b"MessageNotFound".to_vec()),
                            true
                        ),
                    ],
                    "{}",
                    B::NAME
                );
            }
        }
        on_every_backend(Check);
    }

    /// An open loop races each read against its next send: a read that loses the race, with
    /// half an answer received, must leave the connection able to read that answer whole.
    #[test]
    fn a_read_cancelled_halfway_through_an_answer_loses_nothing() {
        #[derive(Clone, Copy)]
        struct Check;
        impl OnBackend for Check {
            type Output = ();
            fn run<B: Backend>(self) {
                let first_half: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nx-ms-popre";
                let second_half: &[u8] = b"ceipt: AQ==\r\n\r\nhelloworld";
                let (address, peer) = peer(b"a", first_half, b"b", second_half);
                let (cancelled, read) = on_core::<B, _, _>(move || async move {
                    let mut connection = Connection::<B>::connect_plain(address).await.unwrap();
                    connection.send(b"a").await.unwrap();
                    // The peer sends the rest only after "b", so the read cannot win the race: it
                    // takes what has arrived and is cancelled while it waits for more.
                    let cancelled = futures_lite::future::or(
                        async {
                            connection.read_response().await.unwrap();
                            false
                        },
                        async {
                            B::sleep(Duration::from_millis(50)).await;
                            true
                        },
                    )
                    .await;
                    connection.send(b"b").await.unwrap();
                    (cancelled, seen(&connection.read_response().await.unwrap()))
                });
                peer.join().unwrap();
                assert!(cancelled, "{}", B::NAME);
                assert_eq!(
                    read,
                    (
                        200,
                        b"helloworld".to_vec(),
                        Some(b"AQ==".to_vec()),
                        None,
                        false
                    ),
                    "{}",
                    B::NAME
                );
            }
        }
        on_every_backend(Check);
    }
}
