//! `ResponseWriter`: encodes one HTTP/1.1 response straight into a connection's output buffer.
//!
//! The body is encoded in place after the head, so its length is not known when the head is
//! written. The writer leaves a fixed-width `Content-Length` field and patches it when the body is
//! done; the digits are right-aligned and padded with leading spaces, which HTTP allows as optional
//! whitespace after the colon. Many responses are appended to one buffer and written in one batch.

use bytes::{BufMut, BytesMut};

/// Width of the patched Content-Length value: enough for any response azq produces.
const CONTENT_LENGTH_DIGITS: usize = 10;
/// The Content-Length field, blank, and the empty line that closes the head.
const CONTENT_LENGTH_BLANK: &[u8] = b"Content-Length:           \r\n\r\n";

/// The statuses azq answers with, and their standard reason phrases: `reason_phrase`, and the
/// preformatted status lines `ResponseWriter::start` writes in one piece.
macro_rules! statuses {
    ($($status:literal $reason:literal,)*) => {
        /// The standard reason phrase for the statuses azq answers with.
        fn reason_phrase(status: u16) -> &'static str {
            match status {
                $($status => $reason,)*
                _ => "Unknown",
            }
        }

        /// `HTTP/1.1 <status> <reason phrase>\r\n` for a status of the table.
        fn standard_status_line(status: u16) -> Option<&'static [u8]> {
            match status {
                $($status => Some(concat!("HTTP/1.1 ", $status, " ", $reason, "\r\n").as_bytes()),)*
                _ => None,
            }
        }
    };
}

statuses! {
    100 "Continue",
    200 "OK",
    201 "Created",
    202 "Accepted",
    204 "No Content",
    400 "Bad Request",
    403 "Forbidden",
    404 "Not Found",
    405 "Method Not Allowed",
    409 "Conflict",
    413 "Request Entity Too Large",
    431 "Request Header Fields Too Large",
    500 "Internal Server Error",
    501 "Not Implemented",
    503 "Service Unavailable",
}

/// The status code of the response encoded at the start of `encoded` (0 if there is none), for
/// counting answers without threading the status back out of the encoders.
pub fn status_at(encoded: &[u8]) -> u16 {
    match encoded.get(9..12) {
        Some(&[a, b, c]) if encoded.starts_with(b"HTTP/1.1 ") => {
            [a, b, c].iter().fold(0u16, |status, &digit| {
                status * 10 + u16::from(digit.wrapping_sub(b'0') % 10)
            })
        }
        _ => 0,
    }
}

/// Writes the interim `100 Continue` a client that sent `Expect: 100-continue` waits for before
/// it sends the body.
pub fn write_continue(out: &mut BytesMut) {
    out.put_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// Writes one response into `out`: status line, headers, then body, then `finish`.
pub struct ResponseWriter<'out> {
    out: &'out mut BytesMut,
    /// Offset in `out` where the response starts, to undo it on `abandon`.
    response_at: usize,
    /// Offset of the last digit slot of the Content-Length field, once the head is closed.
    content_length_end: usize,
    /// Offset where the body starts, once the head is closed.
    body_at: usize,
    /// HEAD responses carry the headers of the GET response but no body.
    head_only: bool,
}

impl<'out> ResponseWriter<'out> {
    /// Starts a response with `status` and its standard reason phrase; `head_only` drops the
    /// body (answers to HEAD). The status lines of the statuses azq uses are preformatted.
    pub fn start(out: &'out mut BytesMut, status: u16, head_only: bool) -> Self {
        match standard_status_line(status) {
            Some(line) => {
                let response_at = out.len();
                out.put_slice(line);
                ResponseWriter::started(out, response_at, head_only)
            }
            None => {
                ResponseWriter::start_with_reason(out, status, reason_phrase(status), head_only)
            }
        }
    }

    /// Starts a response with `status` and `reason` as the status line's reason phrase, as Azure
    /// writes an error's message there. `reason` is azq's own text: printable ASCII, never a
    /// line break (debug-asserted), so it cannot end the status line early.
    pub fn start_with_reason(
        out: &'out mut BytesMut,
        status: u16,
        reason: &str,
        head_only: bool,
    ) -> Self {
        debug_assert!(
            reason.bytes().all(|byte| (b' '..=b'~').contains(&byte)),
            "a reason phrase is printable ASCII: {reason:?}"
        );
        let response_at = out.len();
        out.put_slice(b"HTTP/1.1 ");
        put_decimal(out, u64::from(status));
        out.put_u8(b' ');
        out.put_slice(reason.as_bytes());
        out.put_slice(b"\r\n");
        ResponseWriter::started(out, response_at, head_only)
    }

    /// The writer of a response whose status line, at `response_at`, is written.
    fn started(out: &'out mut BytesMut, response_at: usize, head_only: bool) -> Self {
        ResponseWriter {
            out,
            response_at,
            content_length_end: 0,
            body_at: 0,
            head_only,
        }
    }

    /// Adds whole header lines as they are, each ending in CRLF: lines azq composes from its own
    /// values (no byte of a request), so they need no check for line breaks. One copy for
    /// several headers.
    pub fn lines(&mut self, lines: &[u8]) {
        debug_assert!(self.body_at == 0, "header after the body started");
        debug_assert!(lines.ends_with(b"\r\n"), "header lines end in CRLF");
        self.out.put_slice(lines);
    }

    /// Adds a header. Values echoed from a request (`x-ms-version`, `x-ms-client-request-id`,
    /// metadata) never hold CR or LF, because the parser admits none; should one ever arrive,
    /// it is written as a space, so no value can end the header early or add one (response
    /// splitting). The check is one pass over a short value.
    pub fn header(&mut self, name: &str, value: &[u8]) {
        debug_assert!(self.body_at == 0, "header after the body started");
        self.out.put_slice(name.as_bytes());
        self.out.put_slice(b": ");
        // A branch-free fold, which LLVM vectorises (`any` went byte by byte).
        let line_breaks = value.iter().fold(0u8, |found, &byte| {
            found | u8::from(byte == b'\r') | u8::from(byte == b'\n')
        });
        if line_breaks != 0 {
            for &byte in value {
                self.out.put_u8(if byte == b'\r' || byte == b'\n' {
                    b' '
                } else {
                    byte
                });
            }
        } else {
            self.out.put_slice(value);
        }
        self.out.put_slice(b"\r\n");
    }

    /// Adds a header with a decimal value.
    pub fn header_decimal(&mut self, name: &str, value: u64) {
        self.out.put_slice(name.as_bytes());
        self.out.put_slice(b": ");
        put_decimal(self.out, value);
        self.out.put_slice(b"\r\n");
    }

    /// The names of the headers written so far, in order. Call before the head is closed.
    pub fn header_names(&self) -> impl Iterator<Item = &[u8]> {
        debug_assert!(self.body_at == 0, "header names after the body started");
        let head = &self.out[self.response_at..];
        // Skip the status line; every line after it is `name: value`.
        let headers_at = head
            .windows(2)
            .position(|pair| pair == b"\r\n")
            .map_or(head.len(), |at| at + 2);
        head[headers_at..]
            .split(|&byte| byte == b'\n')
            .filter_map(|line| {
                line.iter()
                    .position(|&byte| byte == b':')
                    .map(|colon| &line[..colon])
            })
    }

    /// Closes the head and returns the buffer to encode the body into. Call once.
    pub fn body(&mut self) -> &mut BytesMut {
        if self.body_at == 0 {
            self.out.put_slice(CONTENT_LENGTH_BLANK);
            self.content_length_end = self.out.len() - 4;
            self.body_at = self.out.len();
        }
        self.out
    }

    /// Patches the Content-Length and completes the response.
    pub fn finish(mut self) {
        self.body();
        let body_bytes = self.out.len() - self.body_at;
        let mut digits = [b' '; CONTENT_LENGTH_DIGITS];
        let mut remaining = body_bytes;
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (remaining % 10) as u8;
            remaining /= 10;
            if remaining == 0 {
                break;
            }
        }
        assert!(
            remaining == 0,
            "response body larger than the Content-Length field"
        );
        let field_start = self.content_length_end - CONTENT_LENGTH_DIGITS;
        self.out[field_start..self.content_length_end].copy_from_slice(&digits);
        if self.head_only {
            self.out.truncate(self.body_at);
        }
    }

    /// Removes everything this writer wrote, so another response can be written instead.
    pub fn abandon(self) {
        self.out.truncate(self.response_at);
    }
}

/// `N` bytes assembled on the stack from pieces whose lengths are known at compile time, to be
/// copied into a response in one piece: the pieces' copies are then plain moves, where each
/// `put_slice` of a piece would be a call (its capacity check and `memcpy`).
pub struct Assembled<const N: usize> {
    bytes: [u8; N],
    filled: usize,
}

impl<const N: usize> Assembled<N> {
    /// Nothing assembled yet.
    #[inline(always)]
    pub fn new() -> Self {
        Assembled {
            bytes: [0; N],
            filled: 0,
        }
    }

    /// Appends `piece`; panics past `N` bytes (a bug in the caller's length).
    #[inline(always)]
    pub fn push(&mut self, piece: &[u8]) -> &mut Self {
        self.bytes[self.filled..self.filled + piece.len()].copy_from_slice(piece);
        self.filled += piece.len();
        self
    }

    /// The `N` bytes; asserts that every one was assembled.
    #[inline(always)]
    pub fn bytes(&self) -> &[u8; N] {
        assert_eq!(self.filled, N, "every byte assembled");
        &self.bytes
    }
}

impl<const N: usize> Default for Assembled<N> {
    fn default() -> Self {
        Assembled::new()
    }
}

/// Appends the decimal digits of `value` without allocating (to a `BytesMut` here, to a
/// `Vec<u8>` in azq-loadgen's request encoder).
pub fn put_decimal(out: &mut impl BufMut, value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut remaining = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (remaining % 10) as u8;
        remaining /= 10;
        if remaining == 0 {
            break;
        }
    }
    out.put_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_at_reads_the_status_line() {
        assert_eq!(status_at(&render(503, false, b"").into_bytes()), 503);
        assert_eq!(status_at(b"HTTP/1.1 201 Created\r\n"), 201);
        assert_eq!(status_at(b"HTTP/1.1 2"), 0);
        assert_eq!(status_at(b""), 0);
    }

    fn render(status: u16, head_only: bool, body: &[u8]) -> String {
        let mut out = BytesMut::new();
        let mut writer = ResponseWriter::start(&mut out, status, head_only);
        writer.header("x-ms-version", b"2026-10-06");
        writer.body().put_slice(body);
        writer.finish();
        String::from_utf8(out.to_vec()).unwrap()
    }

    /// The preformatted status lines are the ones `start_with_reason` formats, for every status
    /// azq answers with and for one outside the table.
    #[test]
    fn preformatted_status_lines_are_the_formatted_ones() {
        for status in [
            100, 200, 201, 202, 204, 400, 403, 404, 405, 409, 413, 431, 500, 501, 503, 299,
        ] {
            let mut preformatted = BytesMut::new();
            ResponseWriter::start(&mut preformatted, status, false).finish();
            let mut formatted = BytesMut::new();
            ResponseWriter::start_with_reason(&mut formatted, status, reason_phrase(status), false)
                .finish();
            assert_eq!(preformatted, formatted, "{status}");
        }
    }

    #[test]
    fn assembled_lines_are_copied_as_they_are() {
        let mut out = BytesMut::new();
        let mut writer = ResponseWriter::start(&mut out, 204, false);
        let mut line = Assembled::<13>::new();
        line.push(b"a: b\r\n").push(b"cd: e\r\n");
        writer.lines(line.bytes());
        writer.header("f", b"g");
        writer.finish();
        assert_eq!(
            &out[..],
            b"HTTP/1.1 204 No Content\r\na: b\r\ncd: e\r\nf: g\r\nContent-Length:          0\r\n\r\n"
        );
    }

    #[test]
    fn content_length_is_patched_right_aligned() {
        let text = render(200, false, b"hello");
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nx-ms-version: 2026-10-06\r\nContent-Length:          5\r\n\r\nhello"
        );
    }

    #[test]
    fn a_reason_phrase_of_the_callers_choosing() {
        let mut out = BytesMut::new();
        let writer = ResponseWriter::start_with_reason(
            &mut out,
            404,
            "The specified queue does not exist.",
            false,
        );
        writer.finish();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 404 The specified queue does not exist.\r\n"),
            "{text}"
        );
        assert_eq!(status_at(text.as_bytes()), 404);
    }

    #[test]
    fn empty_body_has_zero_length() {
        let text = render(204, false, b"");
        assert!(
            text.ends_with("Content-Length:          0\r\n\r\n"),
            "{text}"
        );
    }

    #[test]
    fn head_only_keeps_length_but_drops_body() {
        let text = render(200, true, b"<xml/>");
        assert!(
            text.ends_with("Content-Length:          6\r\n\r\n"),
            "{text}"
        );
    }

    #[test]
    fn line_breaks_in_a_value_cannot_split_the_response() {
        let mut out = BytesMut::new();
        let mut writer = ResponseWriter::start(&mut out, 204, false);
        writer.header("x-ms-client-request-id", b"id\r\nSet-Cookie: x\nY: z\r");
        writer.finish();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 204 No Content\r\nx-ms-client-request-id: id  Set-Cookie: x Y: z \r\nContent-Length:          0\r\n\r\n"
        );
    }

    #[test]
    fn header_names_in_order() {
        let mut out = BytesMut::from(&b"HTTP/1.1 200 OK\r\nprevious: response\r\n\r\n"[..]);
        let mut writer = ResponseWriter::start(&mut out, 200, false);
        assert_eq!(writer.header_names().count(), 0);
        writer.header("x-ms-request-id", b"a:b");
        writer.header_decimal("x-ms-approximate-messages-count", 7);
        writer.header("x-ms-meta-Colour", b"");
        let names: Vec<&[u8]> = writer.header_names().collect();
        assert_eq!(
            names,
            [
                &b"x-ms-request-id"[..],
                b"x-ms-approximate-messages-count",
                b"x-ms-meta-Colour"
            ]
        );
    }

    #[test]
    fn abandon_restores_buffer() {
        let mut out = BytesMut::from(&b"previous"[..]);
        let mut writer = ResponseWriter::start(&mut out, 500, false);
        writer.header("a", b"b");
        writer.abandon();
        assert_eq!(&out[..], b"previous");
    }

    #[test]
    fn decimal_table() {
        for (value, expected) in [
            (0u64, "0"),
            (7, "7"),
            (10, "10"),
            (u64::MAX, "18446744073709551615"),
        ] {
            let mut out = BytesMut::new();
            put_decimal(&mut out, value);
            assert_eq!(&out[..], expected.as_bytes());
        }
    }
}
