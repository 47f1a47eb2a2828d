//! Requests for the checks beyond `Request::build` (which assembles one by hand, free of the
//! parser's restrictions, so the auth check also sees header bytes a parser would refuse: CR,
//! NUL, invalid UTF-8): `parse` writes one out and reads it back through `http::Parser`, for
//! checks of layers that rely on what the parser guarantees (the response writer echoes header
//! values, which the parser keeps free of CR and LF), and percent-encoding.

use azq::http::request::Request;
use azq::http::{Parser, Progress};
use azq::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX};
use bytes::BytesMut;

/// The request the server's parser reads from the given parts (a `Content-Length` header is
/// added for a non-empty body), or `None` when the parser refuses them, or when the wire bytes
/// would not be one request of exactly these parts: a CR or LF inside a part ends a line early
/// (a header value `a\r\n` ends the head before the headers that follow it).
pub fn parse(
    method: &[u8],
    target: &[u8],
    headers: &[(&[u8], &[u8])],
    body: &[u8],
) -> Option<Request> {
    let has_line_break = |part: &[u8]| part.iter().any(|&byte| byte == b'\r' || byte == b'\n');
    if has_line_break(method)
        || has_line_break(target)
        || headers
            .iter()
            .any(|(name, value)| has_line_break(name) || has_line_break(value))
    {
        return None;
    }
    let mut wire = BytesMut::with_capacity(128 + body.len());
    wire.extend_from_slice(method);
    wire.extend_from_slice(b" ");
    wire.extend_from_slice(target);
    wire.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        wire.extend_from_slice(name);
        wire.extend_from_slice(b": ");
        wire.extend_from_slice(value);
        wire.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() {
        wire.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(body);
    let mut parser = Parser::new(
        REQUEST_HEAD_BYTES_MAX,
        REQUEST_HEADERS_MAX,
        REQUEST_BODY_BYTES_MAX,
    );
    match parser.parse(&mut wire) {
        Ok(Progress::Complete(request)) if wire.is_empty() => Some(request),
        Ok(_) | Err(_) => None,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved bytes, so that a query value decodes
/// back to exactly `value` whatever it holds (`&`, `=`, `+`, `%`).
pub fn percent_encode(value: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in value {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
}
