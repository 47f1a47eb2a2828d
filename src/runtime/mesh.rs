//! The shard mesh: bounded request and reply channels between every pair of shards, so a request
//! that arrives on one core can be executed by the core that owns its queue and answered back.
//!
//! glommio's `sharding` module only sends one way, so replies travel on a second mesh and find
//! their waiting request by ticket: each shard keeps a table of pending tickets whose slots hold
//! the waiter's `Waker` until the reply lands. Nothing here locks; each table belongs to one
//! thread, and everything that crosses cores is moved through glommio's bounded channels.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use glommio::channels::channel_mesh::{Receivers, Senders};

use crate::error::StorageError;
use crate::queue::{Command, Reply};

use super::engine::Engine;

/// A command shipped to the shard that owns its queue.
pub struct Envelope {
    /// The shard waiting for the reply.
    from: usize,
    ticket: u32,
    command: Command,
}

/// The reply to an `Envelope`, shipped back to `Envelope::from`.
pub struct ReplyEnvelope {
    ticket: u32,
    outcome: Result<Reply, StorageError>,
}

/// The state of one pending ticket.
enum Slot {
    Free,
    Waiting(Option<Waker>),
    Ready(Result<Reply, StorageError>),
    /// The waiter went away (its connection closed); the reply is dropped on arrival.
    Abandoned,
}

/// This shard's end of the mesh.
pub struct Mesh {
    shard: usize,
    requests: Senders<Envelope>,
    replies: Senders<ReplyEnvelope>,
    pending: RefCell<Pending>,
}

#[derive(Default)]
struct Pending {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Mesh {
    /// Wraps the joined meshes and starts the tasks that serve other shards' commands with
    /// `engine` and route replies to their waiters.
    pub fn start(
        shard: usize,
        (requests, request_receivers): (Senders<Envelope>, Receivers<Envelope>),
        (replies, reply_receivers): (Senders<ReplyEnvelope>, Receivers<ReplyEnvelope>),
        engine: Rc<Engine>,
    ) -> Rc<Mesh> {
        let mesh = Rc::new(Mesh {
            shard,
            requests,
            replies,
            pending: RefCell::new(Pending::default()),
        });
        let request_receivers = Rc::new(request_receivers);
        let reply_receivers = Rc::new(reply_receivers);
        for peer in 0..mesh.requests.nr_consumers() {
            if peer == shard {
                continue;
            }
            let (mesh_for_requests, receivers, engine) =
                (mesh.clone(), request_receivers.clone(), engine.clone());
            glommio::spawn_local(async move {
                while let Ok(Some(envelope)) = receivers.recv_from(peer).await {
                    let outcome = engine.apply(envelope.command);
                    let reply = ReplyEnvelope {
                        ticket: envelope.ticket,
                        outcome,
                    };
                    if mesh_for_requests
                        .replies
                        .send_to(envelope.from, reply)
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            })
            .detach();
            let (mesh_for_replies, receivers) = (mesh.clone(), reply_receivers.clone());
            glommio::spawn_local(async move {
                while let Ok(Some(reply)) = receivers.recv_from(peer).await {
                    mesh_for_replies.complete(reply);
                }
            })
            .detach();
        }
        mesh
    }

    /// Executes `command` on shard `owner` (never this one) and waits for its reply.
    pub async fn call(&self, owner: usize, command: Command) -> Result<Reply, StorageError> {
        self.send(owner, command).await?.await
    }

    /// Ships `command` to shard `owner` (never this one) and returns the future of its reply,
    /// so that a caller can send to several shards before it waits for any. Waits while the
    /// channel to `owner` is full: that is the backpressure between cores.
    pub async fn send(
        &self,
        owner: usize,
        command: Command,
    ) -> Result<PendingReply<'_>, StorageError> {
        debug_assert_ne!(owner, self.shard, "local commands skip the mesh");
        let ticket = self.pending.borrow_mut().reserve();
        let envelope = Envelope {
            from: self.shard,
            ticket,
            command,
        };
        if self.requests.send_to(owner, envelope).await.is_err() {
            // Nothing was sent, so no reply will come for the ticket: free it now.
            self.pending.borrow_mut().release(ticket);
            return Err(StorageError::ServerBusy);
        }
        Ok(PendingReply { mesh: self, ticket })
    }

    fn complete(&self, reply: ReplyEnvelope) {
        let mut pending = self.pending.borrow_mut();
        let index = reply.ticket as usize;
        match std::mem::replace(&mut pending.slots[index], Slot::Free) {
            Slot::Waiting(waker) => {
                pending.slots[index] = Slot::Ready(reply.outcome);
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

/// Resolves when the reply for `ticket` has arrived.
pub struct PendingReply<'mesh> {
    mesh: &'mesh Mesh,
    ticket: u32,
}

impl Future for PendingReply<'_> {
    type Output = Result<Reply, StorageError>;

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

impl Drop for PendingReply<'_> {
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
