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
