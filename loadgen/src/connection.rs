//! One keep-alive HTTP/1.1 connection on a client core: write encoded requests, read answers in
//! order into a buffer that is reused (and grows only for a larger answer), and hand out each
//! answer's status, the headers the scenarios need, and its body.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::runtime::TcpStream;
use crate::wire::{parse_response_head, ChunkedDecoder, Framing, ResponseError, ResponseHead};

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

impl Response<'_> {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A client connection.
pub struct Connection {
    stream: TcpStream,
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

impl Connection {
    /// Connects to `address` with Nagle off (requests are written whole) and a read timeout.
    pub async fn connect(address: SocketAddr) -> Result<Connection, ConnectionError> {
        let stream = TcpStream::connect(address, RESPONSE_TIMEOUT)
            .await
            .map_err(ConnectionError::Io)?;
        Ok(Connection {
            stream,
            buffer: vec![0; READ_BUFFER_BYTES_INITIAL],
            start: 0,
            end: 0,
            head: None,
            chunked: ChunkedDecoder::default(),
            chunked_body: Vec::new(),
        })
    }

    /// Writes `bytes` (one or more encoded requests).
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), ConnectionError> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(ConnectionError::Io)
    }

    /// Reads the next answer. Safe to cancel: bytes already read stay in the buffer, and the
    /// stream's read is itself safe to cancel (`runtime::TcpStream::read`).
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
        match self.stream.read(&mut self.buffer[self.end..]).await {
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
    use crate::runtime::{self, CoreOptions};
    use std::io::{Read, Write};

    /// Answers written by a plain TCP peer one byte at a time (the worst split there is): a
    /// chunked answer with a trailer, then a pipelined Content-Length answer, then one that
    /// closes. Each is read whole and in order, with its headers.
    #[test]
    fn answers_split_into_single_bytes_are_read_whole_and_in_order() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let answers: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            5\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n\
            HTTP/1.1 204 No Content\r\nx-ms-popreceipt: AgAA+/w=\r\n\r\n\
            HTTP/1.1 404 Not Found\r\nx-ms-error-code: MessageNotFound\r\n\
            Content-Length: 3\r\nConnection: close\r\n\r\nabc";
        let peer = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.set_nodelay(true).unwrap();
            let mut request = [0u8; 4];
            stream.read_exact(&mut request).unwrap();
            for byte in answers {
                stream.write_all(std::slice::from_ref(byte)).unwrap();
                stream.flush().unwrap();
            }
        });
        let options = CoreOptions {
            cpu: azq::runtime::allowed_cpus()[0],
            name: "connection-test".to_string(),
            spin_before_park: None,
        };
        let read = runtime::start_core(options, move || async move {
            let mut connection = Connection::connect(address).await.unwrap();
            connection.send(b"ping").await.unwrap();
            let mut seen = Vec::new();
            for _ in 0..3 {
                let answer = connection.read_response().await.unwrap();
                seen.push((
                    answer.status,
                    answer.body.to_vec(),
                    answer.pop_receipt.map(<[u8]>::to_vec),
                    answer.error_code.map(<[u8]>::to_vec),
                    answer.close,
                ));
            }
            seen
        })
        .unwrap()
        .join()
        .unwrap();
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
            ]
        );
    }
}
