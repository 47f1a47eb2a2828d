//! `Parser`: the incremental HTTP/1.1 request parser. It takes complete requests off the front of
//! a connection's read buffer, however the bytes were split across reads, and owns every framing
//! decision: head limits, `Content-Length` and chunked bodies, keep-alive and `100 Continue`.
//!
//! httparse parses the head. The parser keeps what it learned between calls so that work stays
//! linear in the bytes received: an incomplete head is searched for its blank line only in the
//! bytes that are new, httparse runs again only when that line appears (or, to catch garbage
//! early, when the buffer has doubled), a parsed head is never parsed again while its body
//! arrives, and a chunked body is decoded as it comes in.

use super::request::Span;
use super::{Method, Request};
use bytes::{Buf, Bytes, BytesMut};

/// Longest chunk-size line of a chunked body, CRLF included. The size is at most 16 hex digits;
/// the rest can only be chunk extensions, which azq ignores and its clients do not send.
const CHUNK_SIZE_LINE_BYTES_MAX: usize = 1024;

/// Why a request cannot be parsed. The connection is closed after any of them, because the
/// parser no longer knows where the next request starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The head (or a chunked body's trailer section) does not fit in `head_bytes_max`: 431.
    HeadTooLarge,
    /// The head has more than `headers_max` headers: 431.
    TooManyHeaders,
    /// The declared or decoded body is larger than `body_bytes_max`: 413.
    BodyTooLarge,
    /// The bytes are not an HTTP/1.x request azq accepts; the reason is for the log: 400.
    Malformed(&'static str),
}

/// What one call to `Parser::parse` achieved.
#[derive(Debug)]
pub enum Progress {
    /// One whole request, split off the front of the buffer.
    Complete(Request),
    /// The buffer holds no whole request yet: read more. `send_continue` asks the connection to
    /// send `HTTP/1.1 100 Continue` now, because the client waits for it before sending the body;
    /// it is true at most once per request.
    NeedMore {
        /// True once per request: an HTTP/1.1 head with `Expect: 100-continue` and a body to come.
        send_continue: bool,
    },
}

/// Capacity of the stack array httparse fills; `Parser::new` refuses a larger `headers_max`.
const HEADERS_ARRAY_LENGTH: usize = crate::limits::REQUEST_HEADERS_MAX;

/// Parses requests from one connection's read buffer; keeps the progress on a partly received
/// request between calls.
pub struct Parser {
    /// Largest head accepted, bytes: request line, headers and the blank line.
    head_bytes_max: usize,
    /// Most headers accepted in one head; also the size of the array handed to httparse.
    headers_max: usize,
    /// Largest body accepted, bytes, after de-chunking.
    body_bytes_max: usize,
    /// Progress on the next head while no head is parsed.
    head_scan: HeadScan,
    /// The request whose head is parsed and whose body is still arriving.
    pending: Option<PendingRequest>,
}

/// What is known about an incomplete head, so that no byte is searched twice.
#[derive(Default)]
struct HeadScan {
    /// Bytes at the front of the buffer already searched for the line feed of the blank line
    /// that ends a head.
    searched_bytes: usize,
    /// Bytes httparse was given at its last look at this incomplete head. Looking again only
    /// once the buffer has doubled finds garbage early at linear total cost.
    attempted_bytes: usize,
    /// Empty lines skipped before the request line, bytes. RFC 9112 §2.2 asks servers to
    /// tolerate them, but not without limit.
    empty_line_bytes: usize,
}

/// A request whose head has been parsed and split off the buffer, waiting for its body.
struct PendingRequest {
    /// Everything but the body, which is filled in when complete.
    request: Request,
    body: BodyState,
    /// The client sent `Expect: 100-continue` and has not been told to go on yet.
    continue_expected: bool,
}

/// How the body of the pending request is framed, and how far it has arrived.
enum BodyState {
    /// `Content-Length` bytes (0 when the request declared no body): taken in one piece once all
    /// have arrived, without copying.
    Length {
        body_bytes: usize,
    },
    Chunked(ChunkedBody),
}

/// A chunked body being decoded; wire bytes leave the buffer as soon as they are decoded.
#[derive(Default)]
struct ChunkedBody {
    /// The chunk data decoded so far; never longer than `body_bytes_max`.
    decoded: BytesMut,
    state: ChunkState,
    /// Bytes at the front of the buffer already searched for the end of the current line.
    line_searched_bytes: usize,
    /// Bytes of trailer section consumed so far; bounded like a head.
    trailer_bytes: usize,
}

/// Where the chunked decoder is in `chunk-size [ext] CRLF data CRLF … 0 CRLF trailers CRLF`.
#[derive(Default)]
enum ChunkState {
    #[default]
    SizeLine,
    Data {
        remaining_bytes: usize,
    },
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk, up to and including the empty line.
    Trailers,
}

/// What the headers say about the body and the connection.
struct HeadFacts {
    body: BodyState,
    keep_alive: bool,
    continue_expected: bool,
}

impl Parser {
    /// A parser for one connection. `head_bytes_max` must fit the `u16` offsets of `Span`.
    pub fn new(head_bytes_max: usize, headers_max: usize, body_bytes_max: usize) -> Self {
        assert!(
            head_bytes_max <= usize::from(u16::MAX),
            "head offsets are u16"
        );
        assert!(
            headers_max <= HEADERS_ARRAY_LENGTH,
            "headers are parsed into a stack array of {HEADERS_ARRAY_LENGTH}"
        );
        Parser {
            head_bytes_max,
            headers_max,
            body_bytes_max,
            head_scan: HeadScan::default(),
            pending: None,
        }
    }

    /// Whether no request is under way: nothing of a next request has been seen in `buffer`,
    /// no empty lines before one were skipped, and no parsed head is waiting for its body. The
    /// connection loop uses it to choose between the idle timeout and the deadline of a request
    /// that has started to arrive; counting skipped empty lines as a start means a client cannot
    /// hold a connection by sending an empty line now and then.
    pub fn is_idle(&self, buffer: &BytesMut) -> bool {
        buffer.is_empty() && self.pending.is_none() && self.head_scan.empty_line_bytes == 0
    }

    /// Takes at most one request from the front of `buffer` (the connection's read buffer). On
    /// `Complete` the request's bytes have been split off `buffer` (head and a `Content-Length`
    /// body without copying); bytes of pipelined requests after it stay in `buffer`. On
    /// `NeedMore`, bytes already understood may have been consumed: the parser keeps them.
    pub fn parse(&mut self, buffer: &mut BytesMut) -> Result<Progress, ParseError> {
        let mut pending = match self.pending.take() {
            Some(pending) => pending,
            None => match self.parse_head(buffer)? {
                Some(pending) => pending,
                None => {
                    return Ok(Progress::NeedMore {
                        send_continue: false,
                    })
                }
            },
        };
        let body = match &mut pending.body {
            BodyState::Length { body_bytes } => {
                let body_bytes = *body_bytes;
                if buffer.len() < body_bytes {
                    None
                } else if body_bytes == 0 {
                    // An empty `Bytes` does not keep the read buffer's allocation alive.
                    Some(Bytes::new())
                } else {
                    Some(buffer.split_to(body_bytes).freeze())
                }
            }
            BodyState::Chunked(chunked) => {
                if chunked.decode(buffer, self.head_bytes_max, self.body_bytes_max)? {
                    Some(chunked.decoded.split().freeze())
                } else {
                    None
                }
            }
        };
        match body {
            Some(body) => {
                let mut request = pending.request;
                request.body = body;
                Ok(Progress::Complete(request))
            }
            None => {
                let send_continue = std::mem::take(&mut pending.continue_expected);
                self.pending = Some(pending);
                Ok(Progress::NeedMore { send_continue })
            }
        }
    }

    /// Parses the head at the front of `buffer` once it is complete and splits it off.
    fn parse_head(&mut self, buffer: &mut BytesMut) -> Result<Option<PendingRequest>, ParseError> {
        self.head_scan
            .skip_empty_lines(buffer, self.head_bytes_max)?;
        // A head is complete within the first `head_bytes_max` bytes or it is too large, so
        // nothing past them is ever searched or parsed.
        let window = &buffer[..buffer.len().min(self.head_bytes_max)];
        let window_full = window.len() >= self.head_bytes_max;
        let doubled = window.len() >= self.head_scan.attempted_bytes.saturating_mul(2).max(1);
        // The search is needed only when httparse would not run anyway, which is the common
        // case of a head arriving in one read.
        if window_full || doubled || self.head_scan.search_blank_line(window) {
            self.head_scan.attempted_bytes = window.len();
            // On the stack: a head is parsed on every request, and a 3.2 KiB heap allocation
            // each time is avoidable. httparse writes the headers it finds before reading them.
            let mut headers = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() };
                HEADERS_ARRAY_LENGTH];
            let mut request = httparse::Request::new(&mut []);
            match request.parse_with_uninit_headers(window, &mut headers[..self.headers_max]) {
                Ok(httparse::Status::Complete(head_bytes)) => {
                    let mut pending = self.read_head(&request, window, head_bytes)?;
                    // httparse's slices of `buffer` end here, so the head can be split off; it
                    // keeps `buffer`'s first byte, so the offsets stay valid in `head`.
                    pending.request.head = buffer.split_to(head_bytes).freeze();
                    self.head_scan = HeadScan::default();
                    return Ok(Some(pending));
                }
                // After the skipped empty lines a blank line always completes a head (or is an
                // error), so the window has none: it need not be searched again.
                Ok(httparse::Status::Partial) => self.head_scan.searched_bytes = window.len(),
                Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooManyHeaders),
                Err(error) => return Err(ParseError::Malformed(describe(error))),
            }
        }
        if window_full {
            return Err(ParseError::HeadTooLarge);
        }
        Ok(None)
    }

    /// Turns a head httparse parsed from the front of `window` into a pending request whose
    /// `head` is still to be split off the buffer; spans are offsets from `window`'s start.
    fn read_head(
        &self,
        parsed: &httparse::Request<'_, '_>,
        window: &[u8],
        head_bytes: usize,
    ) -> Result<PendingRequest, ParseError> {
        let (Some(method), Some(target), Some(version_minor)) =
            (parsed.method, parsed.path, parsed.version)
        else {
            return Err(ParseError::Malformed("incomplete request line"));
        };
        let head_start = window.as_ptr() as usize;
        let span = |slice: &[u8]| {
            let start = slice.as_ptr() as usize - head_start;
            let end = start + slice.len();
            debug_assert!(end <= head_bytes);
            // `head_bytes <= head_bytes_max <= u16::MAX`, checked in `new`.
            Span {
                start: start as u16,
                end: end as u16,
            }
        };
        let headers = parsed
            .headers
            .iter()
            .map(|header| (span(header.name.as_bytes()), span(header.value)))
            .collect();
        let facts = read_head_facts(parsed.headers, version_minor, self.body_bytes_max)?;
        let request = Request {
            method: Method::from_token(method.as_bytes()),
            target: span(target.as_bytes()),
            version_minor,
            headers,
            head: Bytes::new(),
            body: Bytes::new(),
            keep_alive: facts.keep_alive,
        };
        Ok(PendingRequest {
            request,
            body: facts.body,
            continue_expected: facts.continue_expected,
        })
    }
}

impl HeadScan {
    /// Consumes empty lines before the request line, so that the blank-line search never
    /// mistakes them for the end of a head.
    fn skip_empty_lines(
        &mut self,
        buffer: &mut BytesMut,
        head_bytes_max: usize,
    ) -> Result<(), ParseError> {
        loop {
            let line_bytes = if buffer.starts_with(b"\r\n") {
                2
            } else if buffer.starts_with(b"\n") {
                1
            } else {
                return Ok(());
            };
            buffer.advance(line_bytes);
            self.empty_line_bytes += line_bytes;
            if self.empty_line_bytes > head_bytes_max {
                return Err(ParseError::HeadTooLarge);
            }
            self.searched_bytes = self.searched_bytes.saturating_sub(line_bytes);
            self.attempted_bytes = self.attempted_bytes.saturating_sub(line_bytes);
        }
    }

    /// Searches the bytes of `window` not searched before for a line feed that ends an empty
    /// line (`\n\n` or `\n\r\n`, as httparse accepts both).
    fn search_blank_line(&mut self, window: &[u8]) -> bool {
        let mut at = self.searched_bytes.min(window.len());
        while let Some(offset) = window[at..].iter().position(|&byte| byte == b'\n') {
            at += offset + 1;
            let through = &window[..at];
            if through.ends_with(b"\n\n") || through.ends_with(b"\n\r\n") {
                self.searched_bytes = at;
                return true;
            }
        }
        self.searched_bytes = window.len();
        false
    }
}

impl ChunkedBody {
    /// Decodes as much of the chunked body at the front of `buffer` as has arrived, consuming
    /// it; true once the last chunk and the trailer section are in.
    fn decode(
        &mut self,
        buffer: &mut BytesMut,
        head_bytes_max: usize,
        body_bytes_max: usize,
    ) -> Result<bool, ParseError> {
        loop {
            match self.state {
                ChunkState::SizeLine => {
                    let too_long = ParseError::Malformed("chunk size line too long");
                    let Some(line_bytes) =
                        self.search_line(buffer, CHUNK_SIZE_LINE_BYTES_MAX, too_long)?
                    else {
                        return Ok(false);
                    };
                    let size = parse_chunk_size(&buffer[..line_bytes])?;
                    buffer.advance(line_bytes + 2);
                    if size == 0 {
                        self.state = ChunkState::Trailers;
                        continue;
                    }
                    debug_assert!(self.decoded.len() <= body_bytes_max);
                    let room_bytes = body_bytes_max - self.decoded.len();
                    let remaining_bytes = usize::try_from(size)
                        .ok()
                        .filter(|&size| size <= room_bytes)
                        .ok_or(ParseError::BodyTooLarge)?;
                    self.state = ChunkState::Data { remaining_bytes };
                }
                ChunkState::Data { remaining_bytes } => {
                    let taken_bytes = remaining_bytes.min(buffer.len());
                    if taken_bytes == 0 {
                        return Ok(false);
                    }
                    self.decoded.extend_from_slice(&buffer[..taken_bytes]);
                    buffer.advance(taken_bytes);
                    self.state = match remaining_bytes - taken_bytes {
                        0 => ChunkState::DataEnd,
                        remaining_bytes => ChunkState::Data { remaining_bytes },
                    };
                }
                ChunkState::DataEnd => {
                    let available_bytes = buffer.len().min(2);
                    if buffer[..available_bytes] != b"\r\n"[..available_bytes] {
                        return Err(ParseError::Malformed("chunk data not followed by CRLF"));
                    }
                    if available_bytes < 2 {
                        return Ok(false);
                    }
                    buffer.advance(2);
                    self.state = ChunkState::SizeLine;
                }
                ChunkState::Trailers => {
                    let room_bytes = head_bytes_max.saturating_sub(self.trailer_bytes);
                    let Some(line_bytes) =
                        self.search_line(buffer, room_bytes, ParseError::HeadTooLarge)?
                    else {
                        return Ok(false);
                    };
                    if line_bytes > 0 {
                        check_trailer_line(&buffer[..line_bytes])?;
                    }
                    buffer.advance(line_bytes + 2);
                    self.trailer_bytes += line_bytes + 2;
                    if line_bytes == 0 {
                        return Ok(true);
                    }
                }
            }
        }
    }

    /// Finds the CRLF ending the line at the front of `buffer`, searching only bytes not
    /// searched before, and returns the line's length without it. A line longer than
    /// `line_bytes_max` with its CRLF is `too_long`. Framing lines must end in CRLF: a bare LF
    /// is rejected, since parsers that disagree about line ends are how requests get smuggled.
    fn search_line(
        &mut self,
        buffer: &[u8],
        line_bytes_max: usize,
        too_long: ParseError,
    ) -> Result<Option<usize>, ParseError> {
        let window = &buffer[..buffer.len().min(line_bytes_max)];
        let start = self.line_searched_bytes.min(window.len());
        match window[start..].iter().position(|&byte| byte == b'\n') {
            Some(offset) => {
                let line_feed_at = start + offset;
                self.line_searched_bytes = 0;
                if !window[..line_feed_at].ends_with(b"\r") {
                    return Err(ParseError::Malformed(
                        "line in chunked body not ended by CRLF",
                    ));
                }
                Ok(Some(line_feed_at - 1))
            }
            None if buffer.len() >= line_bytes_max => Err(too_long),
            None => {
                self.line_searched_bytes = window.len();
                Ok(None)
            }
        }
    }
}

/// Reads the framing, keep-alive and `Expect` headers of a parsed head.
fn read_head_facts(
    headers: &[httparse::Header<'_>],
    version_minor: u8,
    body_bytes_max: usize,
) -> Result<HeadFacts, ParseError> {
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding_seen = false;
    let mut transfer_codings = 0_usize;
    let mut last_coding_chunked = false;
    let mut close = false;
    let mut keep_alive_asked = false;
    let mut expect_continue = false;
    for header in headers {
        let name = header.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            // RFC 9110 §8.6 lets a recipient accept a list of identical values.
            for element in header.value.split(|&byte| byte == b',') {
                let length = parse_content_length(element.trim_ascii())?;
                if content_length.is_some_and(|seen| seen != length) {
                    return Err(ParseError::Malformed("conflicting Content-Length values"));
                }
                content_length = Some(length);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding_seen = true;
            for coding in list_elements(header.value) {
                transfer_codings += 1;
                last_coding_chunked = coding.eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in list_elements(header.value) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive_asked |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            expect_continue |= header
                .value
                .trim_ascii()
                .eq_ignore_ascii_case(b"100-continue");
        }
    }
    let body = match (content_length, transfer_encoding_seen) {
        // RFC 9112 §6.3: both at once is how requests are smuggled past a proxy; refuse.
        (Some(_), true) => {
            return Err(ParseError::Malformed(
                "both Content-Length and Transfer-Encoding",
            ))
        }
        // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means the framing is faulty.
        (None, true) if version_minor == 0 => {
            return Err(ParseError::Malformed(
                "Transfer-Encoding in an HTTP/1.0 request",
            ))
        }
        // azq decodes no other coding, and chunked may be applied only once.
        (None, true) if transfer_codings != 1 || !last_coding_chunked => {
            return Err(ParseError::Malformed(
                "Transfer-Encoding other than chunked",
            ))
        }
        (None, true) => BodyState::Chunked(ChunkedBody::default()),
        (Some(length), false) => BodyState::Length {
            body_bytes: usize::try_from(length)
                .ok()
                .filter(|&length| length <= body_bytes_max)
                .ok_or(ParseError::BodyTooLarge)?,
        },
        (None, false) => BodyState::Length { body_bytes: 0 },
    };
    let body_may_follow = match &body {
        BodyState::Length { body_bytes } => *body_bytes > 0,
        BodyState::Chunked(_) => true,
    };
    Ok(HeadFacts {
        body,
        keep_alive: match version_minor {
            0 => keep_alive_asked && !close,
            _ => !close,
        },
        // RFC 9110 §10.1.1: a server must ignore 100-continue in an HTTP/1.0 request.
        continue_expected: expect_continue && version_minor == 1 && body_may_follow,
    })
}

/// The non-empty elements of a comma-separated header list, without surrounding whitespace.
fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&byte| byte == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|element| !element.is_empty())
}

/// Parses one `Content-Length` value: decimal digits only (no sign, no spaces inside).
fn parse_content_length(digits: &[u8]) -> Result<u64, ParseError> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(ParseError::Malformed("Content-Length is not a number"));
    }
    digits
        .iter()
        .try_fold(0_u64, |length, &digit| {
            length.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })
        .ok_or(ParseError::Malformed("Content-Length overflows"))
}

/// Parses a chunk-size line without its CRLF: hex digits, then optional whitespace and
/// extensions (`;name=value`), which are ignored.
fn parse_chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let digits_bytes = line
        .iter()
        .take_while(|byte| byte.is_ascii_hexdigit())
        .count();
    let (digits, rest) = line.split_at(digits_bytes);
    if digits.is_empty() {
        return Err(ParseError::Malformed("chunk size is not hexadecimal"));
    }
    let size = digits
        .iter()
        .try_fold(0_u64, |size, &digit| {
            let value = char::from(digit).to_digit(16)?;
            size.checked_mul(16)?.checked_add(u64::from(value))
        })
        .ok_or(ParseError::Malformed("chunk size overflows"))?;
    let whitespace_bytes = rest
        .iter()
        .take_while(|&&byte| byte == b' ' || byte == b'\t')
        .count();
    match &rest[whitespace_bytes..] {
        [] => Ok(size),
        [b';', extensions @ ..] if extensions.iter().all(|&byte| is_field_byte(byte)) => Ok(size),
        [b';', ..] => Err(ParseError::Malformed("invalid chunk extension")),
        _ => Err(ParseError::Malformed("invalid byte after chunk size")),
    }
}

/// Checks one trailer line (`name: value`), which is then skipped: azq reads no trailer.
fn check_trailer_line(line: &[u8]) -> Result<(), ParseError> {
    let Some(colon_at) = line.iter().position(|&byte| byte == b':') else {
        return Err(ParseError::Malformed("trailer line without a colon"));
    };
    let (name, value) = line.split_at(colon_at);
    if name.is_empty() || !name.iter().all(|&byte| is_token_byte(byte)) {
        return Err(ParseError::Malformed("invalid trailer name"));
    }
    if !value.iter().all(|&byte| is_field_byte(byte)) {
        return Err(ParseError::Malformed("invalid trailer value"));
    }
    Ok(())
}

/// A `tchar` of RFC 9110 §5.6.2: the bytes a header name is made of.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// A byte allowed in a field value or chunk extension: visible, space, tab or obs-text; never a
/// control byte such as a bare CR.
fn is_field_byte(byte: u8) -> bool {
    byte == b'\t' || (byte >= b' ' && byte != 0x7f)
}

/// The reason for the log when httparse rejects a head.
fn describe(error: httparse::Error) -> &'static str {
    match error {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending in head",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid method or target",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "invalid HTTP version",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn idle_only_between_requests() {
        let mut parser = Parser::new(1024, 16, 1024);
        let mut buffer = BytesMut::new();
        assert!(parser.is_idle(&buffer));
        buffer.extend_from_slice(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
        assert!(matches!(
            parser.parse(&mut buffer),
            Ok(Progress::NeedMore { .. })
        ));
        // The head and the chunk so far may have been consumed, but a request is under way.
        assert!(!parser.is_idle(&buffer));
        buffer.extend_from_slice(b"lo\r\n0\r\n\r\n");
        assert!(matches!(
            parser.parse(&mut buffer),
            Ok(Progress::Complete(_))
        ));
        assert!(parser.is_idle(&buffer));
    }

    use super::*;
    use crate::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX};

    /// A request as the tests compare it: owned, readable in a failure message.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Seen {
        method: Method,
        target: String,
        version_minor: u8,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        keep_alive: bool,
    }

    fn seen(
        method: Method,
        target: &str,
        version_minor: u8,
        headers: &[(&str, &str)],
        body: &[u8],
        keep_alive: bool,
    ) -> Seen {
        Seen {
            method,
            target: target.to_string(),
            version_minor,
            headers: headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            body: body.to_vec(),
            keep_alive,
        }
    }

    fn seen_from(request: &Request) -> Seen {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        Seen {
            method: request.method,
            target: text(request.target()),
            version_minor: request.version_minor,
            headers: request
                .headers()
                .map(|(name, value)| (text(name), text(value)))
                .collect(),
            body: request.body.to_vec(),
            keep_alive: request.keep_alive,
        }
    }

    fn parser() -> Parser {
        Parser::new(
            REQUEST_HEAD_BYTES_MAX,
            REQUEST_HEADERS_MAX,
            REQUEST_BODY_BYTES_MAX,
        )
    }

    /// Calls `parse` until it needs more, as the connection loop does after each read.
    fn parse_available(
        parser: &mut Parser,
        buffer: &mut BytesMut,
        requests: &mut Vec<Seen>,
    ) -> Result<(), ParseError> {
        loop {
            match parser.parse(buffer)? {
                Progress::Complete(request) => requests.push(seen_from(&request)),
                Progress::NeedMore { .. } => return Ok(()),
            }
        }
    }

    /// Feeds `input` to a fresh parser in pieces ending at `piece_ends` (the last piece ends at
    /// `input.len()`). Returns the requests that came out and then either the bytes left in the
    /// buffer or the error that stopped the parser.
    fn feed_outcome(
        input: &[u8],
        piece_ends: impl IntoIterator<Item = usize>,
    ) -> (Vec<Seen>, Result<usize, ParseError>) {
        let mut parser = parser();
        let mut buffer = BytesMut::new();
        let mut requests = Vec::new();
        let mut fed_bytes = 0;
        for end in piece_ends.into_iter().chain([input.len()]) {
            buffer.extend_from_slice(&input[fed_bytes..end]);
            fed_bytes = end;
            if let Err(error) = parse_available(&mut parser, &mut buffer, &mut requests) {
                return (requests, Err(error));
            }
        }
        (requests, Ok(buffer.len()))
    }

    /// `feed_outcome` for inputs expected to be all valid or to fail.
    fn feed(
        input: &[u8],
        piece_ends: impl IntoIterator<Item = usize>,
    ) -> Result<(Vec<Seen>, usize), ParseError> {
        let (requests, outcome) = feed_outcome(input, piece_ends);
        outcome.map(|leftover_bytes| (requests, leftover_bytes))
    }

    fn feed_whole(input: &[u8]) -> Result<(Vec<Seen>, usize), ParseError> {
        feed(input, [])
    }

    fn feed_byte_by_byte(input: &[u8]) -> Result<(Vec<Seen>, usize), ParseError> {
        feed(input, 1..input.len())
    }

    fn many_headers_request() -> (Vec<u8>, Seen) {
        let headers: Vec<(String, String)> = (0..REQUEST_HEADERS_MAX)
            .map(|index| (format!("X-Ms-Meta-Key{index}"), format!("value {index}")))
            .collect();
        let mut input = b"PUT /account/queue?comp=metadata HTTP/1.1\r\n".to_vec();
        for (name, value) in &headers {
            input.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        input.extend_from_slice(b"\r\n");
        let expected = Seen {
            method: Method::Put,
            target: "/account/queue?comp=metadata".to_string(),
            version_minor: 1,
            headers,
            body: Vec::new(),
            keep_alive: true,
        };
        (input, expected)
    }

    /// Valid requests, each alone in its input, with what must come out.
    fn valid_cases() -> Vec<(&'static str, Vec<u8>, Seen)> {
        let mut cases =
            vec![
            (
                "GET without a body",
                b"GET /account/queue/messages?numofmessages=32 HTTP/1.1\r\nHost: localhost\r\n\r\n"
                    .to_vec(),
                seen(
                    Method::Get,
                    "/account/queue/messages?numofmessages=32",
                    1,
                    &[("Host", "localhost")],
                    b"",
                    true,
                ),
            ),
            (
                "GET without headers",
                b"GET / HTTP/1.1\r\n\r\n".to_vec(),
                seen(Method::Get, "/", 1, &[], b"", true),
            ),
            (
                "POST with Content-Length",
                b"POST /account/queue/messages HTTP/1.1\r\n\
                  Content-Length: 5\r\nContent-Type: application/xml\r\n\r\nhello"
                    .to_vec(),
                seen(
                    Method::Post,
                    "/account/queue/messages",
                    1,
                    &[("Content-Length", "5"), ("Content-Type", "application/xml")],
                    b"hello",
                    true,
                ),
            ),
            (
                "Content-Length of zero",
                b"PUT /account/queue HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
                seen(Method::Put, "/account/queue", 1, &[("content-length", "0")], b"", true),
            ),
            (
                "Content-Length repeated with the same value, and as a list",
                b"POST /q HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\nabc"
                    .to_vec(),
                seen(
                    Method::Post,
                    "/q",
                    1,
                    &[("Content-Length", "3"), ("Content-Length", "3, 3")],
                    b"abc",
                    true,
                ),
            ),
            (
                "chunked with several chunks, extensions and trailers",
                b"POST /q/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
                  5;name=value\r\nhello\r\n\
                  1 ; quoted=\"a b\"\r\n,\r\n\
                  A\r\n world!!!!\r\n\
                  0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
                    .to_vec(),
                seen(
                    Method::Post,
                    "/q/messages",
                    1,
                    &[("Transfer-Encoding", "chunked")],
                    b"hello, world!!!!",
                    true,
                ),
            ),
            (
                "chunked with an empty body and a capitalised coding",
                b"PUT /q HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n0000\r\n\r\n".to_vec(),
                seen(Method::Put, "/q", 1, &[("Transfer-Encoding", "Chunked")], b"", true),
            ),
            (
                "chunked with upper-case hex sizes",
                b"PUT /q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
                  0B\r\nhello world\r\n0\r\n\r\n"
                    .to_vec(),
                seen(
                    Method::Put,
                    "/q",
                    1,
                    &[("Transfer-Encoding", "chunked")],
                    b"hello world",
                    true,
                ),
            ),
            (
                "HTTP/1.0 without keep-alive",
                b"GET /q HTTP/1.0\r\nHost: a\r\n\r\n".to_vec(),
                seen(Method::Get, "/q", 0, &[("Host", "a")], b"", false),
            ),
            (
                "HTTP/1.0 with keep-alive",
                b"GET /q HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n".to_vec(),
                seen(Method::Get, "/q", 0, &[("Connection", "Keep-Alive")], b"", true),
            ),
            (
                "HTTP/1.1 with Connection: close",
                b"DELETE /q HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec(),
                seen(Method::Delete, "/q", 1, &[("Connection", "close")], b"", false),
            ),
            (
                "close among other connection options",
                b"GET /q HTTP/1.1\r\nConnection: Upgrade ,  CLOSE\r\n\r\n".to_vec(),
                seen(Method::Get, "/q", 1, &[("Connection", "Upgrade ,  CLOSE")], b"", false),
            ),
            (
                "HEAD",
                b"HEAD /account/queue?comp=metadata HTTP/1.1\r\n\r\n".to_vec(),
                seen(Method::Head, "/account/queue?comp=metadata", 1, &[], b"", true),
            ),
            (
                "unknown method",
                b"PATCH /q HTTP/1.1\r\n\r\n".to_vec(),
                seen(Method::Other, "/q", 1, &[], b"", true),
            ),
            (
                "OPTIONS",
                b"OPTIONS /q HTTP/1.1\r\nOrigin: http://a\r\n\r\n".to_vec(),
                seen(Method::Options, "/q", 1, &[("Origin", "http://a")], b"", true),
            ),
            (
                "empty lines before the request line",
                b"\r\n\n\r\nGET /q HTTP/1.1\r\n\r\n".to_vec(),
                seen(Method::Get, "/q", 1, &[], b"", true),
            ),
            (
                "bare line feeds in the head",
                b"POST /q HTTP/1.1\nContent-Length: 2\nA:  b  \n\nhi".to_vec(),
                seen(
                    Method::Post,
                    "/q",
                    1,
                    &[("Content-Length", "2"), ("A", "b")],
                    b"hi",
                    true,
                ),
            ),
            (
                "Expect: 100-continue with the body already sent",
                b"PUT /q HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx".to_vec(),
                seen(
                    Method::Put,
                    "/q",
                    1,
                    &[("Expect", "100-continue"), ("Content-Length", "1")],
                    b"x",
                    true,
                ),
            ),
        ];
        let (input, expected) = many_headers_request();
        cases.push(("as many headers as allowed", input, expected));
        cases
    }

    #[test]
    fn valid_requests_parse_whole() {
        for (name, input, expected) in valid_cases() {
            let (requests, leftover_bytes) =
                feed_whole(&input).unwrap_or_else(|error| panic!("{name}: {error:?}"));
            assert_eq!(requests, vec![expected], "{name}");
            assert_eq!(leftover_bytes, 0, "{name}");
        }
    }

    #[test]
    fn head_spans_point_into_the_head() {
        let mut buffer = BytesMut::from(&b"GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\nGET /next"[..]);
        let Ok(Progress::Complete(request)) = parser().parse(&mut buffer) else {
            panic!("a complete request");
        };
        assert_eq!(&request.head[..], b"GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(request.target, Span { start: 4, end: 10 });
        assert_eq!(request.path(), b"/a");
        assert_eq!(request.query(), b"b=c");
        assert_eq!(request.header("host"), Some(&b"x"[..]));
        assert_eq!(&buffer[..], b"GET /next");
    }

    /// Every valid request in one stream, and a stream of three pipelined requests including a
    /// chunked one.
    fn split_cases() -> Vec<(String, Vec<u8>, Vec<Seen>)> {
        let mut cases: Vec<(String, Vec<u8>, Vec<Seen>)> = valid_cases()
            .into_iter()
            .map(|(name, input, expected)| (name.to_string(), input, vec![expected]))
            .collect();
        let valid = valid_cases();
        let pipelined = [0, 5, 2];
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for index in pipelined {
            input.extend_from_slice(&valid[index].1);
            expected.push(valid[index].2.clone());
        }
        cases.push(("three pipelined requests".to_string(), input, expected));
        cases
    }

    #[test]
    fn every_split_point_gives_the_same_requests() {
        for (name, input, expected) in split_cases() {
            for split_at in 0..=input.len() {
                let (requests, leftover_bytes) = feed(&input, [split_at])
                    .unwrap_or_else(|error| panic!("{name}, split at {split_at}: {error:?}"));
                assert_eq!(requests, expected, "{name}, split at {split_at}");
                assert_eq!(leftover_bytes, 0, "{name}, split at {split_at}");
            }
            let (requests, leftover_bytes) = feed_byte_by_byte(&input)
                .unwrap_or_else(|error| panic!("{name}, byte by byte: {error:?}"));
            assert_eq!(requests, expected, "{name}, byte by byte");
            assert_eq!(leftover_bytes, 0, "{name}, byte by byte");
        }
    }

    fn head_with_header_value_bytes(value_bytes: usize) -> Vec<u8> {
        let mut input = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
        input.resize(input.len() + value_bytes, b'a');
        input.extend_from_slice(b"\r\n\r\n");
        input
    }

    fn head_with_headers(count: usize) -> Vec<u8> {
        let mut input = b"GET / HTTP/1.1\r\n".to_vec();
        for index in 0..count {
            input.extend_from_slice(format!("H{index}: v\r\n").as_bytes());
        }
        input.extend_from_slice(b"\r\n");
        input
    }

    /// Invalid inputs and the error each must give, however the bytes are split.
    fn invalid_cases() -> Vec<(&'static str, Vec<u8>, ParseError)> {
        let malformed = ParseError::Malformed;
        let chunked = |body: &str| {
            format!("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{body}").into_bytes()
        };
        let post = |headers: &str| format!("POST / HTTP/1.1\r\n{headers}\r\n").into_bytes();
        let exact_head = head_with_header_value_bytes(0).len();
        let long_value = head_with_header_value_bytes(REQUEST_HEAD_BYTES_MAX);
        let not_a_number = malformed("Content-Length is not a number");
        vec![
            (
                "garbage",
                b"\x01\x02\x03 garbage\r\n\r\n".to_vec(),
                malformed("invalid method or target"),
            ),
            (
                "garbage without a blank line",
                b"\x00GET".to_vec(),
                malformed("invalid method or target"),
            ),
            (
                "no target",
                b"GET HTTP/1.1\r\n\r\n".to_vec(),
                malformed("invalid method or target"),
            ),
            (
                "unknown version",
                b"GET / HTTP/2.0\r\n\r\n".to_vec(),
                malformed("invalid HTTP version"),
            ),
            (
                "lower-case protocol",
                b"GET / http/1.1\r\n\r\n".to_vec(),
                malformed("invalid HTTP version"),
            ),
            (
                "space in target",
                b"GET /a b HTTP/1.1\r\n\r\n".to_vec(),
                malformed("invalid HTTP version"),
            ),
            (
                "control byte in target",
                b"GET /\x7f HTTP/1.1\r\n\r\n".to_vec(),
                malformed("invalid method or target"),
            ),
            (
                "bare CR after request line",
                b"GET / HTTP/1.1\rX: y\r\n\r\n".to_vec(),
                malformed("invalid line ending in head"),
            ),
            (
                "header without colon",
                post("Host\r\n"),
                malformed("invalid header name"),
            ),
            (
                "space in header name",
                post("Ho st: a\r\n"),
                malformed("invalid header name"),
            ),
            (
                "folded header",
                post("A: b\r\n c\r\n"),
                malformed("invalid header name"),
            ),
            (
                "control byte in header value",
                post("A: b\x01c\r\n"),
                malformed("invalid header value"),
            ),
            (
                "too many headers",
                head_with_headers(REQUEST_HEADERS_MAX + 1),
                ParseError::TooManyHeaders,
            ),
            (
                "head too large, still incomplete",
                long_value[..REQUEST_HEAD_BYTES_MAX + 10].to_vec(),
                ParseError::HeadTooLarge,
            ),
            (
                "head of the limit, incomplete",
                long_value[..REQUEST_HEAD_BYTES_MAX].to_vec(),
                ParseError::HeadTooLarge,
            ),
            (
                "head too large, complete",
                head_with_header_value_bytes(REQUEST_HEAD_BYTES_MAX - exact_head + 1),
                ParseError::HeadTooLarge,
            ),
            (
                "endless empty lines",
                b"\r\n".repeat(REQUEST_HEAD_BYTES_MAX / 2 + 1),
                ParseError::HeadTooLarge,
            ),
            (
                "Content-Length with letters",
                post("Content-Length: 1a\r\n"),
                not_a_number,
            ),
            (
                "Content-Length negative",
                post("Content-Length: -1\r\n"),
                not_a_number,
            ),
            (
                "Content-Length with a plus sign",
                post("Content-Length: +1\r\n"),
                not_a_number,
            ),
            (
                "Content-Length empty",
                post("Content-Length: \r\n"),
                not_a_number,
            ),
            (
                "Content-Length with space inside",
                post("Content-Length: 1 2\r\n"),
                not_a_number,
            ),
            (
                "Content-Length list with empty element",
                post("Content-Length: 1,\r\n"),
                not_a_number,
            ),
            (
                "Content-Length overflows",
                post("Content-Length: 18446744073709551616\r\n"),
                malformed("Content-Length overflows"),
            ),
            (
                "Content-Length duplicated with different values",
                post("Content-Length: 1\r\nContent-Length: 2\r\n"),
                malformed("conflicting Content-Length values"),
            ),
            (
                "Content-Length list with different values",
                post("Content-Length: 1, 2\r\n"),
                malformed("conflicting Content-Length values"),
            ),
            (
                "Content-Length and Transfer-Encoding",
                post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
                malformed("both Content-Length and Transfer-Encoding"),
            ),
            (
                "unknown Transfer-Encoding",
                post("Transfer-Encoding: gzip\r\n"),
                malformed("Transfer-Encoding other than chunked"),
            ),
            (
                "chunked not last",
                post("Transfer-Encoding: chunked, gzip\r\n"),
                malformed("Transfer-Encoding other than chunked"),
            ),
            (
                "chunked twice",
                post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
                malformed("Transfer-Encoding other than chunked"),
            ),
            (
                "empty Transfer-Encoding",
                post("Transfer-Encoding: \r\n"),
                malformed("Transfer-Encoding other than chunked"),
            ),
            (
                "Transfer-Encoding in HTTP/1.0",
                b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                malformed("Transfer-Encoding in an HTTP/1.0 request"),
            ),
            (
                "chunk size not hex",
                chunked("xyz\r\n"),
                malformed("chunk size is not hexadecimal"),
            ),
            (
                "chunk size missing",
                chunked(";a=b\r\n"),
                malformed("chunk size is not hexadecimal"),
            ),
            (
                "chunk size negative",
                chunked("-1\r\n"),
                malformed("chunk size is not hexadecimal"),
            ),
            (
                "garbage after chunk size",
                chunked("5 x\r\n"),
                malformed("invalid byte after chunk size"),
            ),
            (
                "control byte in chunk extension",
                chunked("5;a\x01\r\n"),
                malformed("invalid chunk extension"),
            ),
            (
                "chunk size overflows",
                chunked("10000000000000000\r\n"),
                malformed("chunk size overflows"),
            ),
            (
                "chunk size line with a bare LF",
                chunked("5\nhello\r\n"),
                malformed("line in chunked body not ended by CRLF"),
            ),
            (
                "chunk size line with a bare CR",
                chunked("5\r\r\n"),
                malformed("invalid byte after chunk size"),
            ),
            (
                "chunk size line too long",
                chunked(&format!("5;{}\r\n", "a".repeat(CHUNK_SIZE_LINE_BYTES_MAX))),
                malformed("chunk size line too long"),
            ),
            (
                "chunk data longer than its size",
                chunked("2\r\nabc\r\n"),
                malformed("chunk data not followed by CRLF"),
            ),
            (
                "chunk data ended by a bare LF",
                chunked("2\r\nab\n0\r\n\r\n"),
                malformed("chunk data not followed by CRLF"),
            ),
            (
                "trailer without colon",
                chunked("0\r\nX-Trailer\r\n\r\n"),
                malformed("trailer line without a colon"),
            ),
            (
                "trailer with empty name",
                chunked("0\r\n: v\r\n\r\n"),
                malformed("invalid trailer name"),
            ),
            (
                "trailer folded",
                chunked("0\r\n  A: v\r\n\r\n"),
                malformed("invalid trailer name"),
            ),
            (
                "trailer with a control byte",
                chunked("0\r\nA: \x01\r\n\r\n"),
                malformed("invalid trailer value"),
            ),
            (
                "trailer with a bare LF",
                chunked("0\r\nA: b\n\r\n"),
                malformed("line in chunked body not ended by CRLF"),
            ),
            (
                "trailer section too large",
                chunked(&format!(
                    "0\r\nA: {}\r\nB: {}\r\n\r\n",
                    "a".repeat(8000),
                    "b".repeat(8400)
                )),
                ParseError::HeadTooLarge,
            ),
            (
                "body too large by Content-Length, before any body byte",
                post(&format!(
                    "Content-Length: {}\r\n",
                    REQUEST_BODY_BYTES_MAX + 1
                )),
                ParseError::BodyTooLarge,
            ),
            (
                "body too large by chunk size, before the chunk data",
                chunked(&format!("{:x}\r\n", REQUEST_BODY_BYTES_MAX + 1)),
                ParseError::BodyTooLarge,
            ),
            (
                "body too large by the sum of chunks",
                chunked(&format!(
                    "{:x}\r\n{}\r\n1\r\n",
                    REQUEST_BODY_BYTES_MAX,
                    "a".repeat(REQUEST_BODY_BYTES_MAX)
                )),
                ParseError::BodyTooLarge,
            ),
            (
                "error in the second pipelined request",
                b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nContent-Length: x\r\n\r\n".to_vec(),
                not_a_number,
            ),
        ]
    }

    #[test]
    fn invalid_requests_give_their_error_however_split() {
        // Every mismatch is collected, so that one run shows the whole table's state.
        let mut mismatches = Vec::new();
        for (name, input, expected) in invalid_cases() {
            let mut check = |how: String, outcome: Result<(Vec<Seen>, usize), ParseError>| {
                if outcome.as_ref().err() != Some(&expected) {
                    mismatches.push(format!("{name}, {how}: {outcome:?}, expected {expected:?}"));
                }
            };
            check("whole".to_string(), feed_whole(&input));
            check("byte by byte".to_string(), feed_byte_by_byte(&input));
            if input.len() <= 1024 {
                for split_at in 0..=input.len() {
                    check(format!("split at {split_at}"), feed(&input, [split_at]));
                }
            }
        }
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }

    #[test]
    fn head_of_exactly_the_limit_is_accepted() {
        let exact_head = head_with_header_value_bytes(0).len();
        let input = head_with_header_value_bytes(REQUEST_HEAD_BYTES_MAX - exact_head);
        assert_eq!(input.len(), REQUEST_HEAD_BYTES_MAX);
        let (requests, leftover_bytes) = feed_whole(&input).expect("a head of the limit parses");
        assert_eq!(requests.len(), 1);
        assert_eq!(leftover_bytes, 0);
    }

    #[test]
    fn body_too_large_by_content_length_is_reported_before_the_body() {
        let mut buffer = BytesMut::from(
            format!(
                "PUT /q HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                REQUEST_BODY_BYTES_MAX + 1
            )
            .as_bytes(),
        );
        assert_eq!(
            parser().parse(&mut buffer).err(),
            Some(ParseError::BodyTooLarge)
        );
    }

    #[test]
    fn body_of_exactly_the_limit_is_accepted() {
        let mut parser = Parser::new(REQUEST_HEAD_BYTES_MAX, REQUEST_HEADERS_MAX, 10);
        let mut buffer = BytesMut::from(
            &b"PUT /q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
              6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n"[..],
        );
        let Ok(Progress::Complete(request)) = parser.parse(&mut buffer) else {
            panic!("a body of the limit parses");
        };
        assert_eq!(&request.body[..], b"abcdefghij");
        let mut buffer =
            BytesMut::from(&b"PUT /q HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789"[..]);
        let Ok(Progress::Complete(request)) = parser.parse(&mut buffer) else {
            panic!("a body of the limit parses");
        };
        assert_eq!(&request.body[..], b"0123456789");
    }

    #[test]
    fn chunked_body_over_the_limit_is_reported_at_the_chunk_size() {
        let mut parser = Parser::new(REQUEST_HEAD_BYTES_MAX, REQUEST_HEADERS_MAX, 10);
        let mut buffer = BytesMut::from(
            &b"PUT /q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n"[..],
        );
        assert_eq!(
            parser.parse(&mut buffer).err(),
            Some(ParseError::BodyTooLarge)
        );
    }

    #[test]
    fn a_thousand_pipelined_requests_come_out_in_order() {
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for index in 0..1000 {
            let target = format!("/queue/messages?request={index}");
            match index % 3 {
                0 => {
                    input.extend_from_slice(format!("GET {target} HTTP/1.1\r\n\r\n").as_bytes());
                    expected.push(seen(Method::Get, &target, 1, &[], b"", true));
                }
                1 => {
                    let body = format!("body {index}");
                    let length = body.len().to_string();
                    input.extend_from_slice(
                        format!("POST {target} HTTP/1.1\r\nContent-Length: {length}\r\n\r\n{body}")
                            .as_bytes(),
                    );
                    expected.push(seen(
                        Method::Post,
                        &target,
                        1,
                        &[("Content-Length", &length)],
                        body.as_bytes(),
                        true,
                    ));
                }
                _ => {
                    input.extend_from_slice(
                        format!(
                            "PUT {target} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
                             3\r\nabc\r\n0\r\n\r\n"
                        )
                        .as_bytes(),
                    );
                    expected.push(seen(
                        Method::Put,
                        &target,
                        1,
                        &[("Transfer-Encoding", "chunked")],
                        b"abc",
                        true,
                    ));
                }
            }
        }
        let (requests, leftover_bytes) = feed_whole(&input).expect("valid requests");
        assert_eq!(requests, expected);
        assert_eq!(leftover_bytes, 0);
    }

    fn next_progress(parser: &mut Parser, buffer: &mut BytesMut) -> Progress {
        parser.parse(buffer).expect("a valid request")
    }

    fn send_continue(progress: Progress) -> Option<bool> {
        match progress {
            Progress::NeedMore { send_continue } => Some(send_continue),
            Progress::Complete(_) => None,
        }
    }

    #[test]
    fn continue_is_signalled_once_when_the_body_is_missing() {
        let mut parser = parser();
        let mut buffer = BytesMut::from(
            &b"PUT /q HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 4\r\n\r\n"[..],
        );
        assert_eq!(
            send_continue(next_progress(&mut parser, &mut buffer)),
            Some(true)
        );
        assert_eq!(
            send_continue(next_progress(&mut parser, &mut buffer)),
            Some(false)
        );
        buffer.extend_from_slice(b"ab");
        assert_eq!(
            send_continue(next_progress(&mut parser, &mut buffer)),
            Some(false)
        );
        buffer.extend_from_slice(b"cd");
        let Progress::Complete(request) = next_progress(&mut parser, &mut buffer) else {
            panic!("the body is complete");
        };
        assert_eq!(&request.body[..], b"abcd");

        // The next request on the connection gets its own signal.
        buffer.extend_from_slice(
            b"POST /q HTTP/1.1\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n\
              2\r\nab",
        );
        assert_eq!(
            send_continue(next_progress(&mut parser, &mut buffer)),
            Some(true)
        );
        buffer.extend_from_slice(b"\r\n0\r\n\r\n");
        let Progress::Complete(request) = next_progress(&mut parser, &mut buffer) else {
            panic!("the body is complete");
        };
        assert_eq!(&request.body[..], b"ab");
        assert!(buffer.is_empty());
    }

    #[test]
    fn continue_is_not_signalled_when_not_needed() {
        let cases: [(&str, &[u8]); 5] = [
            ("no Expect", b"PUT /q HTTP/1.1\r\nContent-Length: 4\r\n\r\n"),
            (
                "HTTP/1.0",
                b"PUT /q HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
            ),
            (
                "other expectation",
                b"PUT /q HTTP/1.1\r\nExpect: something\r\nContent-Length: 4\r\n\r\n",
            ),
            (
                "head still incomplete",
                b"PUT /q HTTP/1.1\r\nExpect: 100-continue\r\n",
            ),
            (
                "empty body",
                b"PUT /q HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\nGET",
            ),
        ];
        for (name, input) in cases {
            let mut parser = parser();
            let mut buffer = BytesMut::from(input);
            let mut progress = next_progress(&mut parser, &mut buffer);
            if let Progress::Complete(_) = progress {
                progress = next_progress(&mut parser, &mut buffer);
            }
            assert_eq!(send_continue(progress), Some(false), "{name}");
        }
    }

    #[test]
    fn content_length_body_is_not_copied() {
        let mut buffer = BytesMut::from(&b"PUT /q HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET"[..]);
        let body_address = buffer[buffer.len() - 6..].as_ptr();
        let Ok(Progress::Complete(request)) = parser().parse(&mut buffer) else {
            panic!("a complete request");
        };
        assert_eq!(request.body.as_ptr(), body_address);
        assert_eq!(&buffer[..], b"GET");
    }

    /// Builds one random valid request and what must come out of it.
    fn random_request(rng: &mut fastrand::Rng, index: usize) -> (Vec<u8>, Seen) {
        const METHODS: [&str; 7] = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "MERGE"];
        const VALUE_BYTES: &[u8] = b"abcXYZ019-_.:/;=\"' ,()";
        let line_end: &[u8] = if rng.u8(..) < 16 { b"\n" } else { b"\r\n" };
        let method = METHODS[rng.usize(..METHODS.len())];
        let target = format!(
            "/account/queue{index}/messages?visibilitytimeout={}",
            rng.u32(..)
        );
        let version_minor = u8::from(rng.u8(..) >= 32);
        let mut headers: Vec<(String, String)> = Vec::new();
        for header in 0..rng.usize(..10) {
            let value_bytes = rng.usize(..40);
            let mut value: String = (0..value_bytes)
                .map(|_| char::from(VALUE_BYTES[rng.usize(..VALUE_BYTES.len())]))
                .collect();
            // httparse trims whitespace around values; keep the expectation simple.
            value = value.trim().to_string();
            headers.push((format!("x-ms-meta-n{header}"), value));
        }
        let (close, keep_alive_asked) = match rng.usize(..4) {
            0 => {
                headers.push(("Connection".to_string(), "close".to_string()));
                (true, false)
            }
            1 => {
                headers.push(("connection".to_string(), "Keep-Alive, TE".to_string()));
                (false, true)
            }
            _ => (false, false),
        };
        if rng.bool() {
            headers.push(("Expect".to_string(), "100-continue".to_string()));
        }
        let body: Vec<u8> = (0..rng.usize(..3000)).map(|_| rng.u8(..)).collect();
        let chunked = version_minor == 1 && rng.bool();
        let body_framed = if chunked {
            headers.push(("Transfer-Encoding".to_string(), "chunked".to_string()));
            let mut framed = Vec::new();
            let mut at = 0;
            while at < body.len() {
                let size = rng.usize(1..=body.len() - at);
                framed.extend_from_slice(format!("{size:x}").as_bytes());
                if rng.u8(..) < 32 {
                    framed.extend_from_slice(b" ;ext=\"v\"");
                }
                framed.extend_from_slice(b"\r\n");
                framed.extend_from_slice(&body[at..at + size]);
                framed.extend_from_slice(b"\r\n");
                at += size;
            }
            framed.extend_from_slice(b"0\r\n");
            if rng.bool() {
                framed.extend_from_slice(b"X-Trailer: t\r\n");
            }
            framed.extend_from_slice(b"\r\n");
            framed
        } else if !body.is_empty() || rng.bool() {
            headers.push(("Content-Length".to_string(), body.len().to_string()));
            body.clone()
        } else {
            Vec::new()
        };
        rng.shuffle(&mut headers);

        let mut input = Vec::new();
        if rng.u8(..) < 16 {
            input.extend_from_slice(b"\r\n");
        }
        input.extend_from_slice(format!("{method} {target} HTTP/1.{version_minor}").as_bytes());
        input.extend_from_slice(line_end);
        for (name, value) in &headers {
            input.extend_from_slice(format!("{name}: {value}").as_bytes());
            input.extend_from_slice(line_end);
        }
        input.extend_from_slice(line_end);
        input.extend_from_slice(&body_framed);
        let expected = Seen {
            method: Method::from_token(method.as_bytes()),
            target,
            version_minor,
            headers,
            body,
            keep_alive: if version_minor == 1 {
                !close
            } else {
                keep_alive_asked
            },
        };
        (input, expected)
    }

    #[test]
    fn random_requests_parse_the_same_however_split() {
        for seed in 0..300 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut input = Vec::new();
            let mut expected = Vec::new();
            for index in 0..rng.usize(1..8) {
                let (request_input, request_expected) = random_request(&mut rng, index);
                input.extend_from_slice(&request_input);
                expected.push(request_expected);
            }
            let whole =
                feed_whole(&input).unwrap_or_else(|error| panic!("seed {seed}, whole: {error:?}"));
            assert_eq!(whole, (expected.clone(), 0), "seed {seed}, whole");

            let mut piece_ends: Vec<usize> = (0..rng.usize(..64))
                .map(|_| rng.usize(..=input.len()))
                .collect();
            piece_ends.sort_unstable();
            let pieces = feed(&input, piece_ends)
                .unwrap_or_else(|error| panic!("seed {seed}, in pieces: {error:?}"));
            assert_eq!(pieces, (expected.clone(), 0), "seed {seed}, in pieces");

            if seed % 10 == 0 {
                let bytes = feed_byte_by_byte(&input)
                    .unwrap_or_else(|error| panic!("seed {seed}, byte by byte: {error:?}"));
                assert_eq!(bytes, (expected, 0), "seed {seed}, byte by byte");
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        const BYTES: &[u8] =
            b"GET / HTTP/1.1\r\n\r\n:;0123456789abcdefABCDEF chunked Content-Length";
        for seed in 0..2000 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut input = b"POST / HTTP/1.1\r\n".to_vec();
            if rng.bool() {
                input.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            }
            for _ in 0..rng.usize(..200) {
                input.push(match rng.u8(..8) {
                    0 => rng.u8(..),
                    _ => BYTES[rng.usize(..BYTES.len())],
                });
            }
            let (whole_requests, whole_outcome) = feed_outcome(&input, []);
            let split_at = rng.usize(..=input.len());
            let (split_requests, split_outcome) = feed_outcome(&input, [split_at]);
            // Garbage in an incomplete head may be noticed only once more bytes arrive, so an
            // error on one side may be a wait on the other; what came out before must agree.
            assert_eq!(whole_requests, split_requests, "seed {seed}");
            match (whole_outcome, split_outcome) {
                (Err(whole_error), Err(split_error)) => {
                    assert_eq!(whole_error, split_error, "seed {seed}")
                }
                (Ok(whole_leftover_bytes), Ok(split_leftover_bytes)) => {
                    assert_eq!(whole_leftover_bytes, split_leftover_bytes, "seed {seed}")
                }
                (Err(_), Ok(leftover_bytes)) | (Ok(leftover_bytes), Err(_)) => {
                    assert!(leftover_bytes > 0, "seed {seed}")
                }
            }
        }
    }
}
