//! The shard mesh: bounded request and reply channels between every pair of shards, so a request
//! that arrives on one core can be executed by the core that owns its queue and answered back.
//!
//! The backend's mesh channels only send one way, so replies travel on a second mesh and find
//! their waiting request by ticket: each shard keeps a table of pending tickets whose slots hold
//! the waiter's `Waker` until the reply lands. Nothing here locks; each table belongs to one
//! thread, and everything that crosses cores is moved through the backend's bounded channels
//! (glommio's shared channels, or tokio's `mpsc`).
//!
//! Besides queue commands the mesh carries the shards' control messages (`runtime::control`:
//! metrics for a scrape, fault rules, account-limit shares); each shard counts what it sends and
//! receives for `/_azq/metrics`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::error::StorageError;
use crate::queue::{Command, Reply};

use super::backend::Backend;
use super::control::{self, Control, ControlReply};
use super::engine::Engine;

/// What one shard asks of another.
enum Work {
    /// A queue command for the shard that owns its queue.
    Queue(Command),
    /// A control message (`runtime::control`).
    Control(Control),
}

/// What a shard answers to `Work`.
pub enum Answer {
    /// A queue command's reply.
    Queue(Result<Reply, StorageError>),
    /// A control message's reply.
    Control(ControlReply),
}

impl Answer {
    /// The reply to a queue command; a control reply in its place is a bug.
    fn into_queue(self) -> Result<Reply, StorageError> {
        match self {
            Answer::Queue(outcome) => outcome,
            Answer::Control(_) => {
                debug_assert!(false, "a control reply to a queue command");
                Err(StorageError::InternalError)
            }
        }
    }
}

/// Work shipped to another shard.
pub struct Envelope {
    /// The shard waiting for the reply.
    from: usize,
    ticket: u32,
    work: Work,
}

/// The reply to an `Envelope`, shipped back to `Envelope::from`.
pub struct ReplyEnvelope {
    ticket: u32,
    answer: Answer,
}

/// The state of one pending ticket.
enum Slot {
    Free,
    Waiting(Option<Waker>),
    Ready(Answer),
    /// The waiter went away (its connection closed); the reply is dropped on arrival.
    Abandoned,
}

/// This shard's end of the mesh.
pub struct Mesh<B: Backend> {
    shard: usize,
    requests: B::MeshSenders<Envelope>,
    replies: B::MeshSenders<ReplyEnvelope>,
    pending: RefCell<Pending>,
    /// Envelopes sent to other shards, and received from them (`/_azq/metrics`).
    sent: Cell<u64>,
    received: Cell<u64>,
}

#[derive(Default)]
struct Pending {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl<B: Backend> Mesh<B> {
    /// Joins the request and reply meshes (once every shard does) and starts the tasks that
    /// serve other shards' commands with `engine` and route replies to their waiters.
    pub async fn start(
        shard: usize,
        requests: B::MeshEnd<Envelope>,
        replies: B::MeshEnd<ReplyEnvelope>,
        engine: Rc<Engine<B>>,
    ) -> Result<Rc<Mesh<B>>, String> {
        let (request_senders, request_receivers) = B::join_mesh(requests).await?;
        let (reply_senders, reply_receivers) = B::join_mesh(replies).await?;
        let mesh = Rc::new(Mesh {
            shard,
            requests: request_senders,
            replies: reply_senders,
            pending: RefCell::new(Pending::default()),
            sent: Cell::new(0),
            received: Cell::new(0),
        });
        for mut receiver in request_receivers.into_iter().flatten() {
            let (mesh, engine) = (mesh.clone(), engine.clone());
            B::spawn(async move {
                while let Some(envelope) = B::receive(&mut receiver).await {
                    mesh.received.set(mesh.received.get() + 1);
                    let command = match envelope.work {
                        Work::Queue(command) => command,
                        Work::Control(message) => {
                            let answer =
                                control::answer(&engine, mesh.traffic(), envelope.from, message);
                            if control::reads_texts(&answer) {
                                // Texts on disk only: read in a task of its own, as a wait's.
                                let (mesh, engine) = (mesh.clone(), engine.clone());
                                B::spawn(async move {
                                    let answer = control::read_texts_shown(&engine, answer).await;
                                    let reply = ReplyEnvelope {
                                        ticket: envelope.ticket,
                                        answer: Answer::Control(answer),
                                    };
                                    B::send_to(&mesh.replies, envelope.from, reply).await;
                                });
                                continue;
                            }
                            let reply = ReplyEnvelope {
                                ticket: envelope.ticket,
                                answer: Answer::Control(answer),
                            };
                            if !B::send_to(&mesh.replies, envelope.from, reply).await {
                                break;
                            }
                            continue;
                        }
                    };
                    let again = engine.may_wait(&command).then(|| command.clone());
                    let applied = engine.apply(command, engine.now_ms());
                    if let Ok(Reply::Wait(wait)) = applied.outcome {
                        // Texts on disk only: read them and answer from a task of its own,
                        // while later commands go on (the wait changed nothing).
                        let command = again.expect("only a command that may wait does");
                        let (mesh, engine) = (mesh.clone(), engine.clone());
                        B::spawn(async move {
                            let applied = engine.serve_wait(command, wait).await;
                            if let Some(sequence) = applied.durable_at {
                                engine.durable(sequence).await;
                            }
                            let reply = ReplyEnvelope {
                                ticket: envelope.ticket,
                                answer: Answer::Queue(applied.outcome),
                            };
                            B::send_to(&mesh.replies, envelope.from, reply).await;
                        });
                        continue;
                    }
                    let reply = ReplyEnvelope {
                        ticket: envelope.ticket,
                        answer: Answer::Queue(applied.outcome),
                    };
                    let Some(sequence) = applied.durable_at else {
                        if !B::send_to(&mesh.replies, envelope.from, reply).await {
                            break;
                        }
                        continue;
                    };
                    // Answer once the changes are written, while later commands go on: the
                    // log commits them in groups.
                    let (mesh, engine) = (mesh.clone(), engine.clone());
                    B::spawn(async move {
                        engine.durable(sequence).await;
                        B::send_to(&mesh.replies, envelope.from, reply).await;
                    });
                }
            });
        }
        for mut receiver in reply_receivers.into_iter().flatten() {
            let mesh = mesh.clone();
            B::spawn(async move {
                while let Some(reply) = B::receive(&mut receiver).await {
                    mesh.complete(reply);
                }
            });
        }
        Ok(mesh)
    }

    /// Envelopes this shard has sent to other shards and received from them.
    pub fn traffic(&self) -> (u64, u64) {
        (self.sent.get(), self.received.get())
    }

    /// Sends control message `message` to shard `to` (never this one) and waits for its reply.
    pub async fn control(&self, to: usize, message: Control) -> Result<ControlReply, StorageError> {
        match self.ship(to, Work::Control(message)).await?.await {
            Answer::Control(reply) => Ok(reply),
            Answer::Queue(_) => {
                debug_assert!(false, "a queue reply to a control message");
                Err(StorageError::InternalError)
            }
        }
    }

    /// Ships `command` to shard `owner` (never this one) and returns the future of its reply,
    /// so that a caller can send to several shards before it waits for any. Waits while the
    /// channel to `owner` is full: that is the backpressure between cores.
    pub async fn send(
        &self,
        owner: usize,
        command: Command,
    ) -> Result<PendingReply<'_, B>, StorageError> {
        Ok(PendingReply(self.ship(owner, Work::Queue(command)).await?))
    }

    async fn ship(&self, owner: usize, work: Work) -> Result<PendingAnswer<'_, B>, StorageError> {
        debug_assert_ne!(owner, self.shard, "local commands skip the mesh");
        let ticket = self.pending.borrow_mut().reserve();
        let envelope = Envelope {
            from: self.shard,
            ticket,
            work,
        };
        if !B::send_to(&self.requests, owner, envelope).await {
            // Nothing was sent, so no reply will come for the ticket: free it now.
            self.pending.borrow_mut().release(ticket);
            return Err(StorageError::ServerBusy);
        }
        self.sent.set(self.sent.get() + 1);
        Ok(PendingAnswer { mesh: self, ticket })
    }

    fn complete(&self, reply: ReplyEnvelope) {
        let mut pending = self.pending.borrow_mut();
        let index = reply.ticket as usize;
        match std::mem::replace(&mut pending.slots[index], Slot::Free) {
            Slot::Waiting(waker) => {
                pending.slots[index] = Slot::Ready(reply.answer);
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
            Slot::Abandoned => pending.free.push(reply.ticket),
            Slot::Free | Slot::Ready(_) => {
                panic!("reply for ticket {} that was not waiting", reply.ticket)
            }
        }
    }
}

impl Pending {
    fn reserve(&mut self) -> u32 {
        match self.free.pop() {
            Some(ticket) => {
                debug_assert!(matches!(self.slots[ticket as usize], Slot::Free));
                self.slots[ticket as usize] = Slot::Waiting(None);
                ticket
            }
            None => {
                self.slots.push(Slot::Waiting(None));
                u32::try_from(self.slots.len() - 1)
                    .expect("fewer than 2^32 pending cross-shard calls")
            }
        }
    }

    /// Frees a reserved ticket whose command was never sent.
    fn release(&mut self, ticket: u32) {
        let slot = &mut self.slots[ticket as usize];
        assert!(
            matches!(slot, Slot::Waiting(None)),
            "release of a ticket in use"
        );
        *slot = Slot::Free;
        self.free.push(ticket);
    }
}

/// Resolves to a queue command's reply once it has arrived.
pub struct PendingReply<'mesh, B: Backend>(PendingAnswer<'mesh, B>);

impl<B: Backend> Future for PendingReply<'_, B> {
    type Output = Result<Reply, StorageError>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(context).map(Answer::into_queue)
    }
}

/// Resolves when the answer for `ticket` has arrived.
struct PendingAnswer<'mesh, B: Backend> {
    mesh: &'mesh Mesh<B>,
    ticket: u32,
}

impl<B: Backend> Future for PendingAnswer<'_, B> {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let mut pending = self.mesh.pending.borrow_mut();
        let index = self.ticket as usize;
        match &mut pending.slots[index] {
            Slot::Waiting(waker) => {
                *waker = Some(context.waker().clone());
                Poll::Pending
            }
            Slot::Ready(_) => {
                let Slot::Ready(outcome) = std::mem::replace(&mut pending.slots[index], Slot::Free)
                else {
                    unreachable!()
                };
                pending.free.push(self.ticket);
                Poll::Ready(outcome)
            }
            Slot::Free | Slot::Abandoned => panic!("waiter polled after completion"),
        }
    }
}

impl<B: Backend> Drop for PendingAnswer<'_, B> {
    fn drop(&mut self) {
        let mut pending = self.mesh.pending.borrow_mut();
        let index = self.ticket as usize;
        match pending.slots[index] {
            // Still in flight: the owner will reply, so keep the slot until then.
            Slot::Waiting(_) => pending.slots[index] = Slot::Abandoned,
            Slot::Ready(_) => {
                pending.slots[index] = Slot::Free;
                pending.free.push(self.ticket);
            }
            Slot::Free | Slot::Abandoned => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_ticket_is_reused() {
        let mut pending = Pending::default();
        let first = pending.reserve();
        let second = pending.reserve();
        pending.release(first);
        assert!(matches!(pending.slots[first as usize], Slot::Free));
        assert_eq!(pending.reserve(), first);
        pending.release(second);
        pending.release(first);
        assert_eq!(pending.free.len(), pending.slots.len());
    }

    #[test]
    #[should_panic(expected = "release of a ticket in use")]
    fn releasing_a_waited_ticket_is_a_bug() {
        let mut pending = Pending::default();
        let ticket = pending.reserve();
        pending.slots[ticket as usize] = Slot::Waiting(Some(std::task::Waker::noop().clone()));
        pending.release(ticket);
    }
}
