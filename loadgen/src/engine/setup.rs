//! Before the measured run: create the run's queues and preload them, on an executor of its own,
//! pipelining the requests on one connection. Also the Get Queue Metadata sweep that both setup
//! and the depth sampler use.

use azq::runtime::backend::{Backend, Idle};
use azq::runtime::select::OnBackend;
use azq::time::unix_ms;

use crate::connection::{Connection, ConnectionError, Response};
use crate::runtime::{start_core, CoreOptions};
use crate::wire::request::{RequestEncoder, RequestKind};

use crate::engine::plan::RunPlan;

/// Requests in flight on the setup connection while preloading.
const PRELOAD_WINDOW: usize = 64;

/// Creates the queues and preloads them on an event loop of the plan's backend, pinned to the
/// first CPU. Returns the messages each queue held afterwards.
pub fn set_up(plan: &RunPlan) -> Result<Vec<u64>, String> {
    /// The setup, run on the plan's backend.
    struct SetUp(RunPlan);
    impl OnBackend for SetUp {
        type Output = Result<Vec<u64>, String>;
        fn run<B: Backend>(self) -> Self::Output {
            let plan = self.0;
            let options = CoreOptions {
                cpu: plan.cpus[0],
                name: "azq-loadgen-setup".to_string(),
                idle: Idle::Park,
            };
            start_core::<B, _, _, _>(
                options,
                move || async move { set_up_queues::<B>(&plan).await },
            )?
            .join()
            .map_err(|error| format!("setup failed: {error}"))?
        }
    }
    plan.backend.dispatch(SetUp(plan.clone()))
}

async fn set_up_queues<B: Backend>(plan: &RunPlan) -> Result<Vec<u64>, String> {
    let mut encoder = RequestEncoder::new(
        plan.endpoint.clone(),
        plan.credentials.clone(),
        plan.settings.clone(),
    )
    .map_err(|error| error.0)?;
    let address = plan.endpoint.address;
    let mut connection = Connection::<B>::connect(&plan.endpoint)
        .await
        .map_err(|error| format!("cannot connect to {address}: {error}"))?;
    let queues = plan.settings.queue_names.len();
    let mut output = Vec::with_capacity(64 * 1024);
    for queue in 0..queues {
        encoder
            .encode(queue, RequestKind::CreateQueue, unix_ms(), &mut output)
            .map_err(|error| error.0)?;
    }
    connection.send(&output).await.map_err(describe)?;
    for queue in 0..queues {
        let response = connection.read_response().await.map_err(describe)?;
        // 201 created, 204 already there; 409 exists with other metadata, which is fine too.
        if !response.is_success() && response.status != 409 {
            return Err(format!(
                "cannot create queue {}: {}",
                plan.settings.queue_names[queue],
                describe_response(&response)
            ));
        }
    }
    let mut depths = queue_depths(&mut encoder, &mut connection).await?;
    for (queue, depth) in depths.iter_mut().enumerate() {
        let missing = plan.preload.saturating_sub(*depth);
        let mut sent = 0;
        let mut answered = 0;
        while answered < missing {
            output.clear();
            while sent < missing && sent - answered < PRELOAD_WINDOW as u64 {
                let now_ms = unix_ms();
                encoder
                    .encode(
                        queue,
                        RequestKind::Put {
                            sent_unix_us: now_ms * 1000,
                            mark: None,
                        },
                        now_ms,
                        &mut output,
                    )
                    .map_err(|error| error.0)?;
                sent += 1;
            }
            connection.send(&output).await.map_err(describe)?;
            while answered < sent {
                let response = connection.read_response().await.map_err(describe)?;
                if !response.is_success() {
                    return Err(format!("preload failed: {}", describe_response(&response)));
                }
                answered += 1;
            }
        }
        *depth += missing;
    }
    Ok(depths)
}

/// The approximate message count of every queue, pipelined on one connection.
pub(super) async fn queue_depths<B: Backend>(
    encoder: &mut RequestEncoder,
    connection: &mut Connection<B>,
) -> Result<Vec<u64>, String> {
    let queues = encoder.settings().queue_names.len();
    let mut output = Vec::with_capacity(queues * 512);
    for queue in 0..queues {
        encoder
            .encode(queue, RequestKind::GetMetadata, unix_ms(), &mut output)
            .map_err(|error| error.0)?;
    }
    connection.send(&output).await.map_err(describe)?;
    let mut depths = Vec::with_capacity(queues);
    for _ in 0..queues {
        let response = connection.read_response().await.map_err(describe)?;
        match (response.is_success(), response.approximate_messages_count) {
            (true, Some(count)) => depths.push(count),
            _ => {
                return Err(format!(
                    "Get Queue Metadata: {}",
                    describe_response(&response)
                ))
            }
        }
    }
    Ok(depths)
}

fn describe(error: ConnectionError) -> String {
    error.to_string()
}

fn describe_response(response: &Response<'_>) -> String {
    let code = response
        .error_code
        .map(|code| String::from_utf8_lossy(code).into_owned())
        .unwrap_or_default();
    format!("HTTP {} {code}", response.status)
}
