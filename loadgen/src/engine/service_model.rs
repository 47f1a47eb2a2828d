//! The queue service of a simulated run (`--simulate`): azq's own request path, in-process and
//! in virtual time. A request the lanes encoded and signed, as they would send it, is parsed by
//! azq's HTTP parser, planned (authenticated, validated) by its `api::Service`, applied to one
//! `queue::ShardState` at the simulation's clock, and answered with the exact bytes a server
//! would write, which the lanes parse as any answer. So visibility timeouts, leases and
//! redelivery, pop receipts, delays and TTLs are azq's, which follow Azure's; with
//! `--sim-profile azure` azq's token buckets refuse what Azure's targets would (503
//! `ServerBusy`), per queue and per account, as azq's `--profile azure` does.
//!
//! What is not here: the network, the server's threads and its disk. A simulated server has
//! one shard, answers after the round trip the latency model draws, and never fails otherwise.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use azq::api::{Health, Outcome, Service, Step};
use azq::auth::Accounts;
use azq::error::StorageError;
use azq::governor::throttle::is_message_operation;
use azq::governor::{Governor, GovernorConfig};
use azq::http::parse::{Parser, Progress};
use azq::lifecycle::Lifecycle;
use azq::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX};
use azq::queue::{Command, Replicas, Reply, ShardState};
use bytes::BytesMut;

/// The address requests come from, for SAS IP ranges.
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The address the service names itself by (`Host`, URLs in answers).
const AUTHORITY: &str = "127.0.0.1:10001";

/// azq's request path over one shard's state, driven with times passed in.
pub struct ServiceModel {
    service: Service,
    state: ShardState,
    replicas: Replicas,
    governor: Governor,
    parser: Parser,
    input: BytesMut,
    output: BytesMut,
}

impl std::fmt::Debug for ServiceModel {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ServiceModel")
            .finish_non_exhaustive()
    }
}

impl ServiceModel {
    /// A fresh service holding `account` with `key_base64`, its message IDs made from `seed`
    /// (so a run is repeatable), started at `now_ms`; `profile_azure` enforces Azure's targets.
    pub fn new(
        account: &str,
        key_base64: &str,
        seed: u64,
        now_ms: u64,
        profile_azure: bool,
    ) -> Result<ServiceModel, String> {
        let accounts = Accounts::new(&[(account.to_string(), vec![key_base64.to_string()])])?;
        let health = Health {
            lifecycle: Arc::new(Lifecycle::new(now_ms)),
            backend: "simulated",
        };
        let config = GovernorConfig {
            profile_azure,
            seed: Some(seed),
            ..GovernorConfig::default()
        };
        Ok(ServiceModel {
            service: Service::new(accounts, 1, true, AUTHORITY.to_string(), health),
            state: ShardState::new(0, seed),
            replicas: Replicas::default(),
            governor: Governor::new(&config, 0, 1),
            parser: Parser::new(
                REQUEST_HEAD_BYTES_MAX,
                REQUEST_HEADERS_MAX,
                REQUEST_BODY_BYTES_MAX,
            ),
            input: BytesMut::with_capacity(4096),
            output: BytesMut::with_capacity(4096),
        })
    }

    /// Answers the one whole request in `request` at `now_ms` (ms since the Unix epoch): the
    /// answer's bytes replace `answer`'s.
    pub fn serve(&mut self, request: &[u8], now_ms: u64, answer: &mut Vec<u8>) {
        self.input.clear();
        self.input.extend_from_slice(request);
        self.output.clear();
        match self.parser.parse(&mut self.input) {
            Ok(Progress::Complete(request)) => {
                self.state.advance(now_ms, usize::MAX);
                let plan = self.service.plan(&request, now_ms, PEER, &self.replicas);
                let outcome = self.execute(plan.step, now_ms);
                self.service
                    .respond(&request, &plan.response, outcome, now_ms, &mut self.output);
            }
            // The lanes encode whole, well-formed requests: this is a bug in the encoder, and
            // the answer says so as azq's would.
            Ok(Progress::NeedMore { .. }) | Err(_) => {
                self.parser = Parser::new(
                    REQUEST_HEAD_BYTES_MAX,
                    REQUEST_HEADERS_MAX,
                    REQUEST_BODY_BYTES_MAX,
                );
                Service::respond_unparsed(StorageError::MalformedRequest, now_ms, &mut self.output);
            }
        }
        answer.clear();
        answer.extend_from_slice(&self.output);
    }

    /// Runs a planned step on the one shard, through the account's and the queue's limits.
    fn execute(&mut self, step: Step, now_ms: u64) -> Outcome {
        let command = match step {
            Step::Fail(error) => return Outcome::Reply(Err(error)),
            Step::Answer(reply) => return Outcome::Reply(Ok(reply)),
            Step::EveryShard(command) => return Outcome::Parts(vec![self.apply(command, now_ms)]),
            Step::Shard { command, .. } | Step::Replicated { command, .. } => command,
            // The lanes send no `/_azq/` request.
            Step::Admin(_) => return Outcome::Reply(Err(StorageError::InternalError)),
        };
        Outcome::Reply(self.apply(command, now_ms))
    }

    /// Applies `command`, unless its account or its queue is over its limit.
    fn apply(&mut self, command: Command, now_ms: u64) -> Result<Reply, StorageError> {
        if let (Some(throttle), Some(queue)) = (&self.governor.account_throttle, command.queue()) {
            if !throttle.borrow_mut().take(&queue.account, now_ms) {
                return Err(StorageError::AccountRateExceeded);
            }
        }
        if let Some(throttle) = &self.governor.queue_throttle {
            if let Some(queue) = command.queue().filter(|_| is_message_operation(&command)) {
                if !throttle.borrow_mut().take(queue, now_ms) {
                    return Err(StorageError::QueueRateExceeded);
                }
            }
        }
        self.state.apply(command, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::Response;
    use crate::endpoint::{resolve, TargetArguments};
    use crate::wire::listing::listed_messages;
    use crate::wire::request::{RequestEncoder, RequestKind, RequestSettings};

    const NOW_MS: u64 = 1_795_305_600_000;

    fn encoder() -> RequestEncoder {
        let (endpoint, credentials) = resolve(&TargetArguments::default()).unwrap();
        let settings = RequestSettings {
            queue_names: vec!["q-0".to_string()],
            message_bytes: 64,
            batch: 1,
            visibility_timeout_s: 1,
            api_version: "2021-12-02".to_string(),
            put_mark_nonce: 1,
        };
        RequestEncoder::new(endpoint, credentials, settings).unwrap()
    }

    fn model(profile_azure: bool) -> ServiceModel {
        ServiceModel::new(
            azq::auth::DEVELOPMENT_ACCOUNT_NAME,
            azq::auth::DEVELOPMENT_ACCOUNT_KEY,
            7,
            NOW_MS,
            profile_azure,
        )
        .unwrap()
    }

    /// Sends `kind` at `now_ms` and returns the status and the answer's bytes.
    fn send(model: &mut ServiceModel, kind: RequestKind<'_>, now_ms: u64) -> (u16, Vec<u8>) {
        let mut request = Vec::new();
        encoder().encode(0, kind, now_ms, &mut request).unwrap();
        let mut answer = Vec::new();
        model.serve(&request, now_ms, &mut answer);
        let status = Response::parse_whole(&answer).unwrap().status;
        (status, answer)
    }

    #[test]
    fn a_leased_message_comes_back_after_its_visibility_timeout() {
        let mut model = model(false);
        assert_eq!(send(&mut model, RequestKind::CreateQueue, NOW_MS).0, 201);
        let put = RequestKind::Put {
            sent_unix_us: NOW_MS * 1000,
            mark: None,
        };
        assert_eq!(send(&mut model, put, NOW_MS).0, 201);
        let (status, answer) = send(&mut model, RequestKind::Get, NOW_MS + 1);
        assert_eq!(status, 200);
        let response = Response::parse_whole(&answer).unwrap();
        let first: Vec<_> = listed_messages(response.body).collect();
        assert_eq!(first.len(), 1);
        // Leased for the encoder's 1 s: nothing before it runs out, the message again after.
        let (_, answer) = send(&mut model, RequestKind::Get, NOW_MS + 999);
        assert_eq!(
            listed_messages(Response::parse_whole(&answer).unwrap().body).count(),
            0
        );
        let (_, answer) = send(&mut model, RequestKind::Get, NOW_MS + 1_002);
        let response = Response::parse_whole(&answer).unwrap();
        let again: Vec<_> = listed_messages(response.body).collect();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].message_id, first[0].message_id);
        assert_eq!(again[0].dequeue_count, 2);
        // The first delivery's receipt no longer deletes it (400 PopReceiptMismatch, as Azure
        // answers); the second's does.
        let stale = RequestKind::Delete {
            message_id: first[0].message_id,
            pop_receipt: first[0].pop_receipt,
        };
        let (status, answer) = send(&mut model, stale, NOW_MS + 1_003);
        let code = Response::parse_whole(&answer)
            .unwrap()
            .error_code
            .map(<[u8]>::to_vec);
        assert_eq!(
            (status, code.as_deref()),
            (400, Some(&b"PopReceiptMismatch"[..]))
        );
        let fresh = RequestKind::Delete {
            message_id: again[0].message_id,
            pop_receipt: again[0].pop_receipt,
        };
        assert_eq!(send(&mut model, fresh, NOW_MS + 1_004).0, 204);
    }

    #[test]
    fn azures_targets_answer_503_beyond_them() {
        let mut model = model(true);
        assert_eq!(send(&mut model, RequestKind::CreateQueue, NOW_MS).0, 201);
        // 2,000 messages a second per queue, from a bucket that holds a burst: puts within one
        // millisecond run it dry and are then refused as Azure refuses them.
        let mut statuses = Vec::new();
        for _ in 0..5_000 {
            let put = RequestKind::Put {
                sent_unix_us: NOW_MS * 1000,
                mark: None,
            };
            statuses.push(send(&mut model, put, NOW_MS + 1).0);
        }
        let refused = statuses.iter().filter(|&&status| status == 503).count();
        assert!(refused > 0 && statuses[0] == 201, "{refused} refused");
        assert!(statuses
            .iter()
            .all(|&status| status == 201 || status == 503));
        // Without the profile nothing is refused.
        let mut model = super::tests::model(false);
        send(&mut model, RequestKind::CreateQueue, NOW_MS);
        for _ in 0..5_000 {
            let put = RequestKind::Put {
                sent_unix_us: NOW_MS * 1000,
                mark: None,
            };
            assert_eq!(send(&mut model, put, NOW_MS + 1).0, 201);
        }
    }

    #[test]
    fn a_request_signed_with_another_key_is_refused() {
        let mut model = ServiceModel::new(
            azq::auth::DEVELOPMENT_ACCOUNT_NAME,
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            7,
            NOW_MS,
            false,
        )
        .unwrap();
        assert_eq!(send(&mut model, RequestKind::CreateQueue, NOW_MS).0, 403);
    }
}
