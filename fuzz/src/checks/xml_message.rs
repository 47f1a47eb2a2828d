//! `xml_message`: arbitrary bytes as a Put/Update Message body through `api::xml::message_text`.
//! Properties: no panic; only `InvalidXmlDocument` or `RequestBodyTooLarge` as errors; an
//! accepted text is valid UTF-8 of at most `MESSAGE_TEXT_BYTES_MAX` bytes made of XML 1.0
//! characters only (no control character but tab, LF and CR, no U+FFFE or U+FFFF); and a text
//! escaped by `api::xml::escape_into` (as responses write it) into a Put body reads back
//! unchanged — for every accepted text, and for the input itself whenever it would be a valid
//! text.
//!
//! The ACL and service-properties readers have their own target, `settings_xml`.

use azq::api::xml::{escape_into, message_text};
use azq::error::StorageError;
use azq::limits::MESSAGE_TEXT_BYTES_MAX;
use bytes::BytesMut;

/// The `xml_message` property on one input (see the module doc); panics when it breaks.
pub fn check(data: &[u8]) {
    match message_text(data) {
        Ok(text) => {
            assert!(
                text.len() <= MESSAGE_TEXT_BYTES_MAX,
                "{} bytes accepted",
                text.len()
            );
            assert!(is_valid_text(&text), "accepted an invalid text: {text:?}");
            assert_round_trips(&text);
        }
        Err(error) => assert!(
            matches!(
                error,
                StorageError::InvalidXmlDocument | StorageError::RequestBodyTooLarge
            ),
            "unexpected error {error:?}"
        ),
    }
    if data.len() <= MESSAGE_TEXT_BYTES_MAX && is_valid_text(data) {
        assert_round_trips(data);
    }
}

/// What `message_text` may return: UTF-8 made of characters XML 1.0 allows.
fn is_valid_text(text: &[u8]) -> bool {
    std::str::from_utf8(text).is_ok_and(|text| {
        text.chars().all(|c| {
            matches!(c, '\t' | '\n' | '\r')
                || (c >= '\u{20}' && !matches!(c, '\u{FFFE}' | '\u{FFFF}'))
        })
    })
}

/// Escapes `text` into a Put body and reads it back.
fn assert_round_trips(text: &[u8]) {
    let mut body = BytesMut::with_capacity(text.len() + 64);
    body.extend_from_slice(b"<QueueMessage><MessageText>");
    escape_into(&mut body, text);
    body.extend_from_slice(b"</MessageText></QueueMessage>");
    match message_text(&body) {
        Ok(read) => assert_eq!(
            read.as_ref(),
            text,
            "escaped text read back differently; body {:?}",
            String::from_utf8_lossy(&body)
        ),
        Err(error) => panic!(
            "escaped text refused with {error:?}; text {:?}",
            String::from_utf8_lossy(text)
        ),
    }
}
