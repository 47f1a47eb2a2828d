//! The console's assets and JSON: every file is served, the page loads nothing from elsewhere,
//! and inspection's JSON parses with the fields the console reads.

use bytes::Bytes;

use super::*;
use crate::queue::{Activity, MessageId, QueueKey, Visibility};

#[test]
fn every_asset_is_served_and_nothing_comes_from_elsewhere() {
    let (content_type, page) = asset(b"/_azq/ui").unwrap();
    assert!(content_type.starts_with("text/html"));
    assert_eq!(asset(b"/_azq/ui/"), asset(b"/_azq/ui"));
    assert!(asset(b"/_azq/ui/console.js")
        .unwrap()
        .0
        .starts_with("text/javascript"));
    assert!(asset(b"/_azq/ui/console.css")
        .unwrap()
        .0
        .starts_with("text/css"));
    assert_eq!(asset(b"/_azq/ui/nothing.js"), None);
    assert_eq!(asset(b"/_azq/uix"), None);
    for (_, _, text) in ASSETS {
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "an outside URL"
        );
    }
    // Everything the page refers to is one of the assets.
    for reference in ["/_azq/ui/console.js", "/_azq/ui/console.css"] {
        assert!(page.contains(reference));
    }
    // The script reads only azq's own endpoints.
    let script = asset(b"/_azq/ui/console.js").unwrap().1;
    for (at, _) in script.match_indices("\"/_") {
        assert!(
            script[at + 1..].starts_with("/_azq/"),
            "{}",
            &script[at..at + 20]
        );
    }
}

fn summary() -> QueueSummary {
    QueueSummary {
        key: QueueKey {
            account: "devstoreaccount1".into(),
            name: "orders".into(),
        },
        messages: 3,
        visible: 1,
        leased: 1,
        delayed: 1,
        expired: 0,
        text_bytes: 12,
        metadata_count: 0,
        activity: Activity {
            puts: 3,
            ..Activity::default()
        },
    }
}

#[test]
fn inspection_json_carries_what_the_console_reads() {
    let value: serde_json::Value =
        serde_json::from_str(&queues_json(&[summary()], Some("a/b"), true, 5)).unwrap();
    assert_eq!(value["admin"], true);
    assert_eq!(value["next"], "a/b");
    assert_eq!(value["queues"][0]["name"], "orders");
    assert_eq!(value["queues"][0]["activity"]["puts"], 3);
    let message = |text: &str, expiration_ms| InspectedMessage {
        message_id: MessageId(0x1234),
        insertion_ms: 1_700_000_000_000,
        expiration_ms,
        time_next_visible_ms: 1_700_000_000_000,
        visibility: Visibility::Leased,
        expired: false,
        dequeue_count: 2,
        text: Some(Bytes::from(text.to_string())),
        text_bytes: text.len(),
        on_disk: None,
    };
    let page = MessagePage {
        summary: summary(),
        messages: vec![
            message("aGVsbG8=", EXPIRATION_NEVER_MS),
            message("plain \"text\"", 1_700_000_001_000),
        ],
        next_offset: Some(2),
    };
    let value: serde_json::Value = serde_json::from_str(&page_json(&page, 9)).unwrap();
    let first = &value["messages"][0];
    assert_eq!(first["state"], "leased");
    assert_eq!(first["dequeue_count"], 2);
    assert_eq!(first["text_decoded"], "hello");
    assert!(first["expiration_time"].is_null());
    assert_eq!(first["insertion_time"], "2023-11-14T22:13:20.0000000Z");
    assert_eq!(value["messages"][1]["text"], "plain \"text\"");
    assert!(value["messages"][1].get("text_decoded").is_none());
    assert_eq!(value["next_offset"], 2);
}
