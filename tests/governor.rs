//! Behaving like Azure under load, over real TCP on both backends: the per-queue and per-account
//! rate limits (503 `ServerBusy` with Azure's messages, counts within the bucket's bounds), fault
//! rules through `/_azq/faults` (an applied put answered 500 `OperationTimedOut`, resets, seeded
//! probability and count, bad rules, the API off by default, `--faults FILE`), `--latency`, and
//! `/_azq/metrics` moving with traffic. No timing is asserted: a rate limit's upper bound is
//! computed from the time the run actually took.

mod common;

use std::io::{BufReader, Read, Write};
use std::time::Instant;

use common::{
    assert_status, backends, create_queue, exchange, metric_sample, put_body, read_response, send,
    signed_request, Response, Server, TempDir,
};

fn put_request(queue: &str, text: &str) -> Vec<u8> {
    signed_request(
        "POST",
        &format!("/devstoreaccount1/{queue}/messages"),
        &[],
        &put_body(text),
    )
}

/// Sends `count` requests pipelined on one connection and reads every answer.
fn pipelined(server: &Server, request: impl Fn(usize) -> Vec<u8>, count: usize) -> Vec<Response> {
    let mut stream = server.connect();
    let mut batch = Vec::new();
    for index in 0..count {
        batch.extend_from_slice(&request(index));
    }
    stream.write_all(&batch).expect("requests sent");
    let mut reader = BufReader::new(stream);
    (0..count)
        .map(|_| read_response(&mut reader, false).expect("an answer"))
        .collect()
}

fn approximate_count(server: &Server, queue: &str) -> u64 {
    let metadata = send(
        server,
        signed_request(
            "GET",
            &format!("/devstoreaccount1/{queue}?comp=metadata"),
            &[],
            b"",
        ),
    );
    metadata
        .header("x-ms-approximate-messages-count")
        .and_then(|count| count.parse().ok())
        .expect("a count")
}

fn admin(server: &Server, method: &str, path: &str, body: &str) -> Response {
    exchange(
        server,
        format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

fn metrics(server: &Server) -> String {
    let response = admin(server, "GET", "/_azq/metrics", "");
    assert_eq!(response.status, 200);
    assert!(response
        .header("content-type")
        .is_some_and(|kind| kind.starts_with("text/plain; version=0.0.4")));
    response.text()
}

fn assert_server_busy(response: &Response, message: &str) {
    assert_status(response, 503, Some("ServerBusy"));
    let body = response.text();
    assert!(body.contains("<Code>ServerBusy</Code>"), "{body}");
    assert!(body.contains(&format!("<Message>{message}\n")), "{body}");
}

#[test]
fn a_queue_over_its_rate_gets_server_busy_and_keeps_what_was_accepted() {
    const RATE: u64 = 50;
    const PUTS: usize = 400;
    // The default burst (a second of the rate), and `--rate-burst 100ms`: a tenth of it.
    const BURSTS: [(&[&str], u64); 2] = [(&[], RATE), (&["--rate-burst", "100ms"], RATE / 10)];
    for backend in backends() {
        for (burst_flags, burst) in BURSTS {
            let mut arguments = vec!["--shards", "2", "--queue-rate-limit", "50"];
            arguments.extend_from_slice(burst_flags);
            let server = Server::start_on(backend, &arguments);
            create_queue(&server, "limited");
            create_queue(&server, "other");
            let began = Instant::now();
            let answers = pipelined(&server, |_| put_request("limited", "m"), PUTS);
            let elapsed_s = began.elapsed().as_secs_f64();
            let accepted = answers.iter().filter(|answer| answer.status == 201).count() as u64;
            for refused in answers.iter().filter(|answer| answer.status != 201) {
                assert_server_busy(refused, "The server is busy.");
            }
            // A full bucket holds the burst; it refills at the rate.
            let ceiling = burst + (RATE as f64 * elapsed_s).ceil() as u64 + 1;
            assert!(
                (burst..=ceiling).contains(&accepted),
                "{accepted} accepted in {elapsed_s:.2} s with {burst_flags:?}"
            );
            assert_eq!(approximate_count(&server, "limited"), accepted);
            // Another queue has its own bucket; queue operations are not message operations.
            assert_status(&send(&server, put_request("other", "m")), 201, None);
            assert_eq!(approximate_count(&server, "limited"), accepted);
            let text = metrics(&server);
            assert_eq!(
                metric_sample(&text, "azq_throttled_total{scope=\"queue\"}"),
                PUTS as u64 - accepted
            );
            assert_eq!(
                metric_sample(&text, "azq_rate_limit_per_second{scope=\"queue\"}"),
                RATE
            );
        }
    }
}

#[test]
fn an_account_over_its_rate_gets_server_busy_with_the_account_message() {
    const RATE: u64 = 40;
    const REQUESTS: usize = 300;
    // The receiving shard starts with half the limit: a burst of half the default second's
    // worth, or of a tenth of that with `--rate-burst 100ms`.
    const BURSTS: [(&[&str], u64); 2] = [(&[], RATE / 2), (&["--rate-burst", "100ms"], RATE / 20)];
    for backend in backends() {
        for (burst_flags, burst) in BURSTS {
            let mut arguments = vec!["--shards", "2", "--account-rate-limit", "40"];
            arguments.extend_from_slice(burst_flags);
            let server = Server::start_on(backend, &arguments);
            let began = Instant::now();
            // Create Queue counts against the account (not the queue): spread over both shards.
            let answers = pipelined(
                &server,
                |index| {
                    signed_request("PUT", &format!("/devstoreaccount1/queue-{index}"), &[], b"")
                },
                REQUESTS,
            );
            let elapsed_s = began.elapsed().as_secs_f64();
            let accepted = answers.iter().filter(|answer| answer.status == 201).count() as u64;
            for refused in answers.iter().filter(|answer| answer.status != 201) {
                assert_server_busy(refused, "Operations per second is over the account limit.");
            }
            // It never holds more than the whole limit's rate.
            let ceiling = burst + (RATE as f64 * elapsed_s).ceil() as u64 + 1;
            assert!(
                (burst..=ceiling).contains(&accepted),
                "{accepted} accepted in {elapsed_s:.2} s with {burst_flags:?}"
            );
            let text = metrics(&server);
            assert_eq!(
                metric_sample(&text, "azq_throttled_total{scope=\"account\"}"),
                REQUESTS as u64 - accepted
            );
        }
    }
}

#[test]
fn the_azure_profile_sets_the_published_targets() {
    let server = Server::start(&["--profile", "azure", "--account-rate-limit", "30000"]);
    let text = metrics(&server);
    assert_eq!(
        metric_sample(&text, "azq_rate_limit_per_second{scope=\"queue\"}"),
        2000
    );
    assert_eq!(
        metric_sample(&text, "azq_rate_limit_per_second{scope=\"account\"}"),
        30000
    );
}

#[test]
fn an_applied_put_answered_operation_timed_out_is_stored_until_the_rule_goes() {
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "2", "--faults-api"]);
        create_queue(&server, "orders-1");
        create_queue(&server, "billing");
        let added = admin(
            &server,
            "POST",
            "/_azq/faults",
            r#"{"account": "devstoreaccount1", "queue": "orders-*", "operation": "PutMessage",
                "action": {"error": "OperationTimedOut", "apply": true}}"#,
        );
        assert_eq!(added.status, 201, "{}", added.text());
        let id = added.text();
        let id = id
            .strip_prefix("{\"id\":\"")
            .and_then(|rest| rest.strip_suffix("\"}"))
            .expect("an id")
            .to_string();

        let timed_out = send(&server, put_request("orders-1", "applied"));
        assert_status(&timed_out, 500, Some("OperationTimedOut"));
        let body = timed_out.text();
        assert!(body.starts_with("<?xml"), "{body}");
        assert!(body.contains("<Code>OperationTimedOut</Code>"), "{body}");
        assert!(
            body.contains(
                "<Message>The operation could not be completed within the permitted time.\n"
            ),
            "{body}"
        );
        let peeked = send(
            &server,
            signed_request(
                "GET",
                "/devstoreaccount1/orders-1/messages?peekonly=true",
                &[],
                b"",
            ),
        );
        assert_status(&peeked, 200, None);
        assert!(peeked.text().contains("<MessageText>applied</MessageText>"));
        // Other queues and other operations are untouched.
        assert_status(&send(&server, put_request("billing", "x")), 201, None);

        let listed = admin(&server, "GET", "/_azq/faults", "");
        assert_eq!(listed.status, 200);
        assert!(listed.text().contains("\"fired\":1"), "{}", listed.text());
        let text = metrics(&server);
        assert_eq!(
            metric_sample(
                &text,
                "azq_faults_fired_total{action=\"OperationTimedOut\"}"
            ),
            1
        );
        assert_eq!(metric_sample(&text, "azq_fault_rules"), 1);

        let removed = admin(&server, "DELETE", &format!("/_azq/faults/{id}"), "");
        assert_eq!(
            (removed.status, removed.text()),
            (200, "{\"removed\":1}".to_string())
        );
        assert_eq!(
            admin(&server, "DELETE", &format!("/_azq/faults/{id}"), "").status,
            404
        );
        assert_status(&send(&server, put_request("orders-1", "normal")), 201, None);
        assert_eq!(approximate_count(&server, "orders-1"), 2);
    }
}

#[test]
fn a_reset_closes_without_an_answer_applied_or_not() {
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "2", "--faults-api"]);
        create_queue(&server, "resets");
        create_queue(&server, "before-reset");
        for (apply, stored) in [(false, 0), (true, 1)] {
            let rule = format!(
                r#"{{"queue": "resets", "operation": "PutMessage", "count": 1,
                    "action": {{"reset": true, "apply": {apply}}}}}"#
            );
            assert_eq!(admin(&server, "POST", "/_azq/faults", &rule).status, 201);
            // A put to another queue, then the one the rule resets, pipelined: the first is
            // answered, then the connection is aborted (a TCP RST, not an orderly close).
            let mut stream = server.connect();
            let mut pipeline = put_request("before-reset", "b");
            pipeline.extend_from_slice(&put_request("resets", "r"));
            stream.write_all(&pipeline).unwrap();
            let mut reader = BufReader::new(stream);
            let first = read_response(&mut reader, false).expect("the first answer");
            assert_status(&first, 201, None);
            let mut rest = Vec::new();
            let ended = reader.read_to_end(&mut rest);
            assert_eq!(
                ended.map_err(|error| error.kind()),
                Err(std::io::ErrorKind::ConnectionReset),
                "{}",
                String::from_utf8_lossy(&rest)
            );
            assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
            assert_eq!(approximate_count(&server, "resets"), stored);
            assert_eq!(admin(&server, "DELETE", "/_azq/faults", "").status, 200);
        }
        // Spent and removed: puts are answered again.
        assert_status(&send(&server, put_request("resets", "r")), 201, None);
        assert_eq!(
            metric_sample(
                &metrics(&server),
                "azq_faults_fired_total{action=\"reset\"}"
            ),
            2
        );
    }
}

#[test]
fn probability_and_count_are_repeatable_with_a_seed() {
    let run = |backend: &[&str], seed: &str| {
        let server = Server::start_on(backend, &["--shards", "2", "--faults-api", "--seed", seed]);
        create_queue(&server, "coin");
        let rule = r#"{"queue": "coin", "probability": 0.5, "count": 8,
                       "action": {"error": "ServerBusy"}}"#;
        assert_eq!(admin(&server, "POST", "/_azq/faults", rule).status, 201);
        let statuses: Vec<u16> = (0..60)
            .map(|_| send(&server, put_request("coin", "c")).status)
            .collect();
        assert_eq!(statuses.iter().filter(|&&status| status == 503).count(), 8);
        assert_eq!(
            statuses.iter().filter(|&&status| status == 201).count() as u64,
            approximate_count(&server, "coin")
        );
        statuses
    };
    let first = run(backends()[0], "42");
    assert_eq!(first, run(backends()[1], "42"));
    assert_ne!(first, run(backends()[0], "43"));
}

#[test]
fn bad_rules_are_refused_and_the_api_is_off_by_default() {
    let server = Server::start(&["--faults-api"]);
    for (rule, expected) in [
        ("{", "EOF"),
        (r#"{"action": {"error": "Teapot"}}"#, "unknown error"),
        (
            r#"{"operation": "Put", "action": {"reset": true}}"#,
            "unknown operation",
        ),
        (
            r#"{"action": {"reset": true}, "extra": 1}"#,
            "unknown field",
        ),
    ] {
        let refused = admin(&server, "POST", "/_azq/faults", rule);
        assert_eq!(refused.status, 400, "{rule}");
        assert_eq!(refused.header("content-type"), Some("application/json"));
        assert!(refused.text().starts_with("{\"error\":\"bad fault rule: "));
        assert!(
            refused.text().contains(expected),
            "{rule}: {}",
            refused.text()
        );
    }
    assert_eq!(admin(&server, "PUT", "/_azq/faults", "").status, 405);
    assert_eq!(
        admin(&server, "GET", "/_azq/faults", "").text(),
        "{\"rules\":[]}"
    );

    // Without --admin (or its alias --faults-api) the rules answer 403 with the reason.
    let off = Server::start(&[]);
    for method in ["GET", "POST", "DELETE"] {
        let answer = admin(&off, method, "/_azq/faults", "{}");
        assert_eq!(answer.status, 403, "{method}");
        assert!(answer.text().contains("--admin"), "{method}");
    }
    assert_eq!(admin(&off, "GET", "/_azq/faults/1", "").status, 403);
}

#[test]
fn rules_from_a_file_are_in_force_from_the_start() {
    let directory = TempDir::new("governor-faults-file");
    let path = directory.path().join("rules.json");
    std::fs::write(
        &path,
        r#"[{"operation": "CreateQueue", "action": {"error": "InternalError"}},
            {"operation": "ListQueues", "action": {"delay_ms": 1}}]"#,
    )
    .unwrap();
    for backend in backends() {
        let server = Server::start_on(backend, &["--faults", path.to_str().unwrap()]);
        let refused = send(
            &server,
            signed_request("PUT", "/devstoreaccount1/never", &[], b""),
        );
        assert_status(&refused, 500, Some("InternalError"));
        assert_status(
            &send(
                &server,
                signed_request("GET", "/devstoreaccount1?comp=list", &[], b""),
            ),
            200,
            None,
        );
        // Without --admin the rules cannot be changed.
        assert_eq!(admin(&server, "GET", "/_azq/faults", "").status, 403);
        let text = metrics(&server);
        assert_eq!(
            metric_sample(&text, "azq_faults_fired_total{action=\"InternalError\"}"),
            1
        );
        assert_eq!(
            metric_sample(&text, "azq_faults_fired_total{action=\"delay\"}"),
            1
        );
    }
    std::fs::write(&path, "[{\"action\": {}}]").unwrap();
    let refused = std::process::Command::new(common::azq_binary())
        .args(["--inMemoryPersistence", "--faults", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("rule 1: action needs exactly one"));
}

#[test]
fn latency_is_added_to_every_answer() {
    for backend in backends() {
        // One shard serving four connections at once: the wait is a timer, not a stall.
        let server = Server::start_on(backend, &["--shards", "1", "--latency", "5ms"]);
        create_queue(&server, "slow");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let port = server.port;
                std::thread::spawn(move || {
                    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                    let mut batch = Vec::new();
                    for _ in 0..20 {
                        batch.extend_from_slice(&put_request("slow", "l"));
                    }
                    stream.write_all(&batch).unwrap();
                    let mut reader = BufReader::new(stream);
                    (0..20)
                        .filter(|_| read_response(&mut reader, false).unwrap().status == 201)
                        .count()
                })
            })
            .collect();
        let answered: usize = threads
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .sum();
        assert_eq!(answered, 80);
        assert_eq!(approximate_count(&server, "slow"), 80);
        // Every put took at least the 5 ms added: none in a bucket below 4.096 ms.
        let text = metrics(&server);
        let bucket = |le: &str| {
            metric_sample(
                &text,
                &format!(
                    "azq_request_duration_seconds_bucket{{operation=\"PutMessage\",le=\"{le}\"}}"
                ),
            )
        };
        assert_eq!((bucket("0.004096"), bucket("+Inf")), (0, 80));
    }
}

#[test]
fn metrics_move_with_traffic() {
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "2", "--metrics", "queues"]);
        let before = metrics(&server);
        assert!(!before.contains("operation=\"PutMessage\""));
        for name in ["deep", "shallow"] {
            create_queue(&server, name);
        }
        pipelined(&server, |_| put_request("deep", "0123456789"), 5);
        send(&server, put_request("shallow", "x"));
        send(
            &server,
            signed_request("GET", "/devstoreaccount1/missing?comp=metadata", &[], b""),
        );
        let text = metrics(&server);
        assert_eq!(
            metric_sample(
                &text,
                "azq_requests_total{operation=\"PutMessage\",status=\"201\",\
                 response_type=\"Success\"}"
            ),
            6
        );
        assert_eq!(
            metric_sample(
                &text,
                "azq_requests_total{operation=\"GetQueueMetadata\",status=\"404\",\
                 response_type=\"ClientOtherError\"}"
            ),
            1
        );
        assert_eq!(
            metric_sample(
                &text,
                "azq_request_duration_seconds_count{operation=\"PutMessage\"}"
            ),
            6
        );
        assert_eq!(
            metric_sample(
                &text,
                "azq_request_duration_seconds_bucket{operation=\"PutMessage\",le=\"+Inf\"}"
            ),
            6
        );
        assert_eq!(
            metric_sample(
                &text,
                "azq_queue_depth{account=\"devstoreaccount1\",queue=\"deep\"}"
            ),
            5
        );
        let per_shard = |name: &str| -> u64 {
            (0..2)
                .map(|shard| metric_sample(&text, &format!("{name}{{shard=\"{shard}\"}}")))
                .sum()
        };
        assert_eq!(per_shard("azq_queues"), 2);
        assert_eq!(per_shard("azq_messages"), 6);
        assert!(per_shard("azq_message_bytes") >= 11 + 5 * 10);
        // This scrape's own connection is open.
        assert!(per_shard("azq_open_connections") >= 1);
        // The scrape itself reached the other shard over the mesh.
        assert!(per_shard("azq_mesh_sent_total") >= 1);
        assert!(per_shard("azq_mesh_received_total") >= 1);
        assert_eq!(admin(&server, "POST", "/_azq/metrics", "").status, 405);
    }
}
