//! azq's console and inspection, the pure parts: the web console's assets (built into the
//! binary, served at `/_azq/ui`), the JSON of `/_azq/inspect` and of the admin answers, and the
//! history behind `/_azq/stats` (`history`). The runtime gathers what the shards hold and calls
//! these; nothing here does I/O.

pub mod history;

use std::fmt::Write;

use base64::Engine as _;

use crate::queue::{
    Activity, InspectedMessage, MessagePage, MessageView, PopReceipt, QueueSummary,
    EXPIRATION_NEVER_MS,
};
use crate::time::iso8601::format_iso8601_7;

/// The console's files: (path under `/_azq/ui`, content type, bytes). No CDN, no framework:
/// three small files.
const ASSETS: [(&str, &str, &str); 3] = [
    (
        "",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "/console.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    ),
    (
        "/console.css",
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    ),
];

/// The path every console file lives under.
pub const UI_PATH: &[u8] = b"/_azq/ui";

/// The console file at `path` (`/_azq/ui`, `/_azq/ui/`, `/_azq/ui/console.js`…): its content
/// type and text.
pub fn asset(path: &[u8]) -> Option<(&'static str, &'static str)> {
    let rest = path.strip_prefix(UI_PATH)?;
    let rest = if rest == b"/" { &b""[..] } else { rest };
    ASSETS
        .iter()
        .find(|(name, _, _)| name.as_bytes() == rest)
        .map(|&(_, content_type, text)| (content_type, text))
}

/// The console's Content-Security-Policy: its own files and `/_azq/*` only.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
     connect-src 'self'; frame-ancestors 'none'";

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_string())
}

/// An ISO 8601 time (`null` for a message that never expires).
fn json_time(unix_ms: u64) -> String {
    if unix_ms >= EXPIRATION_NEVER_MS {
        return "null".to_string();
    }
    format!(
        "\"{}\"",
        String::from_utf8_lossy(&format_iso8601_7(unix_ms))
    )
}

/// One queue's counts as an object.
fn summary_json(out: &mut String, queue: &QueueSummary) {
    let _ = write!(
        out,
        "{{\"account\":{},\"name\":{},\"messages\":{},\"visible\":{},\"leased\":{},\
         \"delayed\":{},\"expired\":{},\"text_bytes\":{},\"metadata\":{},\"activity\":{{",
        json_string(&queue.key.account),
        json_string(&queue.key.name),
        queue.messages,
        queue.visible,
        queue.leased,
        queue.delayed,
        queue.expired,
        queue.text_bytes,
        queue.metadata_count,
    );
    let counts = queue.activity.counts();
    for (index, (name, count)) in Activity::NAMES.iter().zip(counts).enumerate() {
        let comma = if index > 0 { "," } else { "" };
        let _ = write!(out, "{comma}\"{name}\":{count}");
    }
    out.push_str("}}");
}

/// `GET /_azq/inspect`: the queues (merged from every shard, in order), the key to ask for
/// after them when more follow, whether admin actions are on, and the time.
pub fn queues_json(
    queues: &[QueueSummary],
    next: Option<&str>,
    admin: bool,
    now_ms: u64,
) -> String {
    let mut out = format!("{{\"time_ms\":{now_ms},\"admin\":{admin},\"queues\":[");
    for (index, queue) in queues.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        summary_json(&mut out, queue);
    }
    let _ = write!(
        out,
        "],\"next\":{}}}",
        next.map_or("null".to_string(), json_string)
    );
    out
}

/// The text decoded, when it is base64 of UTF-8 (as Azure Functions and some SDKs store it).
fn decoded_text(text: &[u8]) -> Option<String> {
    if text.len() < 4 || text.len() % 4 != 0 {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    String::from_utf8(decoded).ok()
}

/// One message as an object; `receipt` only in a receive's answer (the admin received it).
fn message_json(out: &mut String, message: &InspectedMessage) {
    let text = message.text.as_deref().unwrap_or_default();
    let shown = String::from_utf8_lossy(text);
    let _ = write!(
        out,
        "{{\"id\":\"{}\",\"state\":\"{}\",\"expired\":{},\"dequeue_count\":{},\
         \"insertion_time\":{},\"expiration_time\":{},\"time_next_visible\":{},\"bytes\":{},\
         \"text\":{}",
        message.message_id,
        message.visibility.name(),
        message.expired,
        message.dequeue_count,
        json_time(message.insertion_ms),
        json_time(message.expiration_ms),
        json_time(message.time_next_visible_ms),
        message.text_bytes,
        json_string(&shown),
    );
    if message.text.is_none() {
        // On disk only (`--text-memory`), and its read for this page failed
        // (`control::read_texts_shown`).
        out.push_str(",\"text_on_disk\":true");
    }
    if let Some(decoded) = decoded_text(text) {
        let _ = write!(out, ",\"text_decoded\":{}", json_string(&decoded));
    }
    out.push('}');
}

/// `GET /_azq/inspect/{account}/{queue}`: the queue's counts and a page of its messages.
pub fn page_json(page: &MessagePage, now_ms: u64) -> String {
    let mut out = format!("{{\"time_ms\":{now_ms},\"queue\":");
    summary_json(&mut out, &page.summary);
    out.push_str(",\"messages\":[");
    for (index, message) in page.messages.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        message_json(&mut out, message);
    }
    let _ = write!(
        out,
        "],\"next_offset\":{}}}",
        page.next_offset
            .map_or("null".to_string(), |offset| offset.to_string())
    );
    out
}

/// The console's Receive: what Get Messages gave, receipts included (the admin holds the
/// lease, as any client would).
pub fn received_json(views: &[MessageView]) -> String {
    let mut out = String::from("{\"messages\":[");
    for (index, view) in views.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"id\":\"{}\",\"dequeue_count\":{},\"time_next_visible\":{},\"text\":{}",
            view.message_id,
            view.dequeue_count,
            json_time(view.time_next_visible_ms),
            json_string(&String::from_utf8_lossy(&view.text)),
        );
        if let Some(receipt) = view.pop_receipt {
            let mut encoded = Vec::with_capacity(PopReceipt::ENCODED_BYTES);
            receipt.encode_into(&mut encoded);
            let _ = write!(
                out,
                ",\"pop_receipt\":{}",
                json_string(&String::from_utf8_lossy(&encoded))
            );
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests;
