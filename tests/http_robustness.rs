//! Raw-HTTP behaviour of the real server over TCP: pipelining, framing, limits and hostile input.
//! Every test ends by checking that the server still answers a well-formed request.

mod common;

use std::io::{BufReader, Read, Write};
use std::time::Duration;

use common::{backends, exchange, read_response, signed_request, Server};

/// A well-formed request still gets a proper answer.
fn assert_serving(server: &Server) {
    let response = exchange(
        server,
        &signed_request("GET", "/devstoreaccount1?comp=list", &[], b""),
    );
    assert_eq!(response.status, 200, "{}", response.text());
}

#[test]
fn thousand_pipelined_requests_in_one_write_answer_in_order() {
    let server = Server::start(&["--shards", "2"]);
    let mut batch = Vec::new();
    for index in 0..1000 {
        // Queue names hash onto both shards, so replies come back from both.
        let target = format!("/devstoreaccount1/pipelined-{index}");
        batch.extend(signed_request(
            "PUT",
            &target,
            &[("x-ms-client-request-id", &index.to_string())],
            b"",
        ));
    }
    let mut stream = server.connect();
    stream.write_all(&batch).unwrap();
    let mut reader = BufReader::new(stream);
    for index in 0..1000 {
        let response = read_response(&mut reader, false).expect("a response per request");
        assert_eq!(
            response.header("x-ms-client-request-id"),
            Some(index.to_string().as_str())
        );
        assert_eq!(response.status, 201, "request {index}: {}", response.text());
    }
    // The names really hash onto both shards, so the listing below gathers from both.
    let shards: std::collections::HashSet<usize> = (0..1000)
        .map(|index| {
            let queue = azq::queue::QueueKey {
                account: "devstoreaccount1".to_string(),
                name: format!("pipelined-{index}"),
            };
            azq::queue::shard_for(&queue, 2)
        })
        .collect();
    assert_eq!(shards.len(), 2);
    let listing = exchange(
        &server,
        &signed_request(
            "GET",
            "/devstoreaccount1?comp=list&prefix=pipelined-",
            &[],
            b"",
        ),
    );
    assert_eq!(common::elements(&listing.text(), "Name").len(), 1000);
}

#[test]
fn request_split_across_writes_is_parsed() {
    let server = Server::start(&[]);
    let raw = signed_request("PUT", "/devstoreaccount1/split-queue", &[], b"");
    let mut stream = server.connect();
    for piece in raw.chunks(7) {
        stream.write_all(piece).unwrap();
        stream.flush().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let response = read_response(&mut BufReader::new(stream), false).unwrap();
    assert_eq!(response.status, 201, "{}", response.text());
}

#[test]
fn garbage_gets_400_and_close() {
    let server = Server::start(&[]);
    for garbage in [
        &b"garbage\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"\x00\x01\x02\r\n\r\n",
        b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n",
    ] {
        let mut stream = server.connect();
        stream.write_all(garbage).unwrap();
        let mut reader = BufReader::new(stream);
        let response = read_response(&mut reader, false).expect("an answer to garbage");
        assert_eq!(response.status, 400, "{garbage:?}");
        assert_eq!(response.error_code(), Some("InvalidInput"));
        assert!(response.text().contains("<Code>InvalidInput</Code>"));
        assert_eq!(response.header("connection"), Some("close"));
        let mut rest = Vec::new();
        assert_eq!(
            reader.read_to_end(&mut rest).unwrap(),
            0,
            "connection closed after the error"
        );
    }
    assert_serving(&server);
}

#[test]
fn truncated_requests_leave_the_server_serving() {
    let server = Server::start(&["--shards", "2"]);
    let put = signed_request(
        "POST",
        "/devstoreaccount1/truncated-queue/messages",
        &[],
        &common::put_body("never complete"),
    );
    for cut in [1, 10, put.len() / 2, put.len() - 1] {
        let mut stream = server.connect();
        stream.write_all(&put[..cut]).unwrap();
        drop(stream);
    }
    // A chunked body that stops in the middle of a chunk.
    let mut stream = server.connect();
    stream
        .write_all(b"POST /devstoreaccount1/q-chunked/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc")
        .unwrap();
    drop(stream);
    assert_serving(&server);
    // Nothing was stored by the truncated requests.
    let metadata = exchange(
        &server,
        &signed_request(
            "GET",
            "/devstoreaccount1/truncated-queue?comp=metadata",
            &[],
            b"",
        ),
    );
    assert_eq!(metadata.status, 404);
}

#[test]
fn oversized_head_gets_431() {
    let server = Server::start(&[]);
    let mut raw = b"GET /devstoreaccount1?comp=list HTTP/1.1\r\nHost: x\r\nx-ms-long: ".to_vec();
    raw.extend(std::iter::repeat_n(b'a', 20 * 1024));
    raw.extend_from_slice(b"\r\n\r\n");
    let response = exchange(&server, &raw);
    assert_eq!(response.status, 431);
    assert_eq!(response.error_code(), Some("RequestHeaderTooLarge"));

    let mut many = b"GET /devstoreaccount1?comp=list HTTP/1.1\r\n".to_vec();
    for index in 0..150 {
        many.extend_from_slice(format!("x-h{index}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(exchange(&server, &many).status, 431);
    assert_serving(&server);
}

#[test]
fn oversized_body_gets_413_before_the_body_is_sent() {
    let server = Server::start(&[]);
    let mut stream = server.connect();
    // Only the head is sent: the answer must not wait for 100 MB that never come.
    stream
        .write_all(b"POST /devstoreaccount1/queue1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
        .unwrap();
    let response = read_response(&mut BufReader::new(stream), false).expect("an immediate answer");
    assert_eq!(response.status, 413);
    assert_eq!(response.error_code(), Some("RequestBodyTooLarge"));
    assert_serving(&server);
}

#[test]
fn expect_continue_gets_100_then_the_answer() {
    let server = Server::start(&[]);
    let body = common::put_body("hello");
    let raw = signed_request("PUT", "/devstoreaccount1/continue-queue", &[], b"");
    // Create the queue, then a Put Message with Expect: the body goes only after the 100.
    assert_eq!(exchange(&server, &raw).status, 201);
    let put = signed_request(
        "POST",
        "/devstoreaccount1/continue-queue/messages",
        &[("Expect", "100-continue")],
        &body,
    );
    let head_end = put.len() - body.len();
    let mut stream = server.connect();
    stream.write_all(&put[..head_end]).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let interim = read_response(&mut reader, false).unwrap();
    assert_eq!(interim.status, 100);
    stream.write_all(&body).unwrap();
    let response = read_response(&mut reader, false).unwrap();
    assert_eq!(response.status, 201, "{}", response.text());
}

/// A 100 Continue follows the answers to the requests pipelined before it, those sent to another
/// shard's queue too (their answers are awaited after later requests are parsed): a client
/// takes a 1xx as the interim answer to the request it is waiting on. Regression from
/// helper-91's review: the 100 went out before the answer to a Put sent to the other shard.
#[test]
fn expect_continue_after_requests_to_another_shard_follows_their_answers() {
    let server = Server::start(&["--shards", "2"]);
    // A queue on each shard.
    let queues = common::one_queue_a_shard("continued");
    for queue in &queues {
        let create = signed_request("PUT", &format!("/devstoreaccount1/{queue}"), &[], b"");
        assert_eq!(exchange(&server, &create).status, 201);
    }
    let put = |queue: &str, headers: &[(&str, &str)]| {
        let target = format!("/devstoreaccount1/{queue}/messages");
        signed_request("POST", &target, headers, &common::put_body("x"))
    };
    let body = common::put_body("x");
    // Each order ends with a Put to the other shard right before the Expect head on a
    // connection of one shard; connections land on either, so sixteen miss both only once in
    // 65,536 runs.
    for attempt in 0..16 {
        let (first, second) = if attempt % 2 == 0 {
            (&queues[0], &queues[1])
        } else {
            (&queues[1], &queues[0])
        };
        let expecting = put(first, &[("Expect", "100-continue")]);
        let mut batch = put(first, &[]);
        batch.extend(put(second, &[]));
        batch.extend_from_slice(&expecting[..expecting.len() - body.len()]);
        let mut stream = server.connect();
        stream.write_all(&batch).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let statuses: Vec<u16> = (0..3)
            .map(|_| read_response(&mut reader, false).unwrap().status)
            .collect();
        assert_eq!(statuses, [201, 201, 100], "attempt {attempt}");
        stream.write_all(&body).unwrap();
        assert_eq!(read_response(&mut reader, false).unwrap().status, 201);
    }
    assert_serving(&server);
}

#[test]
fn http10_and_connection_close_close_after_the_answer() {
    let server = Server::start(&[]);
    for (version, connection) in [("HTTP/1.0", ""), ("HTTP/1.1", "Connection: close\r\n")] {
        let raw = format!("GET /nosuchaccount?comp=list {version}\r\nHost: x\r\n{connection}\r\n");
        let mut stream = server.connect();
        stream.write_all(raw.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let response = read_response(&mut reader, false).unwrap();
        assert_eq!(response.status, 404);
        assert_eq!(response.error_code(), Some("ResourceNotFound"));
        let mut rest = Vec::new();
        assert_eq!(reader.read_to_end(&mut rest).unwrap(), 0);
    }
}

#[test]
fn head_request_has_no_body() {
    let server = Server::start(&[]);
    assert_eq!(
        exchange(
            &server,
            &signed_request("PUT", "/devstoreaccount1/head-queue", &[], b"")
        )
        .status,
        201
    );
    let mut stream = server.connect();
    // Two pipelined HEADs: if the first carried a body, the second response would be garbled.
    let mut raw = signed_request(
        "HEAD",
        "/devstoreaccount1/head-queue?comp=metadata",
        &[],
        b"",
    );
    raw.extend(signed_request(
        "HEAD",
        "/devstoreaccount1/no-such-queue?comp=metadata",
        &[],
        b"",
    ));
    stream.write_all(&raw).unwrap();
    let mut reader = BufReader::new(stream);
    let found = read_response(&mut reader, true).unwrap();
    assert_eq!(found.status, 200);
    assert_eq!(found.header("x-ms-approximate-messages-count"), Some("0"));
    let missing = read_response(&mut reader, true).unwrap();
    assert_eq!(missing.status, 404);
    assert_eq!(missing.error_code(), Some("QueueNotFound"));
}

#[test]
fn errors_carry_azure_headers_and_xml() {
    let server = Server::start(&[]);
    let cases: &[(&str, &str, u16, &str)] = &[
        (
            "GET",
            "/nosuchaccount/queue1?comp=metadata",
            404,
            "ResourceNotFound",
        ),
        (
            "PATCH",
            "/devstoreaccount1/queue1",
            405,
            "UnsupportedHttpVerb",
        ),
        ("GET", "/devstoreaccount1/queue1/bogus", 400, "InvalidUri"),
        (
            "GET",
            "/devstoreaccount1/Bad_Name?comp=metadata",
            400,
            "InvalidResourceName",
        ),
        (
            "GET",
            "/devstoreaccount1/ab?comp=metadata",
            400,
            "OutOfRangeInput",
        ),
        (
            "GET",
            "/devstoreaccount1/queue1/messages?numofmessages=33",
            400,
            "OutOfRangeQueryParameterValue",
        ),
        (
            "GET",
            "/devstoreaccount1/queue1/messages?numofmessages=x",
            400,
            "InvalidQueryParameterValue",
        ),
        (
            "GET",
            "/devstoreaccount1/no-such-queue/messages",
            404,
            "QueueNotFound",
        ),
        (
            "GET",
            "/devstoreaccount1?restype=service&comp=stats",
            400,
            "InvalidQueryParameterValue",
        ),
    ];
    for (method, target, status, code) in cases {
        let response = exchange(
            &server,
            &signed_request(
                method,
                target,
                &[("x-ms-client-request-id", "echo-me")],
                b"",
            ),
        );
        assert_eq!(
            (response.status, response.error_code()),
            (*status, Some(*code)),
            "{method} {target}"
        );
        assert_eq!(response.header("content-type"), Some("application/xml"));
        assert_eq!(response.header("x-ms-client-request-id"), Some("echo-me"));
        assert_eq!(response.header("x-ms-version"), Some("2026-04-06"));
        assert!(response
            .header("x-ms-request-id")
            .is_some_and(|id| id.len() == 36));
        assert!(response
            .header("date")
            .is_some_and(|date| date.ends_with(" GMT")));
        let text = response.text();
        assert!(
            text.starts_with("<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>"),
            "{text}"
        );
        assert!(
            text.contains(&format!("<Code>{code}</Code>")) && text.contains("RequestId:"),
            "{text}"
        );
    }
}

#[test]
fn unknown_newer_api_version_is_accepted_and_echoed() {
    let server = Server::start(&[]);
    let response = exchange(
        &server,
        &common::signed_request_with_version("GET", "/devstoreaccount1?comp=list", "2099-01-01"),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.header("x-ms-version"), Some("2099-01-01"));
}

#[test]
fn unsigned_and_wrongly_signed_requests_get_403() {
    let server = Server::start(&[]);
    let unsigned = exchange(
        &server,
        b"GET /devstoreaccount1?comp=list HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(
        (unsigned.status, unsigned.error_code()),
        (403, Some("AuthenticationFailed"))
    );
    let wrong_key =
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==";
    let wrong = exchange(
        &server,
        &common::signed_request_with_key("PUT", "/devstoreaccount1/wrong-key", &[], b"", wrong_key),
    );
    assert_eq!(
        (wrong.status, wrong.error_code()),
        (403, Some("AuthenticationFailed"))
    );
    // Nothing was created by the refused request.
    let metadata = exchange(
        &server,
        &signed_request("GET", "/devstoreaccount1/wrong-key?comp=metadata", &[], b""),
    );
    assert_eq!(metadata.status, 404);
}

#[test]
fn many_idle_connections_do_not_stop_service() {
    let server = Server::start(&["--shards", "2"]);
    let idle: Vec<_> = (0..500).map(|_| server.connect()).collect();
    // Half-sent requests too: a slow client must not block anyone else.
    let mut partial = server.connect();
    partial.write_all(b"GET /devstoreaccount1?comp=li").unwrap();
    assert_serving(&server);
    drop(idle);
    drop(partial);
    assert_serving(&server);
}

#[test]
fn connection_cap_answers_503() {
    let server = Server::start(&["--shards", "1", "--max-connections", "2"]);
    let _first = server.connect();
    let _second = server.connect();
    std::thread::sleep(Duration::from_millis(100));
    let mut third = server.connect();
    let response =
        read_response(&mut BufReader::new(third.try_clone().unwrap()), false).expect("a 503");
    assert_eq!(
        (response.status, response.error_code()),
        (503, Some("ServerBusy"))
    );
    let mut rest = Vec::new();
    assert_eq!(third.read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn sigterm_exits_zero() {
    let server = Server::start(&["--shards", "2"]);
    assert_serving(&server);
    assert!(server.stop().success());
}

#[test]
fn list_queues_page_size_is_capped_not_refused() {
    let server = Server::start(&[]);
    let large = exchange(
        &server,
        &signed_request(
            "GET",
            "/devstoreaccount1?comp=list&maxresults=9999",
            &[],
            b"",
        ),
    );
    assert_eq!(large.status, 200, "{}", large.text());
    assert!(large.text().contains("<MaxResults>9999</MaxResults>"));
    let zero = exchange(
        &server,
        &signed_request("GET", "/devstoreaccount1?comp=list&maxresults=0", &[], b""),
    );
    assert_eq!(
        (zero.status, zero.error_code()),
        (400, Some("OutOfRangeQueryParameterValue"))
    );
}

/// Regression (found by the soak's chaos client): a connection that sent only the empty lines HTTP
/// allows before a request line got the 120 s idle timeout, so a client could hold it open by
/// sending one now and then. Once any byte has arrived the request deadline (10 s) applies. On
/// both backends at once: this is the socket-level check of `runtime::deadline`'s sweep, which
/// fails a waiting read on each backend's own socket type.
#[test]
fn empty_lines_alone_meet_the_request_deadline() {
    std::thread::scope(|scope| {
        for backend in backends() {
            scope.spawn(move || {
                let server = Server::start_on(backend, &[]);
                let mut stream = server.connect();
                stream.write_all(b"\n\r\n\r\n").unwrap();
                let started = std::time::Instant::now();
                let mut rest = Vec::new();
                // The server closes without an answer: nothing was requested.
                assert_eq!(stream.read_to_end(&mut rest).unwrap(), 0, "{backend:?}");
                let waited = started.elapsed();
                let deadline = Duration::from_millis(azq::limits::REQUEST_HEAD_TIMEOUT_MS);
                assert!(
                    waited >= deadline - Duration::from_millis(500),
                    "{backend:?}: closed after {waited:?}"
                );
                assert!(
                    waited < deadline + Duration::from_secs(5),
                    "{backend:?}: closed after {waited:?}"
                );
            });
        }
    });
}
