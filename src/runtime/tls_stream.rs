//! A TLS session over a backend's stream, written once for both backends: rustls is driven by
//! hand over `Backend::read` and `Backend::write_all`, ciphertext in and out through two
//! buffers, so neither glommio's nor tokio's stream needs an adapter of its own (and
//! azq-loadgen's client connections use the same code).
//!
//! The server side (`accept`) bounds the handshake by a deadline; a peer that speaks something
//! other than TLS (plain HTTP to the HTTPS port) makes rustls fail at the first record, and the
//! session ends with rustls's alert and a close, never a hang.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};

use super::backend::{Backend, WriteTimeout};
use crate::limits::WRITE_TIMEOUT_MS_DEFAULT;

/// Room kept for ciphertext before each read from the socket.
const CIPHERTEXT_BUFFER_BYTES: usize = 16 * 1024;

/// One TLS session, server or client, over `B`'s stream.
pub struct TlsStream<B: Backend> {
    stream: B::Stream,
    connection: rustls::Connection,
    /// Ciphertext received and not yet given to rustls.
    incoming: BytesMut,
    /// Ciphertext rustls produced, on its way to the socket (reused).
    outgoing: Vec<u8>,
    /// Plaintext that arrived with the handshake's last flight (a client's first request may
    /// share a segment with its `Finished`), handed out by the first read.
    early: BytesMut,
    /// The peer sent `close_notify`.
    peer_closed: bool,
}

impl<B: Backend> TlsStream<B> {
    /// The server side of a session on an accepted `stream`, once its handshake completed
    /// within `timeout`. Fails on a handshake that takes longer, a peer that closes, or one
    /// that speaks anything but TLS (after sending it rustls's alert). `received`: ciphertext
    /// that arrived before (after a PROXY protocol header).
    pub async fn accept(
        stream: B::Stream,
        config: Arc<rustls::ServerConfig>,
        timeout: Duration,
        received: BytesMut,
    ) -> io::Result<TlsStream<B>> {
        let connection = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        let mut session = TlsStream::new(stream, connection.into());
        session.incoming = received;
        session.handshake(Instant::now() + timeout).await?;
        Ok(session)
    }

    /// The client side of a session on a connected `stream` to `server_name`, once its
    /// handshake completed within `timeout`.
    pub async fn connect(
        stream: B::Stream,
        config: Arc<rustls::ClientConfig>,
        server_name: rustls::pki_types::ServerName<'static>,
        timeout: Duration,
    ) -> io::Result<TlsStream<B>> {
        let connection =
            rustls::ClientConnection::new(config, server_name).map_err(io::Error::other)?;
        let mut session = TlsStream::new(stream, connection.into());
        session.handshake(Instant::now() + timeout).await?;
        Ok(session)
    }

    fn new(stream: B::Stream, connection: rustls::Connection) -> TlsStream<B> {
        TlsStream {
            stream,
            connection,
            incoming: BytesMut::with_capacity(CIPHERTEXT_BUFFER_BYTES),
            outgoing: Vec::with_capacity(CIPHERTEXT_BUFFER_BYTES),
            early: BytesMut::new(),
            peer_closed: false,
        }
    }

    /// Exchanges handshake flights until the session is established or `deadline` passes.
    async fn handshake(&mut self, deadline: Instant) -> io::Result<()> {
        let mut early = BytesMut::new();
        // Ciphertext that arrived before the session began (behind a PROXY protocol header)
        // goes to rustls before anything is awaited: the client waits for the answer to it.
        if !self.incoming.is_empty() {
            if let Err(error) = self.absorb(&mut early) {
                let _ = self.flush(WriteTimeout::until(deadline)).await;
                return Err(error);
            }
        }
        while self.connection.is_handshaking() {
            self.flush(WriteTimeout::until(deadline)).await?;
            if !self.connection.is_handshaking() {
                break;
            }
            let remaining = remaining(deadline)?;
            if B::read(&mut self.stream, &mut self.incoming, remaining).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if let Err(error) = self.absorb(&mut early) {
                // rustls has queued an alert saying why; the peer may as well hear it.
                let _ = self.flush(WriteTimeout::until(deadline)).await;
                return Err(error);
            }
        }
        // The server's last flight (TLS 1.3 session tickets), or the client's `Finished`.
        self.flush(WriteTimeout::until(deadline)).await?;
        self.early = early;
        Ok(())
    }

    /// Appends the plaintext that arrives next to `input`: the byte count, 0 once the peer has
    /// closed, or an error (`TimedOut` when no plaintext arrived within `timeout`).
    pub async fn read(&mut self, input: &mut BytesMut, timeout: Duration) -> io::Result<usize> {
        if !self.early.is_empty() {
            let count = self.early.len();
            input.extend_from_slice(&self.early);
            self.early.clear();
            return Ok(count);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let produced = match self.absorb(input) {
                Ok(produced) => produced,
                Err(error) => {
                    let _ = self.flush(WriteTimeout::until(deadline)).await;
                    return Err(error);
                }
            };
            if produced > 0 {
                return Ok(produced);
            }
            if self.peer_closed {
                return Ok(0);
            }
            // Whatever rustls owes the peer (a key update's answer) goes before waiting.
            self.flush(WriteTimeout::until(deadline)).await?;
            let remaining = remaining(deadline)?;
            if B::read(&mut self.stream, &mut self.incoming, remaining).await? == 0 {
                return Ok(0);
            }
        }
    }

    /// Reads plaintext into `buffer`: the byte count, 0 once the peer has closed, or an error
    /// (`TimedOut` when none arrived within `timeout`). Plaintext beyond `buffer` waits in
    /// rustls for the next call. Safe to cancel while it waits for the socket, like
    /// `Backend::read`; received ciphertext stays in the session.
    pub async fn read_into(&mut self, buffer: &mut [u8], timeout: Duration) -> io::Result<usize> {
        if !self.early.is_empty() {
            let count = self.early.len().min(buffer.len());
            buffer[..count].copy_from_slice(&self.early[..count]);
            self.early.advance(count);
            return Ok(count);
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.connection.reader().read(buffer) {
                Ok(count) => return Ok(count),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
            if !self.incoming.is_empty() {
                let used = self.connection.read_tls(&mut &self.incoming[..])?;
                self.incoming.advance(used);
                self.connection
                    .process_new_packets()
                    .map_err(io::Error::other)?;
                continue;
            }
            self.flush(WriteTimeout::until(deadline)).await?;
            let remaining = remaining(deadline)?;
            if B::read(&mut self.stream, &mut self.incoming, remaining).await? == 0 {
                return Ok(0);
            }
        }
    }

    /// Encrypts and writes all of `bytes`, within `timeout` (see `Backend::write_all`).
    pub async fn write_all(&mut self, mut bytes: &[u8], timeout: WriteTimeout) -> io::Result<()> {
        // One deadline for every flush of the batch.
        let timeout = timeout.fixed();
        while !bytes.is_empty() {
            let accepted = self.connection.writer().write(bytes)?;
            if accepted == 0 && !self.connection.wants_write() {
                return Err(io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[accepted..];
            self.flush(timeout).await?;
        }
        Ok(())
    }

    /// Sends `close_notify` and closes the stream; a peer that does not take it within the
    /// default write timeout is not waited for longer.
    pub async fn close(mut self) {
        self.connection.send_close_notify();
        let stalled = Duration::from_millis(WRITE_TIMEOUT_MS_DEFAULT);
        let _ = self
            .flush(WriteTimeout::new(stalled, stalled).fixed())
            .await;
        B::close(self.stream).await;
    }

    /// Aborts the stream with a TCP RST, with no `close_notify`.
    pub fn reset(self) {
        B::reset(self.stream)
    }

    /// Gives rustls the received ciphertext and moves the plaintext it yields to `plaintext`:
    /// the plaintext byte count. An error is a TLS failure (rustls then has an alert to send).
    fn absorb(&mut self, plaintext: &mut BytesMut) -> io::Result<usize> {
        let mut produced = 0;
        loop {
            let state = self
                .connection
                .process_new_packets()
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
            let count = state.plaintext_bytes_to_read();
            if count > 0 {
                let start = plaintext.len();
                plaintext.resize(start + count, 0);
                self.connection
                    .reader()
                    .read_exact(&mut plaintext[start..])?;
                produced += count;
            }
            if state.peer_has_closed() {
                self.peer_closed = true;
            }
            // An empty slice would tell rustls the stream ended.
            if self.incoming.is_empty() {
                return Ok(produced);
            }
            let used = self.connection.read_tls(&mut &self.incoming[..])?;
            self.incoming.advance(used);
        }
    }

    /// Writes the ciphertext rustls has ready, within `timeout`.
    async fn flush(&mut self, timeout: WriteTimeout) -> io::Result<()> {
        while self.connection.wants_write() {
            self.outgoing.clear();
            self.connection.write_tls(&mut self.outgoing)?;
            B::write_all(&mut self.stream, &self.outgoing, timeout).await?;
        }
        Ok(())
    }
}

/// The time left before `deadline`; `TimedOut` once it has passed.
fn remaining(deadline: Instant) -> io::Result<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|remaining| !remaining.is_zero())
        .ok_or_else(|| io::ErrorKind::TimedOut.into())
}
