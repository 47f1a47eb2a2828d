//! Overload over real TCP: the `--max-memory` budget for stored messages. Beyond it Put answers
//! 503 `ServerBusy`, everything already stored stays intact, and freeing messages makes room again.

mod common;

use common::{elements, exchange, put_body, signed_request, Server};

const QUEUE: &str = "/devstoreaccount1/memory-bound";

fn put(server: &Server, text: &str) -> common::Response {
    exchange(
        server,
        &signed_request("POST", &format!("{QUEUE}/messages"), &[], &put_body(text)),
    )
}

fn approximate_count(server: &Server) -> usize {
    let metadata = exchange(
        server,
        &signed_request("GET", &format!("{QUEUE}?comp=metadata"), &[], b""),
    );
    metadata
        .header("x-ms-approximate-messages-count")
        .and_then(|count| count.parse().ok())
        .expect("a count")
}

#[test]
fn puts_beyond_max_memory_get_503_and_stored_messages_survive() {
    // 64 KiB holds 56 messages of 1 KiB text plus their 128-byte overhead.
    let server = Server::start(&["--shards", "1", "--max-memory", "64K"]);
    assert_eq!(
        exchange(&server, &signed_request("PUT", QUEUE, &[], b"")).status,
        201
    );
    let text = "m".repeat(1024);
    let mut accepted = 0;
    let refused = loop {
        let response = put(&server, &text);
        if response.status != 201 {
            break response;
        }
        accepted += 1;
        assert!(accepted <= 64, "the budget was never enforced");
    };
    assert_eq!(
        (refused.status, refused.error_code()),
        (503, Some("ServerBusy"))
    );
    assert_eq!(
        accepted,
        64 * 1024 / (1024 + azq::config::MESSAGE_OVERHEAD_BYTES)
    );
    // Everything accepted is still there, intact.
    assert_eq!(approximate_count(&server), accepted);
    let peeked = exchange(
        &server,
        &signed_request(
            "GET",
            &format!("{QUEUE}/messages?peekonly=true&numofmessages=32"),
            &[],
            b"",
        ),
    );
    let texts = elements(&peeked.text(), "MessageText")
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert_eq!(texts.len(), 32);
    assert!(texts.iter().all(|stored| *stored == text));
    // Clearing frees the budget.
    assert_eq!(
        exchange(
            &server,
            &signed_request("DELETE", &format!("{QUEUE}/messages"), &[], b"")
        )
        .status,
        204
    );
    assert_eq!(put(&server, &text).status, 201);
}

/// Raises this test process's open-files soft limit to its hard limit (10,000 client sockets).
fn raise_open_files_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit read and write a plain struct owned by this frame.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        limit.rlim_cur
    }
}

#[test]
fn ten_thousand_connections_and_five_thousand_queues() {
    const CONNECTIONS: usize = 10_000;
    const QUEUES: usize = 5_000;
    let open_files_max = raise_open_files_limit();
    assert!(
        open_files_max as usize > CONNECTIONS + 100,
        "this machine allows only {open_files_max} open files"
    );
    let server = Server::start(&["--shards", "2"]);

    // Thousands of queues, created over a few pipelined connections, listed back in pages.
    use std::io::{BufReader, Write};
    for batch in 0..5 {
        let mut raw = Vec::new();
        for index in (batch * QUEUES / 5)..((batch + 1) * QUEUES / 5) {
            raw.extend(signed_request(
                "PUT",
                &format!("/devstoreaccount1/many-{index:05}"),
                &[],
                b"",
            ));
        }
        let mut stream = server.connect();
        stream.write_all(&raw).unwrap();
        let mut reader = BufReader::new(stream);
        for _ in 0..QUEUES / 5 {
            assert_eq!(
                common::read_response(&mut reader, false).unwrap().status,
                201
            );
        }
    }
    let mut listed = Vec::new();
    let mut marker = String::new();
    loop {
        let page = exchange(
            &server,
            &signed_request(
                "GET",
                &format!(
                    "/devstoreaccount1?comp=list&prefix=many-&maxresults=2000&marker={marker}"
                ),
                &[],
                b"",
            ),
        );
        let text = page.text();
        listed.extend(elements(&text, "Name").into_iter().map(str::to_string));
        match elements(&text, "NextMarker").first() {
            Some(next) => marker = next.to_string(),
            None => break,
        }
    }
    let expected: Vec<String> = (0..QUEUES)
        .map(|index| format!("many-{index:05}"))
        .collect();
    assert_eq!(listed, expected, "every queue, once, in name order");

    // Ten thousand connections open at once, each then served.
    let mut connections = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        connections.push(server.connect());
    }
    let request = signed_request(
        "GET",
        "/devstoreaccount1/many-00042?comp=metadata",
        &[],
        b"",
    );
    for stream in &mut connections {
        stream.write_all(&request).unwrap();
    }
    for stream in connections {
        let response =
            common::read_response(&mut BufReader::new(stream), false).expect("an answer");
        assert_eq!(response.status, 200);
    }
}
