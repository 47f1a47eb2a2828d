//! `Parser`: the incremental HTTP/1.1 request parser. It takes complete requests off the front of
//! a connection's read buffer, however the bytes were split across reads, and owns every framing
//! decision: head limits, `Content-Length` and chunked bodies, keep-alive and `100 Continue`.
//!
//! httparse parses the head. The parser keeps what it learned between calls so that work stays
//! linear in the bytes received: an incomplete head is searched for its blank line only in the
//! bytes that are new, httparse runs again only when that line appears (or, to catch garbage
//! early, when the buffer has doubled), a parsed head is never parsed again while its body
//! arrives, and a chunked body is decoded as it comes in.

use super::request::{KnownHeaders, Span};
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

/// What one call to `Parser::parse` achieved. Not boxed although `Request` (with its header
/// spans inline) is large: a box would be an allocation per request, to save a copy.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
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
        let known = KnownHeaders::find(parsed.headers.iter().map(|header| header.name.as_bytes()));
        let request = Request {
            method: Method::from_token(method.as_bytes()),
            target: span(target.as_bytes()),
            version_minor,
            headers,
            head: Bytes::new(),
            body: Bytes::new(),
            keep_alive: facts.keep_alive,
            known,
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
mod tests;
