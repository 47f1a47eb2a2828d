//! The connection loop: read into a per-connection buffer, parse every complete (pipelined)
//! request, execute each in order, encode all responses into one output buffer, and write them in
//! one batch once the log has written what they answer (so pipelined changes share one sync).
//! Timeouts bound slow heads (slowloris) and idle keep-alive connections; a write timeout and a
//! deadline bound a client that does not read its answers. Unsent answers are bounded per
//! connection (past `CONNECTION_PENDING_OUTPUT_BYTES_MAX` the connection writes before it
//! parses or reads more) and per shard (past `SHARD_PENDING_OUTPUT_BYTES_MAX`, counted in the
//! metrics, the requests whose answers can run to megabytes answer 503 `ServerBusy`). Each
//! request goes one way: parse → plan (`api::Service::plan_on`: the queue API, or on the blob
//! and table ports of `azurite` mode their readiness probes) → execute → respond
//! (`api::Service::respond`).
//! The control plane meets it at fixed points, all in `governance`: around the execution
//! (`is_idle`, one `Cell` check; when it is not, `govern` runs the step through the account
//! limit, fault rules and `--latency`), `answered`, which counts the answer in the metrics, and
//! `written`, which counts the end-to-end latency of the successful answers a write sent. The
//! loop is generic over its `Transport`: the backend's TCP stream as is (`Plain`), or a TLS
//! session over it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::api::{Outcome, ResponsePlan, Service, Step, Surface};
use crate::error::StorageError;
use crate::http::{response, ParseError, Parser, Progress, Request};
use crate::limits::{
    CONNECTION_PENDING_OUTPUT_BYTES_MAX, CONNECTION_SENT_MAX, IDLE_CONNECTION_TIMEOUT_MS,
    REQUEST_BODY_BYTES_MAX, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX, REQUEST_HEAD_TIMEOUT_MS,
    SHARD_PENDING_OUTPUT_BYTES_MAX,
};
use crate::operation::Operation;

use super::backend::{Backend, WriteTimeout};
use super::context::{Busy, ShardContext};
use super::execute::execute;
use super::governance;
use super::mesh::PendingReply;
use super::tls_stream::TlsStream;

/// Initial capacity of a connection's input and output buffers.
const BUFFER_BYTES: usize = 16 * 1024;

/// What the connection loop reads requests from and writes answers to.
pub trait Transport {
    /// Appends what arrives next to `input`: the byte count, 0 at end of stream, or an error
    /// (`TimedOut` when nothing arrived within `timeout`).
    fn read(
        &mut self,
        input: &mut BytesMut,
        timeout: Duration,
    ) -> impl Future<Output = io::Result<usize>>;

    /// Writes all of `bytes` within `timeout` (`Backend::write_all`).
    fn write_all(
        &mut self,
        bytes: &[u8],
        timeout: WriteTimeout,
    ) -> impl Future<Output = io::Result<()>>;

    /// Ends the connection once the loop is done with it.
    fn close(self) -> impl Future<Output = ()>;

    /// Aborts the connection with a TCP RST (a reset fault): no answer, no `close_notify`.
    fn reset(self);
}

/// A plain TCP connection (HTTP).
pub struct Plain<B: Backend>(pub B::Stream);

impl<B: Backend> Transport for Plain<B> {
    async fn read(&mut self, input: &mut BytesMut, timeout: Duration) -> io::Result<usize> {
        B::read(&mut self.0, input, timeout).await
    }

    async fn write_all(&mut self, bytes: &[u8], timeout: WriteTimeout) -> io::Result<()> {
        B::write_all(&mut self.0, bytes, timeout).await
    }

    /// Dropping the stream closes it; nothing is owed to the client.
    async fn close(self) {}

    fn reset(self) {
        B::reset(self.0)
    }
}

/// A TLS session (HTTPS): its close sends `close_notify` first.
impl<B: Backend> Transport for TlsStream<B> {
    async fn read(&mut self, input: &mut BytesMut, timeout: Duration) -> io::Result<usize> {
        TlsStream::read(self, input, timeout).await
    }

    async fn write_all(&mut self, bytes: &[u8], timeout: WriteTimeout) -> io::Result<()> {
        TlsStream::write_all(self, bytes, timeout).await
    }

    async fn close(self) {
        TlsStream::close(self).await
    }

    fn reset(self) {
        TlsStream::reset(self)
    }
}

/// Serves one accepted connection from `peer` on `surface`'s port until the client closes it, a
/// timeout expires, the request stream is broken, or the server shuts down; then closes it.
/// `received`: what arrived before the loop (after a PROXY protocol header), its first bytes.
pub async fn serve<B: Backend, T: Transport>(
    mut transport: T,
    peer: IpAddr,
    surface: Surface,
    shard: Rc<ShardContext<B>>,
    received: BytesMut,
) {
    match serve_requests(&mut transport, peer, surface, &shard, received).await {
        Ending::Close => transport.close().await,
        Ending::Reset => transport.reset(),
    }
}

/// How a connection ends.
enum Ending {
    /// Closed in order (a TLS session sends `close_notify` first).
    Close,
    /// Aborted with a TCP RST: a reset fault fired.
    Reset,
}

/// The connection loop proper; returns when the connection is done.
async fn serve_requests<B: Backend, T: Transport>(
    stream: &mut T,
    peer: IpAddr,
    surface: Surface,
    shard: &Rc<ShardContext<B>>,
    received: BytesMut,
) -> Ending {
    let mut input = BytesMut::with_capacity(BUFFER_BYTES.max(received.len()));
    input.extend_from_slice(&received);
    let mut output = BytesMut::with_capacity(BUFFER_BYTES);
    let mut parser = Parser::new(
        REQUEST_HEAD_BYTES_MAX,
        REQUEST_HEADERS_MAX,
        REQUEST_BODY_BYTES_MAX,
    );
    // When the request now arriving must be complete (set at its first byte).
    let mut request_deadline: Option<Instant> = None;
    // The log sequence the buffered answers wait for (a durable shard's changes).
    let mut durable_at: Option<u64> = None;
    // The buffered successful answers, for their end-to-end latency once written.
    let mut unwritten = governance::Unwritten::default();
    // Pipelined requests sent to the shards that own their queues, answers not yet in `output`.
    let mut sent = Sent::default();
    loop {
        let mut close = false;
        loop {
            match parser.parse(&mut input) {
                Ok(Progress::Complete(request)) => {
                    request_deadline = None;
                    let _busy = shard.busy();
                    let started = Instant::now();
                    let now_ms = shard.engine.now_ms();
                    let plan = shard.service.plan_on(
                        surface,
                        &request,
                        now_ms,
                        peer,
                        &shard.engine.replicas(),
                    );
                    if let Some(failure) = &plan.response.auth_failure {
                        shard.log_line(&format!("authentication failed for {peer}: {failure}"));
                    }
                    let operation = plan.response.operation;
                    // While the shard's clients leave too many answers unread, a request that
                    // could add megabytes more is refused, unexecuted, and every answer is
                    // written before the next request is parsed (so a connection that does not
                    // read holds one small answer, not a batch).
                    let shard_output_full =
                        shard.pending_output_bytes().get() > SHARD_PENDING_OUTPUT_BYTES_MAX;
                    let step = match plan.step {
                        Step::Fail(_) => plan.step,
                        _ if shard_output_full
                            && operation.is_some_and(Operation::answers_in_bulk) =>
                        {
                            Step::Fail(StorageError::ServerBusy)
                        }
                        step => step,
                    };
                    // Straight to `execute` when the governor is idle: no second future
                    // wrapped around the step on the common path. Such a step, when it runs
                    // at once, is applied and answered at the time the request was planned at
                    // (nothing runs between: one clock read serves planning, the state and the
                    // answer's `Date`); one that waits (the mesh, the governor) reads it again.
                    let governed = !governance::is_idle(shard);
                    let step = match step {
                        Step::Shard {
                            shard: owner,
                            command,
                        } if !governed && owner != shard.index && !command.reads_texts() => {
                            // Another shard's, and never a wait for texts: sent now, answered
                            // (in order) once the requests pipelined after it are sent too, so
                            // that the owner's log writes them together.
                            if sent.is_full() {
                                sent.settle(shard, &mut output, &mut unwritten).await;
                            }
                            let reply = shard.send_to(owner, command).await;
                            let last = !request.keep_alive || shard.stopping();
                            let asked = Asked {
                                request,
                                response: plan.response,
                                started,
                            };
                            sent.push(asked, reply, _busy);
                            if last {
                                close = true;
                                break;
                            }
                            continue;
                        }
                        step => step,
                    };
                    // Anything else waits for the answers of the requests before it.
                    sent.settle(shard, &mut output, &mut unwritten).await;
                    let at_once = !governed && step.runs_at_once(shard.index);
                    let executed = if !governed {
                        execute(shard, step, now_ms).await
                    } else {
                        match governance::govern(shard, step, operation, now_ms).await {
                            Some(executed) => executed,
                            // A reset fault: the answers before it go out, then the
                            // connection is aborted without this one's.
                            None => {
                                if !output.is_empty() {
                                    write(
                                        stream,
                                        &mut output,
                                        &mut durable_at,
                                        &mut unwritten,
                                        shard,
                                    )
                                    .await;
                                }
                                return Ending::Reset;
                            }
                        }
                    };
                    durable_at = durable_at.max(executed.durable_at);
                    let answered_ms = if at_once {
                        now_ms
                    } else {
                        shard.engine.now_ms()
                    };
                    let asked = Asked {
                        request,
                        response: plan.response,
                        started,
                    };
                    asked.answer(
                        shard,
                        executed.outcome,
                        answered_ms,
                        &mut output,
                        &mut unwritten,
                    );
                    if !asked.request.keep_alive || shard.stopping() {
                        close = true;
                        break;
                    }
                    // Past its bound, the connection writes what it owes before it parses the
                    // next request (a client that does not read stalls here, not in memory).
                    if (shard_output_full || output.len() >= CONNECTION_PENDING_OUTPUT_BYTES_MAX)
                        && !write(stream, &mut output, &mut durable_at, &mut unwritten, shard).await
                    {
                        return Ending::Close;
                    }
                }
                Ok(Progress::NeedMore { send_continue }) => {
                    if send_continue {
                        // The answers of the requests before it go first: a client takes a 1xx
                        // as the interim answer to the request it is waiting on.
                        sent.settle(shard, &mut output, &mut unwritten).await;
                        response::write_continue(&mut output);
                    }
                    break;
                }
                Err(error) => {
                    if let ParseError::Malformed(reason) = error {
                        shard.log_line(&format!("malformed request from {peer}: {reason}"));
                    }
                    sent.settle(shard, &mut output, &mut unwritten).await;
                    Service::respond_unparsed(error.into(), shard.engine.now_ms(), &mut output);
                    close = true;
                    break;
                }
            }
        }
        sent.settle(shard, &mut output, &mut unwritten).await;
        if !output.is_empty()
            && !write(stream, &mut output, &mut durable_at, &mut unwritten, shard).await
        {
            return Ending::Close;
        }
        if close {
            return Ending::Close;
        }
        // Wait for more bytes: a partial request has until its deadline, an idle connection
        // until the idle timeout.
        let timeout = if parser.is_idle(&input) {
            // An idle connection does not keep the room a large answer took.
            if output.capacity() > CONNECTION_PENDING_OUTPUT_BYTES_MAX {
                output = BytesMut::with_capacity(BUFFER_BYTES);
            }
            Duration::from_millis(IDLE_CONNECTION_TIMEOUT_MS)
        } else {
            let deadline = *request_deadline.get_or_insert_with(|| {
                Instant::now() + Duration::from_millis(REQUEST_HEAD_TIMEOUT_MS)
            });
            match deadline.checked_duration_since(Instant::now()) {
                Some(remaining) if !remaining.is_zero() => remaining,
                _ => return Ending::Close,
            }
        };
        match stream.read(&mut input, timeout).await {
            Ok(0) | Err(_) => return Ending::Close,
            Ok(_) => {}
        }
    }
}

/// A connection's pipelined requests sent to the shards that own their queues, in the order
/// they came, whose answers are not yet encoded: at most `CONNECTION_SENT_MAX`. Each is answered
/// (`settle`) before any other request is executed and before the connection writes, so answers
/// keep the requests' order, and a request to this shard, to every shard or through the governor
/// still runs after those before it have been applied and answered.
struct Sent<'shard, B: Backend> {
    requests: VecDeque<SentRequest<'shard, B>>,
}

/// A parsed request and what its answer needs besides the outcome: what planning learned, and
/// when it arrived.
struct Asked {
    request: Request,
    response: ResponsePlan,
    started: Instant,
}

impl Asked {
    /// Encodes the answer to the request into `output` with `outcome` at `answered_ms`, and
    /// logs and counts it.
    fn answer<B: Backend>(
        &self,
        shard: &ShardContext<B>,
        outcome: Outcome,
        answered_ms: u64,
        output: &mut BytesMut,
        unwritten: &mut governance::Unwritten,
    ) {
        shard.log_request(&self.request, &outcome);
        let response_at = output.len();
        shard
            .service
            .respond(&self.request, &self.response, outcome, answered_ms, output);
        governance::answered(
            shard,
            self.response.operation,
            response::status_at(&output[response_at..]),
            self.started,
            unwritten,
        );
    }
}

/// One request in `Sent`: the request, and its reply on the way.
struct SentRequest<'shard, B: Backend> {
    asked: Asked,
    reply: Result<PendingReply<'shard, B>, StorageError>,
    /// Counted in flight until answered, as a request executed at once is.
    _busy: Busy<'shard, B>,
}

impl<B: Backend> Default for Sent<'_, B> {
    fn default() -> Self {
        Sent {
            requests: VecDeque::new(),
        }
    }
}

impl<'shard, B: Backend> Sent<'shard, B> {
    fn is_full(&self) -> bool {
        self.requests.len() >= CONNECTION_SENT_MAX
    }

    fn push(
        &mut self,
        asked: Asked,
        reply: Result<PendingReply<'shard, B>, StorageError>,
        busy: Busy<'shard, B>,
    ) {
        self.requests.push_back(SentRequest {
            asked,
            reply,
            _busy: busy,
        });
    }

    /// Waits for each reply in order and encodes its answer into `output`, as the connection
    /// loop answers a request it executed.
    async fn settle(
        &mut self,
        shard: &ShardContext<B>,
        output: &mut BytesMut,
        unwritten: &mut governance::Unwritten,
    ) {
        while let Some(sent) = self.requests.pop_front() {
            let outcome = Outcome::Reply(match sent.reply {
                Ok(reply) => reply.await,
                Err(error) => Err(error),
            });
            sent.asked
                .answer(shard, outcome, shard.engine.now_ms(), output, unwritten);
        }
    }
}

/// Writes the buffered answers once the log sequence they wait for is written (counted as in
/// flight meanwhile, so a stopping server waits for them), then counts the successful ones'
/// end-to-end latency; `false` when the connection broke, or its client took no byte for the
/// write timeout, or not all of them within the idle timeout. The answers count in the shard's
/// pending output until then.
async fn write<B: Backend, T: Transport>(
    stream: &mut T,
    output: &mut BytesMut,
    durable_at: &mut Option<u64>,
    unwritten: &mut governance::Unwritten,
    shard: &ShardContext<B>,
) -> bool {
    let _pending = PendingOutput::count(shard.pending_output_bytes(), output.len());
    if let Some(sequence) = durable_at.take() {
        let _busy = shard.busy();
        shard.engine.durable(sequence).await;
    }
    let timeout = WriteTimeout::new(
        shard.write_timeout(),
        Duration::from_millis(IDLE_CONNECTION_TIMEOUT_MS),
    );
    let written = stream.write_all(output, timeout).await.is_ok();
    output.clear();
    governance::written(shard, unwritten, written);
    written
}

/// Bytes of one connection's answers counted in its shard's pending output while they are
/// written; uncounted when dropped, however the write ends (its task may be dropped mid-write
/// when the server stops).
struct PendingOutput<'shard> {
    pending: &'shard Cell<usize>,
    bytes: usize,
}

impl<'shard> PendingOutput<'shard> {
    fn count(pending: &'shard Cell<usize>, bytes: usize) -> PendingOutput<'shard> {
        pending.set(pending.get() + bytes);
        PendingOutput { pending, bytes }
    }
}

impl Drop for PendingOutput<'_> {
    fn drop(&mut self) {
        self.pending.set(self.pending.get() - self.bytes);
    }
}
