//! Overload over real TCP: the `--max-memory` budget for stored messages. Beyond it Put answers
//! 503 `ServerBusy`, everything already stored stays intact, and freeing messages makes room again
//! (also when a Clear or Delete Queue leaves more than one background step of messages to free).

mod common;

use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use common::{elements, exchange, put_body, read_response, signed_request, Server};

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
        64 * 1024 / (1024 + azq::limits::MESSAGE_OVERHEAD_BYTES)
    );
    // The refusal is counted as the memory limit's, not the disk's.
    let metrics = common::metrics(&server);
    assert!(
        metrics.contains("\nazq_memory_refusals_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nazq_disk_refusals_total 0\n"),
        "{metrics}"
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

/// Puts `text` into `queue` over one connection, pipelined in rounds of 500, until a Put is
/// refused; returns how many were stored and the refusal's status and code.
fn fill(server: &Server, queue: &str, text: &str) -> (usize, u16, Option<String>) {
    let request = signed_request("POST", &format!("{queue}/messages"), &[], &put_body(text));
    let stream = server.connect();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut stored = 0;
    loop {
        writer.write_all(&request.repeat(500)).unwrap();
        let mut refusal = None;
        for _ in 0..500 {
            let response = read_response(&mut reader, false).expect("a response");
            match response.status {
                201 if refusal.is_none() => stored += 1,
                201 => panic!("a Put was stored after one was refused"),
                status => {
                    let code = response.error_code().map(str::to_string);
                    refusal.get_or_insert((status, code));
                }
            }
        }
        if let Some((status, code)) = refusal {
            return (stored, status, code);
        }
        assert!(stored < 100_000, "the budget was never enforced");
    }
}

/// Waits (bounded) until a Put into `queue` is stored again: the shard has freed the messages
/// a Clear or Delete Queue left behind in its background steps.
fn wait_until_put_fits(server: &Server, queue: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let request = signed_request("POST", &format!("{queue}/messages"), &[], &put_body(text));
    loop {
        let response = exchange(server, &request);
        match response.status {
            201 => return,
            503 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            status => panic!("Put after freeing: {status} {:?}", response.error_code()),
        }
    }
}

#[test]
fn cleared_and_deleted_queues_give_all_their_memory_back() {
    // 2 MiB holds, beside the queue's record (512 bytes), 10,920 messages of 64 bytes (plus 128
    // of overhead each): more than two of the shard's 4,096-message background steps.
    let server = Server::start(&["--shards", "1", "--max-memory", "2M"]);
    let queue = "/devstoreaccount1/graveyard";
    let create = signed_request("PUT", queue, &[], b"");
    assert_eq!(exchange(&server, &create).status, 201);
    let text = "g".repeat(64);
    let capacity = (2 * 1024 * 1024 - azq::limits::QUEUE_OVERHEAD_BYTES)
        / (64 + azq::limits::MESSAGE_OVERHEAD_BYTES);
    let (stored, status, code) = fill(&server, queue, &text);
    assert_eq!(
        (stored, status, code.as_deref()),
        (capacity, 503, Some("ServerBusy"))
    );

    // Clear: the queue is empty at once, and the memory comes back within the wait.
    let clear = signed_request("DELETE", &format!("{queue}/messages"), &[], b"");
    assert_eq!(exchange(&server, &clear).status, 204);
    wait_until_put_fits(&server, queue, &text);
    let (stored, _, _) = fill(&server, queue, &text);
    assert_eq!(stored + 1, capacity, "a cleared message still counts");

    // Delete Queue, then a new queue of the same name: empty, and all the memory is back.
    assert_eq!(
        exchange(&server, &signed_request("DELETE", queue, &[], b"")).status,
        204
    );
    assert_eq!(exchange(&server, &create).status, 201);
    let metadata = exchange(
        &server,
        &signed_request("GET", &format!("{queue}?comp=metadata"), &[], b""),
    );
    assert_eq!(
        metadata.header("x-ms-approximate-messages-count"),
        Some("0")
    );
    wait_until_put_fits(&server, queue, &text);
    let (stored, _, _) = fill(&server, queue, &text);
    assert_eq!(
        stored + 1,
        capacity,
        "a deleted queue's message still counts"
    );
}

/// The process's resident memory, from its metrics.
fn resident_bytes(server: &Server) -> u64 {
    common::metric_sample(&common::metrics(server), "process_resident_memory_bytes")
}

/// A drained backlog gives its memory back to the system, not only to the `--max-memory`
/// budget: glibc kept the freed texts in its arenas, and the process stayed at its peak
/// resident memory after a drain (seen in azq-loadgen's server series). 128 MiB of texts are
/// stored, then cleared; the resident memory must fall by more than half of that.
#[test]
fn a_drained_backlog_gives_its_memory_back_to_the_system() {
    let server = Server::start(&["--shards", "1", "--max-memory", "128M"]);
    let queue = "/devstoreaccount1/backlog";
    assert_eq!(
        exchange(&server, &signed_request("PUT", queue, &[], b"")).status,
        201
    );
    let text = "b".repeat(8 * 1024);
    let (stored, status, _) = fill(&server, queue, &text);
    assert_eq!(status, 503);
    let stored_bytes = (stored * text.len()) as u64;
    let full = resident_bytes(&server);
    assert!(
        full > stored_bytes,
        "{full} resident for {stored_bytes} stored"
    );
    let clear = signed_request("DELETE", &format!("{queue}/messages"), &[], b"");
    assert_eq!(exchange(&server, &clear).status, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = resident_bytes(&server);
        if now < full - stored_bytes / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{now} bytes resident after the drain, {full} before\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ten_thousand_connections_and_five_thousand_queues() {
    const CONNECTIONS: usize = 10_000;
    const QUEUES: usize = 5_000;
    // 10,000 client sockets in this process.
    let open_files_max = azq::runtime::raise_open_files_limit().expect("open-files limits");
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
