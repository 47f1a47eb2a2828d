//! `Request`: one parsed HTTP request, owning its head and body as `Bytes` cut from the
//! connection's read buffer, with headers kept as offsets into the head (no per-header allocation).

use bytes::Bytes;
use smallvec::SmallVec;

/// Header spans kept inside `Request` before they spill to the heap: the SDKs send 8 to 14
/// headers, so a request's spans cost no allocation.
pub const HEADERS_INLINE: usize = 16;

/// The `(name, value)` spans of a request's headers.
pub type HeaderSpans = SmallVec<[(Span, Span); HEADERS_INLINE]>;

/// The request methods azq distinguishes; anything else is `Other` (answered 405 by the router).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Every read: List Queues, properties, stats, metadata, ACL, Get and Peek Messages.
    Get,
    /// Get Queue Metadata or ACL without a body; 405 elsewhere.
    Head,
    /// Create Queue, every Set operation and Update Message.
    Put,
    /// Put Message, and nothing else.
    Post,
    /// Delete Queue, Delete Message and Clear Messages.
    Delete,
    /// A CORS preflight, answered from the CORS rules without authentication.
    Options,
    /// Any other token (PATCH, lowercase `get`, …): the router answers 405.
    Other,
}

impl Method {
    /// Maps a request-line method token; methods are case-sensitive in HTTP.
    pub fn from_token(token: &[u8]) -> Method {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"PUT" => Method::Put,
            b"POST" => Method::Post,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            _ => Method::Other,
        }
    }

    /// The method token as sent on the wire (used in the SharedKey string-to-sign).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Other => "OTHER",
        }
    }
}

/// A byte range `start..end` inside `Request::head`. The head is at most
/// `limits::REQUEST_HEAD_BYTES_MAX` (< 64 KiB) bytes, so u16 offsets suffice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Offset of the first byte in the head.
    pub start: u16,
    /// Offset one past the last byte, so `end - start` is the length.
    pub end: u16,
}

impl Span {
    fn slice(self, head: &[u8]) -> &[u8] {
        &head[self.start as usize..self.end as usize]
    }
}

/// One complete request.
#[derive(Clone, Debug)]
pub struct Request {
    /// The raw request head: request line, headers, blank line.
    pub head: Bytes,
    /// The request line's method, mapped to the ones azq routes.
    pub method: Method,
    /// The request target as sent (`/account/queue?comp=metadata`), not decoded.
    pub target: Span,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version_minor: u8,
    /// `(name, value)` spans in `head`, in the order received.
    pub headers: HeaderSpans,
    /// The body, de-chunked if it was sent chunked; empty when there is none.
    pub body: Bytes,
    /// Whether the connection stays open after this request (HTTP/1.1 default, `Connection`
    /// header, HTTP/1.0 `keep-alive`).
    pub keep_alive: bool,
}

impl Request {
    /// Assembles an HTTP/1.1 keep-alive request from its parts, laid out exactly as the parser
    /// would produce it (head bytes plus spans), for callers that build requests rather than
    /// parse them: unit tests, benchmarks, fuzz targets. The parts are taken as they are, free
    /// of the parser's restrictions (a fuzz target may hand over bytes a parser would refuse);
    /// `None` when the head would not fit `Span`'s u16 offsets.
    pub fn build(
        method: &[u8],
        target: &[u8],
        headers: &[(&[u8], &[u8])],
        body: &[u8],
    ) -> Option<Request> {
        let mut head = Vec::with_capacity(128);
        let append = |head: &mut Vec<u8>, bytes: &[u8]| -> Option<Span> {
            let start = u16::try_from(head.len()).ok()?;
            head.extend_from_slice(bytes);
            let end = u16::try_from(head.len()).ok()?;
            Some(Span { start, end })
        };
        append(&mut head, method)?;
        head.push(b' ');
        let target_span = append(&mut head, target)?;
        head.extend_from_slice(b" HTTP/1.1\r\n");
        let mut header_spans = HeaderSpans::with_capacity(headers.len());
        for (name, value) in headers {
            let name_span = append(&mut head, name)?;
            head.extend_from_slice(b": ");
            let value_span = append(&mut head, value)?;
            head.extend_from_slice(b"\r\n");
            header_spans.push((name_span, value_span));
        }
        head.extend_from_slice(b"\r\n");
        u16::try_from(head.len()).ok()?;
        Some(Request {
            head: Bytes::from(head),
            method: Method::from_token(method),
            target: target_span,
            version_minor: 1,
            headers: header_spans,
            body: Bytes::copy_from_slice(body),
            keep_alive: true,
        })
    }

    /// `build` from text parts, for tests and benchmarks whose requests are well-formed and
    /// small. Panics when the head does not fit (a bug in the caller).
    pub fn from_parts(
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Request {
        let headers: Vec<(&[u8], &[u8])> = headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
            .collect();
        let mut request = Request::build(method.as_bytes(), target.as_bytes(), &headers, b"")
            .expect("a head under 64 KiB");
        request.body = body;
        request
    }

    /// The request target as sent: path and query, percent-encoded.
    pub fn target(&self) -> &[u8] {
        self.target.slice(&self.head)
    }

    /// The path part of the target (before `?`).
    pub fn path(&self) -> &[u8] {
        let target = self.target();
        match target.iter().position(|&b| b == b'?') {
            Some(at) => &target[..at],
            None => target,
        }
    }

    /// The raw query string (after `?`, without it), empty when absent.
    pub fn query(&self) -> &[u8] {
        let target = self.target();
        match target.iter().position(|&b| b == b'?') {
            Some(at) => &target[at + 1..],
            None => b"",
        }
    }

    /// Every header as `(name, value)`, in the order received, names as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.headers
            .iter()
            .map(move |(name, value)| (name.slice(&self.head), value.slice(&self.head)))
    }

    /// The first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(header_name, _)| header_name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }

    /// The first header named `name`, if present and valid UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name)
            .and_then(|value| std::str::from_utf8(value).ok())
    }
}
