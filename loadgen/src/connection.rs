//! One keep-alive HTTP/1.1 connection on a client core: write encoded requests, read answers in
//! order into a buffer that is reused (and grows only for a larger answer), and hand out each
//! answer's status, the headers the scenarios need, and its body.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::runtime::TcpStream;
use crate::wire::{decode_chunked, parse_response_head, Framing, ResponseError};

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
            let received = &self.buffer[self.start..self.end];
            if let Some(head) = parse_response_head(received).map_err(ConnectionError::Protocol)? {
                let body_start = self.start + head.head_bytes;
                let body_range = match head.framing {
                    Framing::Length(length) => {
                        if length > RESPONSE_BYTES_MAX {
                            return Err(ConnectionError::Protocol(ResponseError::TooLarge));
                        }
                        (self.end - body_start >= length).then(|| {
                            self.start = body_start + length;
                            Some(body_start..body_start + length)
                        })
                    }
                    Framing::Chunked => decode_chunked(
                        &self.buffer[body_start..self.end],
                        &mut self.chunked_body,
                        RESPONSE_BYTES_MAX,
                    )
                    .map_err(ConnectionError::Protocol)?
                    .map(|bytes| {
                        self.start = body_start + bytes;
                        None
                    }),
                };
                if let Some(body_range) = body_range {
                    // `head`'s ranges are relative to the slice it was parsed from.
                    let head_base = body_start - head.head_bytes;
                    let absolute = |range: std::ops::Range<usize>| {
                        &self.buffer[head_base + range.start..head_base + range.end]
                    };
                    return Ok(Response {
                        status: head.status,
                        error_code: head.error_code.map(absolute),
                        pop_receipt: head.pop_receipt.map(absolute),
                        approximate_messages_count: head.approximate_messages_count,
                        body: match body_range {
                            Some(range) => &self.buffer[range],
                            None => &self.chunked_body,
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
