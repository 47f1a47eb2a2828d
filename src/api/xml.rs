//! XML in and out. Responses are encoded straight into the connection's output buffer (text
//! escaped in place, dates formatted into stack arrays, receipts base64-encoded in place); request
//! bodies are read with quick-xml's streaming reader, never a DOM.

use bytes::{BufMut, Bytes, BytesMut};
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::error::StorageError;
use crate::http::response::{put_decimal, Assembled};
use crate::limits::MESSAGE_TEXT_BYTES_MAX;
use crate::queue::{MessageView, PopReceipt, QueueListing};

use super::ids;
use crate::time::{format_iso8601_7, rfc1123_memoized, RFC1123_BYTES};

/// The XML declaration every response body starts with.
pub const DECLARATION: &[u8] = br#"<?xml version="1.0" encoding="utf-8"?>"#;

/// Appends `text` escaped for element content or attribute values. Besides the five predefined
/// entities, CR is written as `&#xD;`: XML parsers turn a raw CR (LF) into LF, and message text
/// must come back exactly as it was sent.
pub fn escape_into(out: &mut BytesMut, text: &[u8]) {
    if !needs_escaping(text) {
        out.put_slice(text);
        return;
    }
    let mut plain_from = 0;
    for (at, &byte) in text.iter().enumerate() {
        let entity: &[u8] = match byte {
            b'&' => b"&amp;",
            b'<' => b"&lt;",
            b'>' => b"&gt;",
            b'"' => b"&quot;",
            b'\'' => b"&apos;",
            b'\r' => b"&#xD;",
            _ => continue,
        };
        out.put_slice(&text[plain_from..at]);
        out.put_slice(entity);
        plain_from = at + 1;
    }
    out.put_slice(&text[plain_from..]);
}

/// Escapes element text that may hold characters XML 1.0 cannot (a string-to-sign quoting a
/// percent-decoded `%00`): each of those is written as U+FFFD, so the document stays
/// well-formed. Quotes are left as they are, as the service leaves them in its error details
/// (they need no escaping in element text). Error details only, so it may go character by
/// character.
pub fn escape_text_into(out: &mut BytesMut, text: &str) {
    let mut encoded = [0u8; 4];
    for character in text.chars() {
        let replacement: &[u8] = match character {
            '&' => b"&amp;",
            '<' => b"&lt;",
            '>' => b"&gt;",
            '\r' => b"&#xD;",
            '\t' | '\n' => character.encode_utf8(&mut encoded).as_bytes(),
            character if character < ' ' || matches!(character, '\u{FFFE}' | '\u{FFFF}') => {
                '\u{FFFD}'.encode_utf8(&mut encoded).as_bytes()
            }
            character => character.encode_utf8(&mut encoded).as_bytes(),
        };
        out.put_slice(replacement);
    }
}

/// Whether `text` holds a byte `escape_into` replaces. Most message text holds none, and is then
/// copied in one piece. Written as a branch-free byte loop with a `u8` accumulator, which LLVM
/// turns into vector compares (a `bool` fold with `matches!` was measurably slower).
fn needs_escaping(text: &[u8]) -> bool {
    let mut found = 0u8;
    for &byte in text {
        found |= u8::from(byte == b'&')
            | u8::from(byte == b'<')
            | u8::from(byte == b'>')
            | u8::from(byte == b'"')
            | u8::from(byte == b'\'')
            | u8::from(byte == b'\r');
    }
    found != 0
}

/// Appends `<name>text</name>` with `text` escaped.
pub(super) fn element(out: &mut BytesMut, name: &[u8], text: &[u8]) {
    out.put_u8(b'<');
    out.put_slice(name);
    out.put_u8(b'>');
    escape_into(out, text);
    out.put_slice(b"</");
    out.put_slice(name);
    out.put_u8(b'>');
}

/// Reads the `MessageText` of a Put or Update body
/// (`<QueueMessage><MessageText>…</MessageText></QueueMessage>`), unescaped. The unescape writes
/// the one copy that is stored: an exactly sized buffer, so a stored message never pins the
/// connection's read buffer. `MessageText` holds text only: an element inside it is 400
/// `InvalidXmlDocument`, as Azure answers, never text flattened out of the markup.
pub fn message_text(body: &[u8]) -> Result<Bytes, StorageError> {
    match plain_message_text(body) {
        Some(PlainText { text, ascii }) => {
            // ASCII from 0x20 up is valid UTF-8 and holds no character XML forbids: the scan
            // that found no markup settled both.
            if !ascii {
                std::str::from_utf8(text).map_err(|_| StorageError::InvalidXmlDocument)?;
            }
            if text.len() > MESSAGE_TEXT_BYTES_MAX {
                return Err(StorageError::RequestBodyTooLarge);
            }
            if !ascii && has_non_xml_char(text) {
                return Err(StorageError::InvalidXmlDocument);
            }
            Ok(Bytes::copy_from_slice(text))
        }
        None => message_text_by_reader(body),
    }
}

/// The text of a plain body, and whether every byte of it is ASCII from 0x20 up: no control
/// character (tab, LF and CR included) and no byte of a multi-byte character.
struct PlainText<'a> {
    text: &'a [u8],
    ascii: bool,
}

/// The text of the body every SDK sends, `<QueueMessage><MessageText>text</MessageText>
/// </QueueMessage>` after an optional declaration, when the text holds no markup and no entity:
/// then it is the bytes between the tags, as the reader would unescape them. `None` for any other
/// body (the reader decides). quick-xml's reader cost about 4,900 instructions and three
/// allocations per Put (its end-name check keeps the open elements' names in two vectors, even
/// when the check is off); this costs one scan of the text, which also tells whether the text is
/// ASCII from 0x20 up (then `message_text` needs neither the UTF-8 check nor the XML character
/// check: about 1,000 instructions per 1 KiB Put). `tests::plain_path_agrees_with_the_reader`
/// holds it to the reader's answers.
fn plain_message_text(body: &[u8]) -> Option<PlainText<'_>> {
    const DECLARATIONS: [&[u8]; 2] = [DECLARATION, b"<?xml version='1.0' encoding='utf-8'?>"];
    const START: &[u8] = b"<QueueMessage><MessageText>";
    const END: &[u8] = b"</MessageText></QueueMessage>";
    let after_declaration = DECLARATIONS
        .iter()
        .find_map(|declaration| body.strip_prefix(*declaration))
        .unwrap_or(body);
    let text = after_declaration
        .trim_ascii_start()
        .strip_prefix(START)?
        .trim_ascii_end()
        .strip_suffix(END)?;
    // A branch-free fold with `u8` accumulators, which LLVM vectorises (`any` went byte by
    // byte: slower than quick-xml's memchr).
    let mut markup = 0u8;
    let mut unusual = 0u8;
    for &byte in text {
        markup |= u8::from(byte == b'<') | u8::from(byte == b'&');
        unusual |= u8::from(byte < 0x20) | u8::from(byte >= 0x80);
    }
    (markup == 0).then_some(PlainText {
        text,
        ascii: unusual == 0,
    })
}

/// `message_text` for any body, with quick-xml's streaming reader.
fn message_text_by_reader(body: &[u8]) -> Result<Bytes, StorageError> {
    let mut reader = Reader::from_reader(body);
    let mut depth = 0usize;
    let mut in_text = false;
    let mut found = false;
    let mut text = BytesMut::new();
    loop {
        match reader.read_event() {
            // An element inside MessageText.
            Ok(Event::Start(_) | Event::Empty(_)) if in_text => {
                return Err(StorageError::InvalidXmlDocument)
            }
            Ok(Event::Start(start)) => {
                depth += 1;
                let name = start.name();
                if depth == 1 && name.as_ref() != b"QueueMessage" {
                    return Err(StorageError::InvalidXmlDocument);
                }
                if depth == 2 && name.as_ref() == b"MessageText" {
                    if found {
                        return Err(StorageError::InvalidXmlDocument);
                    }
                    found = true;
                    in_text = true;
                }
            }
            Ok(Event::Empty(empty)) => {
                if depth == 0 && empty.name().as_ref() != b"QueueMessage" {
                    return Err(StorageError::InvalidXmlDocument);
                }
                if depth == 1 && empty.name().as_ref() == b"MessageText" {
                    if found {
                        return Err(StorageError::InvalidXmlDocument);
                    }
                    found = true;
                }
            }
            Ok(Event::End(_)) => {
                in_text = false;
                depth = depth
                    .checked_sub(1)
                    .ok_or(StorageError::InvalidXmlDocument)?;
            }
            Ok(Event::Text(raw)) if in_text => {
                let unescaped = raw
                    .unescape()
                    .map_err(|_| StorageError::InvalidXmlDocument)?;
                append_text(&mut text, unescaped.as_bytes())?;
            }
            // quick-xml checks UTF-8 when it unescapes text, but hands CDATA over raw.
            Ok(Event::CData(raw)) if in_text => {
                std::str::from_utf8(&raw).map_err(|_| StorageError::InvalidXmlDocument)?;
                append_text(&mut text, &raw)?
            }
            Ok(Event::Text(raw)) => {
                // Only whitespace may stand outside MessageText.
                if !raw.iter().all(u8::is_ascii_whitespace) {
                    return Err(StorageError::InvalidXmlDocument);
                }
            }
            Ok(Event::Eof) => break,
            Ok(Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_)) => {}
            Ok(Event::CData(_)) | Err(_) => return Err(StorageError::InvalidXmlDocument),
        }
    }
    if depth != 0 || !found {
        return Err(StorageError::InvalidXmlDocument);
    }
    if has_non_xml_char(&text) {
        return Err(StorageError::InvalidXmlDocument);
    }
    Ok(text.freeze())
}

/// Whether UTF-8 `text` holds a character XML 1.0 forbids: a control character below 0x20 other
/// than tab, LF and CR, or U+FFFE / U+FFFF (the only other characters outside XML 1.0's `Char` that
/// UTF-8 can carry). A stored text is echoed in responses, and one such character would make every
/// response that carries it unreadable to the client's XML parser. Such characters are rare, so a
/// branch-free pass that the compiler vectorises looks for any byte below 0x20 or any 0xEF (the
/// lead byte of U+F000..U+FFFF) first, and only a hit pays for the exact check.
pub fn has_non_xml_char(text: &[u8]) -> bool {
    let suspect = text
        .iter()
        .fold(false, |found, &byte| found | (byte < 0x20) | (byte == 0xEF));
    suspect
        && text.iter().enumerate().any(|(at, &byte)| match byte {
            b'\t' | b'\n' | b'\r' => false,
            0..=0x1F => true,
            0xEF => matches!(text.get(at + 1..at + 3), Some([0xBF, 0xBE | 0xBF])),
            _ => false,
        })
}

fn append_text(text: &mut BytesMut, piece: &[u8]) -> Result<(), StorageError> {
    if text.len() + piece.len() > MESSAGE_TEXT_BYTES_MAX {
        return Err(StorageError::RequestBodyTooLarge);
    }
    if text.is_empty() {
        text.reserve(piece.len());
    }
    text.put_slice(piece);
    Ok(())
}

/// Which fields of a message a response lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageFields {
    /// Put Message: ids, times and receipt; no text or dequeue count.
    Put,
    /// Get Messages: everything.
    Get,
    /// Peek Messages: no receipt or next-visible time.
    Peek,
}

/// The RFC 1123 text of the last second formatted. The messages of one list mostly share their
/// insertion, expiration and next-visible seconds, so one memo per field skips most formatting.
struct DateMemo {
    unix_s: u64,
    text: [u8; RFC1123_BYTES],
}

impl DateMemo {
    fn new() -> DateMemo {
        DateMemo {
            unix_s: u64::MAX,
            text: [0; RFC1123_BYTES],
        }
    }

    fn format(&mut self, unix_ms: u64) -> &[u8; RFC1123_BYTES] {
        if unix_ms / 1000 != self.unix_s {
            self.unix_s = unix_ms / 1000;
            self.text = rfc1123_memoized(unix_ms);
        }
        &self.text
    }
}

/// The start of a `QueueMessagesList` that lists messages: the declaration and the open tag.
const MESSAGES_LIST_START: &[u8] = br#"<?xml version="1.0" encoding="utf-8"?><QueueMessagesList>"#;
const MESSAGE_ID_START: &[u8] = b"<QueueMessage><MessageId>";
const INSERTION_TIME_START: &[u8] = b"</MessageId><InsertionTime>";
const EXPIRATION_TIME_START: &[u8] = b"</InsertionTime><ExpirationTime>";
const EXPIRATION_TIME_END: &[u8] = b"</ExpirationTime>";
/// A message's elements up to its expiration time, which every listing has: their lengths are
/// fixed, so they are assembled and copied in one piece.
const MESSAGE_START_BYTES: usize = MESSAGE_ID_START.len()
    + uuid::fmt::Hyphenated::LENGTH
    + INSERTION_TIME_START.len()
    + RFC1123_BYTES
    + EXPIRATION_TIME_START.len()
    + RFC1123_BYTES
    + EXPIRATION_TIME_END.len();
const POP_RECEIPT_START: &[u8] = b"<PopReceipt>";
const POP_RECEIPT_END: &[u8] = b"</PopReceipt>";
const POP_RECEIPT_BYTES: usize =
    POP_RECEIPT_START.len() + PopReceipt::ENCODED_BYTES + POP_RECEIPT_END.len();
const TIME_NEXT_VISIBLE_START: &[u8] = b"<TimeNextVisible>";
const TIME_NEXT_VISIBLE_END: &[u8] = b"</TimeNextVisible>";
const TIME_NEXT_VISIBLE_BYTES: usize =
    TIME_NEXT_VISIBLE_START.len() + RFC1123_BYTES + TIME_NEXT_VISIBLE_END.len();

/// Encodes a `QueueMessagesList`. The fixed-length parts of a message are assembled on the stack
/// and copied in a few pieces (`Assembled`): a `put_slice` per element cost about 600
/// instructions per listed message.
pub fn messages(out: &mut BytesMut, messages: &[MessageView], fields: MessageFields) {
    let (mut insertion, mut expiration, mut next_visible) =
        (DateMemo::new(), DateMemo::new(), DateMemo::new());
    if messages.is_empty() {
        out.put_slice(DECLARATION);
        out.put_slice(b"<QueueMessagesList />");
        return;
    }
    out.put_slice(MESSAGES_LIST_START);
    for message in messages {
        let mut start = Assembled::<MESSAGE_START_BYTES>::new();
        start
            .push(MESSAGE_ID_START)
            .push(&ids::hyphenated(uuid::Uuid::from_u128(
                message.message_id.0,
            )))
            .push(INSERTION_TIME_START)
            .push(insertion.format(message.insertion_ms))
            .push(EXPIRATION_TIME_START)
            .push(expiration.format(message.expiration_ms))
            .push(EXPIRATION_TIME_END);
        out.put_slice(start.bytes());
        if fields != MessageFields::Peek {
            if let Some(receipt) = message.pop_receipt {
                let mut element = Assembled::<POP_RECEIPT_BYTES>::new();
                element
                    .push(POP_RECEIPT_START)
                    .push(&receipt.encoded())
                    .push(POP_RECEIPT_END);
                out.put_slice(element.bytes());
            }
            let mut element = Assembled::<TIME_NEXT_VISIBLE_BYTES>::new();
            element
                .push(TIME_NEXT_VISIBLE_START)
                .push(next_visible.format(message.time_next_visible_ms))
                .push(TIME_NEXT_VISIBLE_END);
            out.put_slice(element.bytes());
        }
        if fields != MessageFields::Put {
            out.put_slice(b"<DequeueCount>");
            put_decimal(out, u64::from(message.dequeue_count));
            out.put_slice(b"</DequeueCount>");
            element(out, b"MessageText", &message.text);
        }
        out.put_slice(b"</QueueMessage>");
    }
    out.put_slice(b"</QueueMessagesList>");
}

/// The echoed request parameters and results of List Queues.
pub struct QueueList<'a> {
    /// The `ServiceEndpoint` attribute: the URL the client addressed, up to the account.
    pub service_endpoint: &'a str,
    /// `<Prefix>`, written only when the request had one.
    pub prefix: Option<&'a str>,
    /// `<Marker>`, written only when the request had one.
    pub marker: Option<&'a str>,
    /// `<MaxResults>` as sent (not capped), written only when the request had one.
    pub results_max: Option<&'a str>,
    /// This page's queues, sorted by name.
    pub queues: &'a [QueueListing],
    /// The first name of the next page; `<NextMarker />` when this is the last page.
    pub next_marker: Option<&'a str>,
}

/// Encodes List Queues' `EnumerationResults`.
pub fn queue_list(out: &mut BytesMut, list: &QueueList<'_>) {
    out.put_slice(DECLARATION);
    out.put_slice(b"<EnumerationResults ServiceEndpoint=\"");
    escape_into(out, list.service_endpoint.as_bytes());
    out.put_slice(b"\">");
    if let Some(prefix) = list.prefix {
        element(out, b"Prefix", prefix.as_bytes());
    }
    if let Some(marker) = list.marker {
        element(out, b"Marker", marker.as_bytes());
    }
    if let Some(results_max) = list.results_max {
        element(out, b"MaxResults", results_max.as_bytes());
    }
    if list.queues.is_empty() {
        out.put_slice(b"<Queues />");
    } else {
        out.put_slice(b"<Queues>");
        for queue in list.queues {
            out.put_slice(b"<Queue>");
            element(out, b"Name", queue.name.as_bytes());
            if let Some(metadata) = &queue.metadata {
                out.put_slice(b"<Metadata>");
                for (key, value) in metadata {
                    element(out, key.as_bytes(), value.as_bytes());
                }
                out.put_slice(b"</Metadata>");
            }
            out.put_slice(b"</Queue>");
        }
        out.put_slice(b"</Queues>");
    }
    match list.next_marker {
        Some(next) => element(out, b"NextMarker", next.as_bytes()),
        None => out.put_slice(b"<NextMarker />"),
    }
    out.put_slice(b"</EnumerationResults>");
}

/// Encodes Azure's error body:
/// `<Error><Code/><Message>text\nRequestId:…\nTime:…</Message></Error>`. `RequestBodyTooLarge`
/// also names the limit, `<MaxLimit>65536</MaxLimit>`, as the service's recorded answers do.
pub fn error(
    out: &mut BytesMut,
    error: StorageError,
    request_id: &[u8],
    now_ms: u64,
    authentication_error_detail: Option<&str>,
) {
    out.put_slice(DECLARATION);
    out.put_slice(b"<Error><Code>");
    out.put_slice(error.code().as_bytes());
    out.put_slice(b"</Code><Message>");
    escape_into(out, error.message().as_bytes());
    out.put_slice(b"\nRequestId:");
    out.put_slice(request_id);
    out.put_slice(b"\nTime:");
    out.put_slice(&format_iso8601_7(now_ms));
    out.put_slice(b"</Message>");
    if let Some(detail) = authentication_error_detail {
        out.put_slice(b"<AuthenticationErrorDetail>");
        escape_text_into(out, detail);
        out.put_slice(b"</AuthenticationErrorDetail>");
    }
    if error == StorageError::RequestBodyTooLarge {
        out.put_slice(b"<MaxLimit>");
        put_decimal(out, MESSAGE_TEXT_BYTES_MAX as u64);
        out.put_slice(b"</MaxLimit>");
    }
    out.put_slice(b"</Error>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(body: &str) -> Result<Vec<u8>, StorageError> {
        message_text(body.as_bytes()).map(|text| text.to_vec())
    }

    #[test]
    fn message_text_table() {
        let ok = |text: &str| Ok(text.as_bytes().to_vec());
        let cases: &[(&str, Result<Vec<u8>, StorageError>)] = &[
            ("<QueueMessage><MessageText>hello</MessageText></QueueMessage>", ok("hello")),
            (
                "<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage>\n  <MessageText> a b </MessageText>\n</QueueMessage>",
                ok(" a b "),
            ),
            ("<QueueMessage><MessageText>&lt;&amp;&gt;&quot;&apos;&#233;&#x1F600;</MessageText></QueueMessage>", ok("<&>\"'é😀")),
            ("<QueueMessage><MessageText><![CDATA[<raw>]]></MessageText></QueueMessage>", ok("<raw>")),
            ("<QueueMessage><MessageText></MessageText></QueueMessage>", ok("")),
            ("<QueueMessage><MessageText/></QueueMessage>", ok("")),
            ("<QueueMessage><MessageText>a&#xD;&#xA;b</MessageText></QueueMessage>", ok("a\r\nb")),
            ("<QueueMessage></QueueMessage>", Err(StorageError::InvalidXmlDocument)),
            ("<QueueMessage/>", Err(StorageError::InvalidXmlDocument)),
            ("", Err(StorageError::InvalidXmlDocument)),
            ("not xml", Err(StorageError::InvalidXmlDocument)),
            ("<Other><MessageText>x</MessageText></Other>", Err(StorageError::InvalidXmlDocument)),
            ("<QueueMessage><MessageText>x</MessageText>", Err(StorageError::InvalidXmlDocument)),
            ("<QueueMessage><MessageText>&bogus;</MessageText></QueueMessage>", Err(StorageError::InvalidXmlDocument)),
            ("<QueueMessage><MessageText>&#1;</MessageText></QueueMessage>", Err(StorageError::InvalidXmlDocument)),
            (
                "<QueueMessage><MessageText>a</MessageText><MessageText>b</MessageText></QueueMessage>",
                Err(StorageError::InvalidXmlDocument),
            ),
            // End tags must close the element they end, however deep.
            (
                "<QueueMessage><MessageText>x</Other></QueueMessage>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (
                "<QueueMessage><MessageText>x</MessageText></Other>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (
                "<QueueMessage><A><B><C><D><E></E></D></C></B></A><MessageText>x</MessageText></QueueMessage >",
                ok("x"),
            ),
            (
                "<QueueMessage><A><B><C><D><E></D></E></C></B></A><MessageText>x</MessageText></QueueMessage>",
                Err(StorageError::InvalidXmlDocument),
            ),
            ("</QueueMessage>", Err(StorageError::InvalidXmlDocument)),
            // Markup inside MessageText is refused, not flattened into its text.
            (
                "<QueueMessage><MessageText><b>nested</b></MessageText></QueueMessage>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (
                "<QueueMessage><MessageText>a<br/>b</MessageText></QueueMessage>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (
                "<QueueMessage><MessageText>a<MessageText>b</MessageText></MessageText></QueueMessage>",
                Err(StorageError::InvalidXmlDocument),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(&text_of(body), expected, "{body}");
        }
    }

    #[test]
    fn control_characters_and_encoding() {
        let body = |inner: &[u8]| {
            let mut body = b"<QueueMessage><MessageText>".to_vec();
            body.extend_from_slice(inner);
            body.extend_from_slice(b"</MessageText></QueueMessage>");
            body
        };
        let ok = |inner: &[u8]| Ok(Bytes::copy_from_slice(inner));
        let cases: &[(&[u8], Result<Bytes, StorageError>)] = &[
            (b"tab\tline\ncr\r", ok(b"tab\tline\ncr\r")),
            (b"raw \x01 control", Err(StorageError::InvalidXmlDocument)),
            (b"\x1f", Err(StorageError::InvalidXmlDocument)),
            (b"bad utf-8 \xff", Err(StorageError::InvalidXmlDocument)),
            (
                b"<![CDATA[bad utf-8 \xc3]]>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (b"<![CDATA[\x02]]>", Err(StorageError::InvalidXmlDocument)),
            (b"<![CDATA[caf\xc3\xa9]]>", ok("café".as_bytes())),
            ("\u{FFFE}".as_bytes(), Err(StorageError::InvalidXmlDocument)),
            (b"&#xFFFF;", Err(StorageError::InvalidXmlDocument)),
            (
                b"<![CDATA[\xef\xbf\xbf]]>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (b"&#0;", Err(StorageError::InvalidXmlDocument)),
            (
                "\u{FFFD}\u{FEFF}\u{FF21}\u{F000}".as_bytes(),
                ok("\u{FFFD}\u{FEFF}\u{FF21}\u{F000}".as_bytes()),
            ),
        ];
        for (inner, expected) in cases {
            assert_eq!(&message_text(&body(inner)), expected, "{inner:?}");
        }
    }

    #[test]
    fn message_text_size_boundary() {
        let body = |bytes: usize| {
            format!(
                "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
                "x".repeat(bytes)
            )
        };
        assert_eq!(
            text_of(&body(MESSAGE_TEXT_BYTES_MAX)).map(|text| text.len()),
            Ok(MESSAGE_TEXT_BYTES_MAX)
        );
        assert_eq!(
            text_of(&body(MESSAGE_TEXT_BYTES_MAX + 1)),
            Err(StorageError::RequestBodyTooLarge)
        );
        // The limit counts decoded bytes: 65536 escaped ampersands are fine.
        let escaped = format!(
            "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
            "&amp;".repeat(MESSAGE_TEXT_BYTES_MAX)
        );
        assert_eq!(
            text_of(&escaped).map(|text| text.len()),
            Ok(MESSAGE_TEXT_BYTES_MAX)
        );
    }

    /// The plain path answers exactly as the reader does, on bodies made of the pieces that
    /// decide between them (declarations, whitespace, tags, markup and entities in the text,
    /// bytes that are not UTF-8 or not XML characters). Fixed seed.
    #[test]
    fn plain_path_agrees_with_the_reader() {
        const PIECES: &[&[u8]] = &[
            DECLARATION,
            b"<?xml version='1.0' encoding='utf-8'?>",
            b"<?xml version=\"1.0\"?>",
            b" ",
            b"\r\n",
            b"<QueueMessage>",
            b"<MessageText>",
            b"</MessageText>",
            b"</QueueMessage>",
            b"<MessageText/>",
            b"<Other/>",
            b"text",
            b"a > b",
            b"]]>",
            b"&amp;",
            b"&",
            b"<",
            b"\r",
            b"\t",
            b"\x01",
            b"\xff",
            "\u{e9}".as_bytes(),
            "\u{FFFE}".as_bytes(),
        ];
        let plain = |text: &[u8]| {
            let mut body = b"<QueueMessage><MessageText>".to_vec();
            body.extend_from_slice(text);
            body.extend_from_slice(b"</MessageText></QueueMessage>");
            body
        };
        let mut random = fastrand::Rng::with_seed(27);
        let mut plain_taken = 0;
        for round in 0..20_000 {
            let mut body = Vec::new();
            // Half the bodies are the SDKs' shape around random text, half random pieces.
            if round % 2 == 0 {
                let mut text = Vec::new();
                for _ in 0..random.usize(0..4) {
                    text.extend_from_slice(PIECES[random.usize(9..PIECES.len())]);
                }
                if random.bool() {
                    body.extend_from_slice(PIECES[random.usize(0..3)]);
                }
                body.extend_from_slice(&plain(&text));
                if random.bool() {
                    body.extend_from_slice(PIECES[random.usize(3..5)]);
                }
            } else {
                for _ in 0..random.usize(0..8) {
                    body.extend_from_slice(PIECES[random.usize(0..PIECES.len())]);
                }
            }
            plain_taken += usize::from(plain_message_text(&body).is_some());
            assert_eq!(
                message_text(&body),
                message_text_by_reader(&body),
                "{:?}",
                String::from_utf8_lossy(&body)
            );
        }
        assert!(
            plain_taken > 2_000,
            "the plain path ran {plain_taken} times"
        );
        // Past the limit, from either path.
        let long = plain(&vec![b'x'; MESSAGE_TEXT_BYTES_MAX + 1]);
        assert!(plain_message_text(&long).is_some());
        assert_eq!(message_text(&long), message_text_by_reader(&long));
    }

    /// The plain path skips the UTF-8 and XML character checks only for ASCII from 0x20 up: a
    /// byte that needs either check, wherever it stands in a text long enough to be scanned in
    /// vector-sized pieces, still gets the reader's answer.
    #[test]
    fn a_byte_outside_ascii_from_0x20_up_is_checked_wherever_it_stands() {
        let unusual: &[&[u8]] = &[
            b"\x01",
            b"\x1f",
            b"\t",
            b"\n",
            b"\r",
            b"\xff",
            b"\xc3",
            b"\xc3\xa9",
            b"\xef\xbf\xbe",
            b"\xef\xbf\xbf",
            b"\xef\xbf\xbd",
            b"\x80",
        ];
        for bytes in unusual {
            for at in [0, 15, 16, 31, 32, 63, 99] {
                let mut text = vec![b'm'; 100];
                text.splice(at..at + 1, bytes.iter().copied());
                let mut body = b"<QueueMessage><MessageText>".to_vec();
                body.extend_from_slice(&text);
                body.extend_from_slice(b"</MessageText></QueueMessage>");
                let plain = plain_message_text(&body).expect("no markup");
                assert!(!plain.ascii, "{bytes:?} at {at}");
                assert_eq!(
                    message_text(&body),
                    message_text_by_reader(&body),
                    "{bytes:?} at {at}"
                );
            }
        }
        let printable: Vec<u8> = (0x20..=0x7f).filter(|byte| !b"<&".contains(byte)).collect();
        let mut body = b"<QueueMessage><MessageText>".to_vec();
        body.extend_from_slice(&printable);
        body.extend_from_slice(b"</MessageText></QueueMessage>");
        assert!(plain_message_text(&body).expect("no markup").ascii);
        assert_eq!(message_text(&body).as_deref(), Ok(&printable[..]));
    }

    #[test]
    fn the_list_start_is_the_declaration_and_the_open_tag() {
        assert_eq!(
            MESSAGES_LIST_START,
            [DECLARATION, b"<QueueMessagesList>"].concat()
        );
    }

    #[test]
    fn escape_round_trips_through_the_reader() {
        let text = "a<b>&\"c'\r\n\td é".as_bytes();
        let mut body = BytesMut::new();
        body.put_slice(b"<QueueMessage><MessageText>");
        escape_into(&mut body, text);
        body.put_slice(b"</MessageText></QueueMessage>");
        assert_eq!(message_text(&body).unwrap(), text);
    }

    #[test]
    fn each_special_byte_is_escaped_wherever_it_stands() {
        for (byte, entity) in [
            (b'&', "&amp;"),
            (b'<', "&lt;"),
            (b'>', "&gt;"),
            (b'"', "&quot;"),
            (b'\'', "&apos;"),
            (b'\r', "&#xD;"),
        ] {
            // At the start, in the middle and at the end of a text long enough to be scanned in
            // vector-sized pieces.
            for at in [0, 31, 32, 63, 99] {
                let mut text = vec![b'm'; 100];
                text[at] = byte;
                let mut out = BytesMut::new();
                escape_into(&mut out, &text);
                let expected = format!("{}{entity}{}", "m".repeat(at), "m".repeat(99 - at));
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    expected,
                    "{byte} at {at}"
                );
            }
        }
    }

    #[test]
    fn message_dates_follow_each_message() {
        use crate::queue::{MessageId, PopReceipt};
        let view = |insertion_ms: u64, next_visible_ms: u64| MessageView {
            message_id: MessageId(1),
            insertion_ms,
            expiration_ms: insertion_ms + 1000,
            pop_receipt: Some(PopReceipt {
                slot: 1,
                generation: 2,
                lease: 3,
                tag: 0x0807_0605_0403_0201,
            }),
            time_next_visible_ms: next_visible_ms,
            dequeue_count: 1,
            text: Bytes::from_static(b"t"),
        };
        // Same second, a later second, and back to the first: the memo must never go stale.
        let list = [
            view(1_795_305_600_000, 1_795_305_630_000),
            view(1_795_305_600_900, 1_795_305_630_000),
            view(1_795_305_601_000, 1_795_305_631_000),
            view(1_795_305_600_000, 1_795_305_630_000),
        ];
        let mut out = BytesMut::new();
        messages(&mut out, &list, MessageFields::Get);
        let text = std::str::from_utf8(&out).unwrap();
        let insertions: Vec<&str> = text
            .split("<InsertionTime>")
            .skip(1)
            .map(|rest| rest.split('<').next().unwrap())
            .collect();
        assert_eq!(
            insertions,
            [
                "Sun, 22 Nov 2026 00:00:00 GMT",
                "Sun, 22 Nov 2026 00:00:00 GMT",
                "Sun, 22 Nov 2026 00:00:01 GMT",
                "Sun, 22 Nov 2026 00:00:00 GMT"
            ]
        );
        let expirations: Vec<&str> = text
            .split("<ExpirationTime>")
            .skip(1)
            .map(|rest| rest.split('<').next().unwrap())
            .collect();
        assert_eq!(expirations[1], "Sun, 22 Nov 2026 00:00:01 GMT");
        assert_eq!(expirations[3], "Sun, 22 Nov 2026 00:00:01 GMT");
        assert!(text.contains("<TimeNextVisible>Sun, 22 Nov 2026 00:00:31 GMT</TimeNextVisible>"));
    }

    #[test]
    fn error_body_layout() {
        let mut out = BytesMut::new();
        error(
            &mut out,
            StorageError::QueueNotFound,
            b"req-1",
            1_795_305_600_123,
            None,
        );
        let text = std::str::from_utf8(&out).unwrap();
        assert_eq!(
            text,
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>QueueNotFound</Code><Message>The specified queue does not exist.\nRequestId:req-1\nTime:2026-11-22T00:00:00.1230000Z</Message></Error>"
        );
        let mut out = BytesMut::new();
        error(
            &mut out,
            StorageError::RequestBodyTooLarge,
            b"req-2",
            1_795_305_600_000,
            None,
        );
        assert!(
            out.ends_with(
                b"\nTime:2026-11-22T00:00:00.0000000Z</Message><MaxLimit>65536</MaxLimit></Error>"
            ),
            "{}",
            String::from_utf8_lossy(&out)
        );
        // Azure's AuthenticationErrorDetail follows the message; what XML 1.0 cannot hold is
        // replaced, the rest escaped.
        let mut out = BytesMut::new();
        error(
            &mut out,
            StorageError::AuthenticationFailed,
            b"req-3",
            1_795_305_600_000,
            Some("Signature did not match. String to sign used was r\n\n<x>&\u{0}\r"),
        );
        assert!(
            out.ends_with(
                "</Message><AuthenticationErrorDetail>Signature did not match. String to sign \
                 used was r\n\n&lt;x&gt;&amp;\u{FFFD}&#xD;</AuthenticationErrorDetail></Error>"
                    .as_bytes()
            ),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }

    #[test]
    fn empty_lists() {
        let mut out = BytesMut::new();
        messages(&mut out, &[], MessageFields::Get);
        assert_eq!(&out[DECLARATION.len()..], b"<QueueMessagesList />");
        let mut out = BytesMut::new();
        queue_list(
            &mut out,
            &QueueList {
                service_endpoint: "http://h/a/",
                prefix: Some("p"),
                marker: None,
                results_max: None,
                queues: &[],
                next_marker: None,
            },
        );
        assert_eq!(
            &out[DECLARATION.len()..],
            &b"<EnumerationResults ServiceEndpoint=\"http://h/a/\"><Prefix>p</Prefix><Queues /><NextMarker /></EnumerationResults>"[..]
        );
    }
}
