//! Graceful shutdown of the real server under load: SIGTERM while clients pipeline Put Message
//! requests. The server must stop accepting, answer every request it started completely (no
//! truncated response), and exit 0 within a bounded time.

mod common;

use std::io::{BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{exchange, put_body, read_response, signed_request, Server};

const CLIENTS: usize = 8;
const LOAD_TIME_MAX: Duration = Duration::from_secs(20);

#[test]
fn sigterm_under_load_finishes_started_requests_and_exits_zero() {
    let server = Server::start(&["--shards", "2"]);
    for client in 0..CLIENTS {
        let create = signed_request(
            "PUT",
            &format!("/devstoreaccount1/shutdown-{client}"),
            &[],
            b"",
        );
        assert_eq!(exchange(&server, &create).status, 201);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let stream = server.connect();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let request = signed_request(
                    "POST",
                    &format!("/devstoreaccount1/shutdown-{client}/messages"),
                    &[],
                    &put_body("during shutdown"),
                );
                let started = Instant::now();
                let mut answered = 0usize;
                // Four requests in flight at a time, so some are always mid-way when the signal
                // comes.
                let mut outstanding = 0usize;
                loop {
                    while outstanding < 4 && !stop.load(Ordering::Relaxed) {
                        if writer.write_all(&request).is_err() {
                            return answered;
                        }
                        outstanding += 1;
                    }
                    if outstanding == 0 || started.elapsed() > LOAD_TIME_MAX {
                        return answered;
                    }
                    // A response is either complete or absent (the connection closed between
                    // responses); `read_response` returns None only if no status line came.
                    match read_response(&mut reader, false) {
                        Some(response) => {
                            assert_eq!(response.status, 201, "{}", response.text());
                            assert!(response.text().contains("<MessageId>"), "complete body");
                            answered += 1;
                            outstanding -= 1;
                        }
                        None => return answered,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let signalled = Instant::now();
    let status = server.stop();
    let exit_time = signalled.elapsed();
    stop.store(true, Ordering::Relaxed);
    let answered: usize = clients
        .into_iter()
        .map(|client| client.join().expect("no client saw a broken response"))
        .sum();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        exit_time < Duration::from_secs(15),
        "took {exit_time:?} to exit"
    );
    assert!(answered > 0, "the load ran before the signal");
}
