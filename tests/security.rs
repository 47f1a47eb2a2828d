//! The attacks of issue 25, each tried against the real server over TCP on both backends, as a
//! hostile client holding only the public development key or a narrow SAS would try them:
//! guessed and altered pop receipts, message IDs that tell how they were made, replayed
//! requests, metadata past the memory limit, metrics that name queues. Each test fails
//! on a server without the defence (its attack succeeds or gets feedback). Slow readers
//! (clients that pipeline large reads and never read the answers) must leave the server's
//! memory within a bound derived from `src/limits.rs`, other clients served, and be closed
//! after the write timeout.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use azq::limits::{
    CONNECTION_PENDING_OUTPUT_BYTES_MAX, MESSAGES_PER_GET_MAX, MESSAGE_TEXT_BYTES_MAX,
    SHARD_PENDING_OUTPUT_BYTES_MAX,
};
use base64::Engine as _;
use common::{
    assert_status, backends, create_queue, elements, exchange, put_body, send, service_sas,
    signed_request, unsigned_request, Server, TempDir,
};

fn messages_path(queue: &str) -> String {
    format!("/devstoreaccount1/{queue}/messages")
}

/// Percent-encodes a pop receipt for a query (base64's `+`, `/` and `=`).
fn encode(receipt: &str) -> String {
    receipt
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// Puts `text` and returns its ID.
fn put(server: &Server, queue: &str, text: &str) -> String {
    let response = send(
        server,
        signed_request("POST", &messages_path(queue), &[], &put_body(text)),
    );
    assert_status(&response, 201, None);
    elements(&response.text(), "MessageId")[0].to_string()
}

/// Gets one message for `visibility_s` and returns its ID and receipt.
fn get(server: &Server, queue: &str, visibility_s: u32) -> (String, String) {
    let target = format!("{}?visibilitytimeout={visibility_s}", messages_path(queue));
    let response = send(server, signed_request("GET", &target, &[], b""));
    assert_status(&response, 200, None);
    let text = response.text();
    (
        elements(&text, "MessageId")[0].to_string(),
        elements(&text, "PopReceipt")[0].to_string(),
    )
}

fn delete(server: &Server, queue: &str, id: &str, receipt: &str) -> common::Response {
    let target = format!(
        "{}/{id}?popreceipt={}",
        messages_path(queue),
        encode(receipt)
    );
    send(server, signed_request("DELETE", &target, &[], b""))
}

fn update(
    server: &Server,
    queue: &str,
    id: &str,
    receipt: &str,
    text: &str,
    visibility_s: u32,
) -> common::Response {
    let target = format!(
        "{}/{id}?popreceipt={}&visibilitytimeout={visibility_s}",
        messages_path(queue),
        encode(receipt)
    );
    send(server, signed_request("PUT", &target, &[], &put_body(text)))
}

/// `receipt` with the little-endian `u32` at `offset` of its bytes moved by `delta`: the
/// guesses the counters of earlier receipts invited (slot at 0, generation at 4, lease at 8).
fn altered(receipt: &str, offset: usize, delta: i64) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut raw = engine.decode(receipt).expect("a receipt is base64");
    let mut word = [0u8; 4];
    word.copy_from_slice(&raw[offset..offset + 4]);
    let moved = (i64::from(u32::from_le_bytes(word)) + delta) as u32;
    raw[offset..offset + 4].copy_from_slice(&moved.to_le_bytes());
    engine.encode(raw)
}

/// Peeks the queue's texts.
fn peek_texts(server: &Server, queue: &str) -> Vec<String> {
    let target = format!("{}?peekonly=true&numofmessages=32", messages_path(queue));
    let response = send(server, signed_request("GET", &target, &[], b""));
    assert_status(&response, 200, None);
    elements(&response.text(), "MessageText")
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// A consumer whose lease ran out takes its own receipt, moves the lease counter on by one and
/// tries to delete, then rewrite, the message another consumer holds now. Both are refused, the
/// holder's own receipt still works, and the message is untouched until then.
#[test]
fn a_guessed_receipt_neither_deletes_nor_rewrites_a_held_message() {
    for backend in backends() {
        let server = Server::start(backend);
        create_queue(&server, "held");
        let id = put(&server, "held", "the holder-s");
        let (_, attacker) = get(&server, "held", 60);
        // The attacker's lease ends (an update to visibility 0 ends it at once, without
        // sleeping), and the holder takes the message.
        let response = update(&server, "held", &id, &attacker, "the holder-s", 0);
        assert_status(&response, 204, None);
        let attacker = response.header("x-ms-popreceipt").unwrap().to_string();
        let (held_id, holder) = get(&server, "held", 60);
        assert_eq!(held_id, id);
        for guess in [1, 2, -1] {
            let guessed = altered(&attacker, 8, guess);
            assert_ne!(
                guessed, holder,
                "the holder-s receipt is no neighbour of the attacker's"
            );
            let refused = delete(&server, "held", &id, &guessed);
            assert_status(&refused, 404, Some("MessageNotFound"));
            let refused = update(&server, "held", &id, &guessed, "rewritten", 60);
            assert_status(&refused, 404, Some("MessageNotFound"));
        }
        // The attacker's own receipt is stale: Azure's answer for a receipt it once issued.
        let stale = delete(&server, "held", &id, &attacker);
        assert_status(&stale, 400, Some("PopReceiptMismatch"));
        let response = update(&server, "held", &id, &holder, "the holder-s, updated", 0);
        assert_status(&response, 204, None);
        assert_eq!(peek_texts(&server, "held"), ["the holder-s, updated"]);
        let holder = response.header("x-ms-popreceipt").unwrap().to_string();
        assert_status(&delete(&server, "held", &id, &holder), 204, None);
        server.stop();
    }
}

/// A made-up receipt gets the same answer whether its slot and generation name the message or
/// not: guessing gets no feedback about where a message lives (a right slot once answered 400,
/// a wrong one 404).
#[test]
fn a_made_up_receipt_gets_one_answer_wherever_it_points() {
    for backend in backends() {
        let server = Server::start(backend);
        create_queue(&server, "oracle");
        for index in 0..3 {
            put(&server, "oracle", &format!("message {index}"));
        }
        let (id, receipt) = get(&server, "oracle", 60);
        let guesses = [
            altered(&receipt, 8, 1),  // right slot and generation, next lease
            altered(&receipt, 0, 1),  // the neighbouring slot
            altered(&receipt, 0, 99), // a slot nothing is in
            altered(&receipt, 4, 1),  // the next generation of the right slot
        ];
        for guess in &guesses {
            let response = delete(&server, "oracle", &id, guess);
            assert_status(&response, 404, Some("MessageNotFound"));
        }
        assert_status(&delete(&server, "oracle", &id, &receipt), 204, None);
        server.stop();
    }
}

/// Message IDs are UUID v4 whose bits share nothing from one message to the next (they were a
/// per-shard prefix and a scrambled counter), and receipts are 28 characters, as Azure's.
#[test]
fn message_ids_are_random_uuids_and_receipts_are_opaque() {
    for backend in backends() {
        let server = Server::start(backend);
        create_queue(&server, "ids");
        let ids: Vec<u128> = (0..8)
            .map(|index| {
                let id = put(&server, "ids", &format!("m{index}"));
                let uuid = uuid::Uuid::parse_str(&id).expect("a UUID");
                assert_eq!(uuid.get_version_num(), 4, "{id}");
                assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{id}");
                uuid.as_u128()
            })
            .collect();
        for pair in ids.windows(2) {
            // The first 64 bits were the same for every message of a shard.
            assert_ne!(pair[0] >> 64, pair[1] >> 64);
            assert_ne!(pair[0] as u64, pair[1] as u64);
        }
        let (_, receipt) = get(&server, "ids", 60);
        assert_eq!(receipt.len(), 28, "{receipt}");
        server.stop();
    }
}

/// A SharedKey request signed with `date` as its `x-ms-date` (`""`: none), listing the queues.
fn dated_list(date: &str) -> Vec<u8> {
    let signer = common::Signer {
        date: Some(date),
        ..common::Signer::development()
    };
    signer.request("GET", "/devstoreaccount1?comp=list", &[], b"")
}

/// A signed request captured and sent again later, one dated ahead, an undated one and one
/// whose date is not a date: all 403 `AuthenticationFailed`, with either scheme, unless
/// `--skipRequestDateCheck` (then every one is served, which is why it is not the default).
#[test]
fn replayed_future_and_undated_requests_are_refused() {
    let now_ms = azq::time::unix_ms();
    let date = |offset_ms: i64| {
        String::from_utf8(azq::time::rfc1123((now_ms as i64 + offset_ms) as u64).to_vec()).unwrap()
    };
    let minute_ms = 60_000;
    let refused = [
        date(-16 * minute_ms),
        date(-30 * 24 * 60 * minute_ms),
        date(16 * minute_ms),
        String::new(),
        "whenever".to_string(),
        // Not RFC 1123: the weekday is not the date's.
        date(0).replacen(
            &date(0)[..3],
            if date(0).starts_with("Mon") {
                "Tue"
            } else {
                "Mon"
            },
            1,
        ),
    ];
    for backend in backends() {
        let server = Server::start(backend);
        for dated in refused.iter() {
            let response = send(&server, dated_list(dated));
            assert_status(&response, 403, Some("AuthenticationFailed"));
        }
        for accepted in [date(0), date(-14 * minute_ms), date(14 * minute_ms)] {
            assert_status(&send(&server, dated_list(&accepted)), 200, None);
        }
        // SharedKeyLite follows the same rule.
        let lite = common::Signer {
            scheme: azq::auth::shared_key::SharedKeyScheme::SharedKeyLite,
            date: Some(&refused[0]),
            ..common::Signer::development()
        };
        let response = send(
            &server,
            lite.request("GET", "/devstoreaccount1?comp=list", &[], b""),
        );
        assert_status(&response, 403, Some("AuthenticationFailed"));
        server.stop();
        let lenient = Server::start_on(backend, &["--skipRequestDateCheck"]);
        for dated in refused.iter() {
            assert_status(&send(&lenient, dated_list(dated)), 200, None);
        }
        lenient.stop();
    }
}

/// Queues with 8 KiB of metadata each fill `--max-memory` as messages would: Create Queue then
/// answers 503 `ServerBusy` (never a crash), the server keeps serving, and deleting a queue
/// makes room again. Before, queue metadata was not counted at all.
#[test]
fn queue_metadata_fills_the_memory_limit_with_server_busy() {
    let metadata = "x".repeat(8000);
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "1", "--max-memory", "256K"]);
        let create = |name: &str| {
            send(
                &server,
                signed_request(
                    "PUT",
                    &format!("/devstoreaccount1/{name}"),
                    &[("x-ms-meta-big", &metadata)],
                    b"",
                ),
            )
        };
        let mut created = 0;
        let busy = loop {
            let response = create(&format!("meta-{created}"));
            if response.status != 201 {
                break response;
            }
            created += 1;
            assert!(
                created < 64,
                "256 KiB took {created} queues of 8 KB metadata"
            );
        };
        assert_status(&busy, 503, Some("ServerBusy"));
        assert!(created >= 16, "only {created} queues fitted");
        let listed = send(
            &server,
            signed_request("GET", "/devstoreaccount1?comp=list", &[], b""),
        );
        assert_status(&listed, 200, None);
        let deleted = send(
            &server,
            signed_request("DELETE", "/devstoreaccount1/meta-0", &[], b""),
        );
        assert_status(&deleted, 204, None);
        assert_status(&create("meta-again"), 201, None);
        server.stop();
    }
}

#[test]
fn queue_acls_fill_the_memory_limit_with_server_busy() {
    // Five identifiers of 64 characters with both times: about 1.4 KiB counted per copy.
    let identifiers: String = (0..5)
        .map(|index| {
            format!(
                "<SignedIdentifier><Id>{index}{}</Id><AccessPolicy>\
                 <Start>2026-01-01T00:00:00.0000000Z</Start>\
                 <Expiry>2027-01-01T00:00:00.0000000Z</Expiry>\
                 <Permission>raup</Permission></AccessPolicy></SignedIdentifier>",
                "i".repeat(63)
            )
        })
        .collect();
    let acl = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers>{identifiers}\
         </SignedIdentifiers>"
    );
    const QUEUES: usize = 40;
    for backend in backends() {
        // 40 queue records take about 21 KiB of the 64 KiB, their ACLs would take 56 KiB more.
        let server = Server::start_on(backend, &["--shards", "1", "--max-memory", "64K"]);
        let set_acl = |name: &str| {
            send(
                &server,
                signed_request(
                    "PUT",
                    &format!("/devstoreaccount1/{name}?comp=acl"),
                    &[],
                    acl.as_bytes(),
                ),
            )
        };
        for index in 0..QUEUES {
            let path = format!("/devstoreaccount1/acl-{index}");
            let created = send(&server, signed_request("PUT", &path, &[], b""));
            assert_status(&created, 201, None);
        }
        let mut set = 0;
        let busy = loop {
            assert!(set < QUEUES, "every ACL fitted: ACLs are not counted");
            let response = set_acl(&format!("acl-{set}"));
            if response.status != 204 {
                break response;
            }
            set += 1;
        };
        assert_status(&busy, 503, Some("ServerBusy"));
        assert!(set >= 10, "only {set} ACLs fitted");
        // The refused queue's ACL is as it was: none.
        let refused = send(
            &server,
            signed_request(
                "GET",
                &format!("/devstoreaccount1/acl-{set}?comp=acl"),
                &[],
                b"",
            ),
        );
        assert_status(&refused, 200, None);
        assert!(
            !refused.text().contains("<SignedIdentifier>"),
            "{}",
            refused.text()
        );
        // Deleting a queue with an ACL frees its copy's charge.
        let deleted = send(
            &server,
            signed_request("DELETE", "/devstoreaccount1/acl-0", &[], b""),
        );
        assert_status(&deleted, 204, None);
        assert_status(&set_acl(&format!("acl-{set}")), 204, None);
        server.stop();
    }
}

/// The server's resident memory (`VmRSS` of `/proc/PID/status`), bytes.
fn resident_bytes(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .expect("the server's /proc status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib * 1024
}

/// The sum of the `/_azq/metrics` samples whose line starts with `prefix` (a per-shard
/// series, `name{shard=`, summed over the shards).
fn metric(server: &Server, prefix: &str) -> u64 {
    let response = exchange(server, b"GET /_azq/metrics HTTP/1.1\r\nHost: azq\r\n\r\n");
    assert_status(&response, 200, None);
    response
        .text()
        .lines()
        .filter(|line| line.starts_with(prefix))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// The gauge of the bytes a shard's connections are writing.
const PENDING: &str = "azq_pending_output_bytes{";
/// Per-connection memory beyond its answers, for the bound: two 16 KiB buffers (read and
/// write), the task and the socket's bookkeeping, rounded up generously.
const CONNECTION_OVERHEAD_BYTES: u64 = 64 * 1024;
/// Room for the allocator's own slack around freed large buffers.
const ALLOCATOR_SLACK_BYTES: u64 = 16 << 20;

/// `connections` clients, each with a 4 KiB receive buffer, send `request` `pipelined` times
/// and never read (`answer_bytes_max`: the largest answer one request gets). Checks that:
/// - the server's RSS stays within its resident memory before the flood plus what the limits
///   let it hold: `SHARD_PENDING_OUTPUT_BYTES_MAX` (one shard), plus what one connection may
///   add after the bound is crossed (`CONNECTION_PENDING_OUTPUT_BYTES_MAX` and one answer, twice
///   over), plus `CONNECTION_OVERHEAD_BYTES` per connection and `ALLOCATOR_SLACK_BYTES`;
/// - the shard's output fills (`azq_pending_output_bytes` past the bound) and requests that
///   could answer in bulk (`operation`) are then refused with 503 `ServerBusy`, while a normal
///   client's Put is served;
/// - once the write timeout has passed, no answer is pending, the stalled connections are
///   closed (their clients read what the kernel held, then the end of the stream), and the
///   normal client's `check` read is served again.
fn slow_readers_are_bounded(
    server: &Server,
    operation: &str,
    request: &[u8],
    pipelined: usize,
    connections: usize,
    answer_bytes_max: u64,
    check: &[u8],
) {
    let baseline = resident_bytes(server);
    let bound = baseline
        + SHARD_PENDING_OUTPUT_BYTES_MAX as u64
        + 2 * (CONNECTION_PENDING_OUTPUT_BYTES_MAX as u64 + answer_bytes_max)
        + connections as u64 * CONNECTION_OVERHEAD_BYTES
        + ALLOCATOR_SLACK_BYTES;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], server.port));
    let readers: Vec<TcpStream> = (0..connections)
        .map(|_| {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                .expect("a socket");
            socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
            socket.connect(&address.into()).expect("connects");
            let mut stream = TcpStream::from(socket);
            stream.write_all(&request.repeat(pipelined)).expect("sent");
            stream
        })
        .collect();

    // Watch the server while the slow readers hold it: its memory never passes the bound, and
    // its output fills past the shard's limit (without the limit it never would, and its
    // memory grows with every connection).
    let (mut peak, mut full, watched) = (0, false, Instant::now());
    while watched.elapsed() < Duration::from_secs(10) && !(full && peak > 0) {
        peak = peak.max(resident_bytes(server));
        full = metric(server, PENDING) > SHARD_PENDING_OUTPUT_BYTES_MAX as u64;
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..5 {
        peak = peak.max(resident_bytes(server));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        peak <= bound,
        "{connections} slow readers took the server from {baseline} to {peak} bytes resident \
         (bound {bound})"
    );
    assert!(full, "the shard's pending output never reached its bound");
    // A normal client's small write is served meanwhile.
    let put = send(
        server,
        signed_request(
            "POST",
            "/devstoreaccount1/normal/messages",
            &[],
            &put_body("still served"),
        ),
    );
    assert_status(&put, 201, None);
    // Slow readers that came once the shard's output was full had their reads refused.
    let refused = format!("azq_requests_total{{operation=\"{operation}\",status=\"503\"");
    assert!(metric(server, &refused) > 0, "no {operation} was refused");

    // The stalled writes end with the write timeout: nothing pending, their connections closed.
    let stalled_min = SHARD_PENDING_OUTPUT_BYTES_MAX as u64
        / (CONNECTION_PENDING_OUTPUT_BYTES_MAX as u64 + answer_bytes_max);
    let waited = Instant::now();
    loop {
        let pending = metric(server, PENDING);
        let open = metric(server, "azq_open_connections{");
        // Every slow reader but the stalled ones, and this metrics request.
        if pending == 0 && open <= connections as u64 + 1 - stalled_min {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "60 s on, {pending} bytes still pending and {open} connections open"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut first = readers.first().unwrap().try_clone().unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    match first.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
    }
    let served = send(server, check.to_vec());
    assert_status(&served, 200, None);
    drop(readers);
}

/// The issue's slow-reader flood: 200 connections each pipeline 8 Peeks of 32 messages of 64
/// KiB (about 2 MiB an answer) and never read. Before the output bounds the server held every
/// answer (the issue measured 600 such connections at over 1 GB, still held past the idle
/// timeout).
#[test]
fn slow_readers_of_large_peeks_are_bounded_and_closed() {
    let text = "a".repeat(MESSAGE_TEXT_BYTES_MAX);
    let peek = format!(
        "{}?peekonly=true&numofmessages={MESSAGES_PER_GET_MAX}",
        messages_path("flood")
    );
    // 32 messages of 64 KiB, with their XML envelopes.
    let answer_bytes_max = MESSAGES_PER_GET_MAX as u64 * (MESSAGE_TEXT_BYTES_MAX as u64 + 1024);
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "1", "--write-timeout", "5s"]);
        create_queue(&server, "flood");
        create_queue(&server, "normal");
        for _ in 0..MESSAGES_PER_GET_MAX {
            put(&server, "flood", &text);
        }
        slow_readers_are_bounded(
            &server,
            "PeekMessages",
            &signed_request("GET", &peek, &[], b""),
            8,
            200,
            answer_bytes_max,
            &signed_request("GET", &peek, &[], b""),
        );
        server.stop();
    }
}

/// The same with List Queues over 256 queues of 8 KB metadata (`include=metadata`, about 2
/// MiB an answer), 100 connections pipelining 4 each.
#[test]
fn slow_readers_of_large_listings_are_bounded_and_closed() {
    let metadata = "m".repeat(8000);
    let list = "/devstoreaccount1?comp=list&include=metadata";
    let queues = 256;
    let answer_bytes_max = queues * (8000 + 1024);
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "1", "--write-timeout", "5s"]);
        create_queue(&server, "normal");
        for index in 0..queues {
            let created = send(
                &server,
                signed_request(
                    "PUT",
                    &format!("/devstoreaccount1/listed-{index}"),
                    &[("x-ms-meta-big", &metadata)],
                    b"",
                ),
            );
            assert_status(&created, 201, None);
        }
        slow_readers_are_bounded(
            &server,
            "ListQueues",
            &signed_request("GET", list, &[], b""),
            4,
            100,
            answer_bytes_max,
            &signed_request("GET", list, &[], b""),
        );
        server.stop();
    }
}

/// `/_azq/metrics` needs no credentials: by default it counts but names no queue, `--metrics
/// queues` adds the deepest queues' depths by name, and `--metrics off` answers 404. Before,
/// it always named the ten deepest queues of every account.
#[test]
fn metrics_name_queues_only_when_asked_and_can_be_turned_off() {
    let scrape = |server: &Server| {
        exchange(
            server,
            b"GET /_azq/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
        )
    };
    for backend in backends() {
        for (mode, named) in [(None, false), (Some("on"), false), (Some("queues"), true)] {
            let mut arguments = backend.to_vec();
            arguments.extend(mode.map(|mode| ["--metrics", mode]).iter().flatten());
            let server = Server::start(&arguments);
            create_queue(&server, "payroll-secret");
            put(&server, "payroll-secret", "x");
            let response = scrape(&server);
            assert_status(&response, 200, None);
            let text = response.text();
            assert!(
                text.contains("azq_messages{shard=\"0\"}"),
                "{mode:?}: {text}"
            );
            assert!(text.contains("PutMessage"), "{mode:?}: {text}");
            assert_eq!(text.contains("payroll-secret"), named, "{mode:?}: {text}");
            assert_eq!(
                text.contains(
                    "azq_queue_depth{account=\"devstoreaccount1\",\
                               queue=\"payroll-secret\"} 1\n"
                ),
                named,
                "{mode:?}: {text}"
            );
            server.stop();
        }
        let off = Server::start_on(backend, &["--metrics", "off"]);
        create_queue(&off, "payroll-secret");
        let response = scrape(&off);
        assert_eq!(response.status, 404);
        assert!(
            response.text().contains("--metrics off"),
            "{}",
            response.text()
        );
        // The rest of azq's endpoints and the REST API still answer.
        let health = exchange(
            &off,
            b"GET /_azq/health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
        );
        assert_eq!(health.status, 200);
        off.stop();
    }
}

/// The SharedKey signature of a request `common::signed_request` made.
fn shared_key_signature(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    text.split("SharedKey devstoreaccount1:")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .expect("a SharedKey request")
        .to_string()
}

/// `signature` (base64, maybe percent-encoded) with its first character changed: as long,
/// and wrong.
fn forged(signature: &str) -> String {
    let rest = match signature.strip_prefix('%') {
        Some(_) => &signature[3..],
        None => &signature[1..],
    };
    let first = if signature.starts_with('A') { 'B' } else { 'A' };
    format!("{first}{rest}")
}

/// The request log (`-d FILE`) holds no credential that works: neither a SAS's `sig` (in the
/// URL it logs) nor a SharedKey signature (in the string-to-sign of a refused request), and it
/// is created readable by its owner only; an existing log keeps its mode. Before, it held
/// working SAS signatures and was created with the umask's mode (usually world-readable).
#[test]
fn the_request_log_holds_no_signature_and_is_private() {
    use std::os::unix::fs::PermissionsExt;
    for backend in backends() {
        let directory = TempDir::new("request-log");
        let log = directory.path().join("requests.log");
        let log_arg = log.to_str().expect("a UTF-8 path");
        let server = Server::start_on(backend, &["-d", log_arg]);
        create_queue(&server, "logged");
        put(&server, "logged", "x");
        // A SharedKey request that works, and one whose signature is wrong with a `sig` in
        // its query (which then appears in the string-to-sign azq logs).
        let shared_key = signed_request("GET", "/devstoreaccount1/logged?comp=metadata", &[], b"");
        let shared_key_sig = shared_key_signature(&shared_key);
        assert_status(&send(&server, shared_key), 200, None);
        let target = "/devstoreaccount1/logged?comp=metadata&sig=c2hhcmVka2V5cXVlcnlzaWc%3D";
        let refused = signed_request("GET", target, &[], b"");
        let refused_sig = shared_key_signature(&refused);
        let refused = String::from_utf8(refused)
            .unwrap()
            .replace(&refused_sig, &forged(&refused_sig));
        assert_status(
            &send(&server, refused.into_bytes()),
            403,
            Some("AuthenticationFailed"),
        );
        // A SAS that works, and one whose signature is wrong.
        let token = service_sas(
            "logged",
            &[
                ("sv", "2026-10-06"),
                ("sp", "r"),
                ("se", "2099-01-01T00:00:00Z"),
            ],
        );
        let sas_sig = token.rsplit("sig=").next().unwrap().to_string();
        let peek = format!("/devstoreaccount1/logged/messages?peekonly=true&{token}");
        assert_status(
            &send(&server, unsigned_request("GET", &peek, b"")),
            200,
            None,
        );
        let wrong = peek.replace(&sas_sig, &forged(&sas_sig));
        assert_status(
            &send(&server, unsigned_request("GET", &wrong, b"")),
            403,
            Some("AuthenticationFailed"),
        );
        server.stop();

        let text = std::fs::read_to_string(&log).expect("the request log");
        assert!(
            text.contains("/devstoreaccount1/logged/messages?peekonly=true"),
            "{text}"
        );
        assert!(text.contains("signature mismatch; signed"), "{text}");
        assert!(text.contains("\\nsig:REDACTED"), "{text}");
        assert!(text.contains("sig=REDACTED"), "{text}");
        let decoded_sas_sig = sas_sig
            .replace("%2B", "+")
            .replace("%2F", "/")
            .replace("%3D", "=");
        for secret in [
            &sas_sig[..20],
            &decoded_sas_sig[..20],
            &shared_key_sig[..20],
            "c2hhcmVka2V5cXVlcnlzaWc",
        ] {
            assert!(!text.contains(secret), "{secret} in\n{text}");
        }
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // An existing log is appended to, its mode as its owner set it.
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o640)).unwrap();
        let again = Server::start_on(backend, &["-d", log_arg]);
        create_queue(&again, "again");
        again.stop();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("/devstoreaccount1/again"), "{text}");
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }
}

/// A v2 PROXY header (PROXY command, TCP over IPv4) for a client at `client`, to 127.0.0.1.
fn proxy_v2(client: [u8; 4]) -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    header.extend_from_slice(&client);
    header.extend_from_slice(&[127, 0, 0, 1]);
    header.extend_from_slice(&40000u16.to_be_bytes());
    header.extend_from_slice(&10001u16.to_be_bytes());
    header
}

/// Sends `header` and then `request` on a new connection; the answer, or `None` when the
/// server closed the connection without one.
fn through_proxy_header(
    server: &Server,
    header: &[u8],
    request: &[u8],
) -> Option<common::Response> {
    use std::io::Write;
    let mut stream = server.connect();
    stream.write_all(header).unwrap();
    stream.write_all(request).unwrap();
    let mut reader = std::io::BufReader::new(stream);
    common::read_response(&mut reader, false)
}

/// With `--proxyProtocol` a connection that starts a PROXY header and never finishes it (or
/// sends nothing) is closed once `PROXY_HEADER_TIMEOUT_MS` have passed, not held open: a slow
/// or silent client cannot keep a connection slot. The server serves the next connection.
#[test]
fn a_proxy_header_never_finished_is_closed_after_its_timeout() {
    let servers: Vec<Server> = backends()
        .into_iter()
        .map(|backend| Server::start_on(backend, &["--proxyProtocol"]))
        .collect();
    let stalled: Vec<(TcpStream, TcpStream)> = servers
        .iter()
        .map(|server| {
            let mut partial = server.connect();
            partial.write_all(b"PROXY TCP4 203.0.113.9").unwrap();
            (partial, server.connect())
        })
        .collect();
    for (mut partial, mut silent) in stalled {
        for stream in [&mut partial, &mut silent] {
            // `connect` sets a 20 s read timeout, four times the header's: an error here is
            // that timeout, a connection still held.
            let mut byte = [0u8; 1];
            let read = loop {
                match stream.read(&mut byte) {
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                    read => break read,
                }
            };
            match read {
                Ok(0) => {}
                Ok(_) => panic!("an answer to no request"),
                Err(error) => assert_eq!(
                    error.kind(),
                    std::io::ErrorKind::ConnectionReset,
                    "still open: {error}"
                ),
            }
        }
    }
    for server in servers {
        let health = b"GET /_azq/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        let header = b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 10001\r\n";
        let answered = through_proxy_header(&server, header, health).expect("an answer");
        assert_status(&answered, 200, None);
        server.stop();
    }
}

/// With `--proxyProtocol` a connection must begin with a PROXY header (else it is closed
/// unanswered), and the client address of a v1 or v2 header is the one a SAS `sip` is checked
/// against and the request log names. Before, behind a proxy `sip` saw the proxy's address.
#[test]
fn the_proxy_protocol_header_is_required_and_names_the_client() {
    for backend in backends() {
        let directory = TempDir::new("proxy-protocol");
        let log = directory.path().join("requests.log");
        let log_arg = log.to_str().expect("a UTF-8 path");
        let server = Server::start_on(backend, &["--proxyProtocol", "-d", log_arg]);
        let sas_peek = |sip: &str| {
            let token = service_sas(
                "proxied",
                &[
                    ("sv", "2026-10-06"),
                    ("sp", "r"),
                    ("se", "2099-01-01T00:00:00Z"),
                    ("sip", sip),
                ],
            );
            unsigned_request(
                "GET",
                &format!("/devstoreaccount1/proxied/messages?peekonly=true&{token}"),
                b"",
            )
        };
        // No header: closed without an answer, whatever was sent.
        let health = b"GET /_azq/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        assert!(through_proxy_header(&server, b"", health).is_none());
        assert!(through_proxy_header(&server, b"PROXY TCP4 nonsense\r\n", health).is_none());
        // A v2 header announcing 60,000 bytes of TLVs: closed once PROXY_HEADER_BYTES_MAX
        // have arrived without a whole header, not held until they all do.
        let mut oversized = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
        oversized.extend_from_slice(&60_000u16.to_be_bytes());
        oversized.resize(azq::limits::PROXY_HEADER_BYTES_MAX + 16, 0);
        assert!(through_proxy_header(&server, &oversized, health).is_none());
        // With a header, requests are served.
        let create = signed_request("PUT", "/devstoreaccount1/proxied", &[], b"");
        let v1 = b"PROXY TCP4 203.0.113.9 127.0.0.1 40000 10001\r\n";
        let created = through_proxy_header(&server, v1, &create).expect("an answer");
        assert_status(&created, 201, None);
        // v1: the SAS for the header's client works, one for the real peer does not.
        let allowed = through_proxy_header(&server, v1, &sas_peek("203.0.113.9")).unwrap();
        assert_status(&allowed, 200, None);
        let refused = through_proxy_header(&server, v1, &sas_peek("127.0.0.1")).unwrap();
        assert_status(&refused, 403, Some("AuthorizationSourceIPMismatch"));
        // v2 likewise, with a range.
        let v2 = proxy_v2([198, 51, 100, 4]);
        let allowed = through_proxy_header(&server, &v2, &sas_peek("198.51.100.0-198.51.100.9"));
        assert_status(&allowed.unwrap(), 200, None);
        let refused = through_proxy_header(&server, &v2, &sas_peek("203.0.113.9")).unwrap();
        assert_status(&refused, 403, Some("AuthorizationSourceIPMismatch"));
        // `azq healthcheck` sends a LOCAL header when told to (or when the server beside it
        // runs with the flag), and gets no answer without one.
        let healthcheck = |extra: &[&str]| {
            std::process::Command::new(common::azq_binary())
                .args(["healthcheck", "--queuePort", &server.port.to_string()])
                .args(extra)
                .output()
                .expect("azq healthcheck runs")
                .status
                .code()
        };
        assert_eq!(healthcheck(&["--proxyProtocol"]), Some(0));
        assert_eq!(healthcheck(&[]), Some(1));
        server.stop();
        let text = std::fs::read_to_string(&log).expect("the request log");
        assert!(
            text.contains("authentication failed for 203.0.113.9"),
            "{text}"
        );
        assert!(
            text.contains("authentication failed for 198.51.100.4"),
            "{text}"
        );
        assert!(text.contains("closed: not a PROXY header"), "{text}");
        assert!(text.contains("no whole header in 4096 bytes"), "{text}");
    }
}
