//! `Request`: one parsed HTTP request, owning its head and body as `Bytes` cut from the
//! connection's read buffer, with headers kept as offsets into the head (no per-header allocation).

use bytes::Bytes;
use smallvec::SmallVec;

/// Header spans kept inside `Request` before they spill to the heap: the SDKs send 8 to 14
/// headers, so a request's spans cost no allocation.
pub const HEADERS_INLINE: usize = 16;

/// The `(name, value)` spans of a request's headers.
pub type HeaderSpans = SmallVec<[(Span, Span); HEADERS_INLINE]>;

/// The request headers azq reads on every request, found in one pass over the headers when the
/// request is made (`Request::known`), rather than by a scan of every header per lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnownHeader {
    /// `Authorization`: SharedKey, SharedKeyLite or a bearer token.
    Authorization,
    /// `x-ms-date`: the request's time for SharedKey.
    XMsDate,
    /// `Date`: the request's time when `x-ms-date` is absent.
    Date,
    /// `Host`: routing (host-style accounts) and the authority of answers' URLs.
    Host,
    /// `Origin`: CORS.
    Origin,
    /// `x-ms-version`: echoed in the answer.
    XMsVersion,
    /// `x-ms-client-request-id`: echoed in the answer.
    XMsClientRequestId,
}

impl KnownHeader {
    /// Every known header, in slot order.
    const ALL: [KnownHeader; 7] = [
        KnownHeader::Authorization,
        KnownHeader::XMsDate,
        KnownHeader::Date,
        KnownHeader::Host,
        KnownHeader::Origin,
        KnownHeader::XMsVersion,
        KnownHeader::XMsClientRequestId,
    ];

    /// The header's name, lowercase.
    pub fn name(self) -> &'static str {
        match self {
            KnownHeader::Authorization => "authorization",
            KnownHeader::XMsDate => "x-ms-date",
            KnownHeader::Date => "date",
            KnownHeader::Host => "host",
            KnownHeader::Origin => "origin",
            KnownHeader::XMsVersion => "x-ms-version",
            KnownHeader::XMsClientRequestId => "x-ms-client-request-id",
        }
    }

    /// The known header called `name` (ASCII case-insensitive), if it is one.
    fn of(name: &[u8]) -> Option<KnownHeader> {
        // The length first: most headers are told apart without comparing a byte.
        let candidates: &[KnownHeader] = match name.len() {
            4 => &[KnownHeader::Date, KnownHeader::Host],
            6 => &[KnownHeader::Origin],
            9 => &[KnownHeader::XMsDate],
            12 => &[KnownHeader::XMsVersion],
            13 => &[KnownHeader::Authorization],
            22 => &[KnownHeader::XMsClientRequestId],
            _ => return None,
        };
        candidates
            .iter()
            .copied()
            .find(|known| eq_lowercase(name, known.name().as_bytes()))
    }
}

/// `name.eq_ignore_ascii_case(lowercase)` for a `lowercase` name, as a branch-free fold over
/// every byte, which LLVM unrolls and vectorises for the lengths `KnownHeader::of` matches on
/// (`eq_ignore_ascii_case` stops at the first difference: a loop of a byte per turn, about 850
/// instructions per request for the known-header pass).
#[inline]
fn eq_lowercase(name: &[u8], lowercase: &[u8]) -> bool {
    name.len() == lowercase.len()
        && name
            .iter()
            .zip(lowercase)
            .fold(0u8, |differ, (&byte, &lower)| {
                differ | (byte.to_ascii_lowercase() ^ lower)
            })
            == 0
}

/// Where each known header is among a request's headers: its index plus one, 0 when absent
/// (the first of repeated headers, as `Request::header` finds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KnownHeaders([u8; KnownHeader::ALL.len()]);

impl KnownHeaders {
    /// Finds the known headers among `names`, in the order received. Headers past the 255th are
    /// not indexed (`REQUEST_HEADERS_MAX` is far below), and are then looked up by a scan.
    pub fn find<'n>(names: impl Iterator<Item = &'n [u8]>) -> KnownHeaders {
        let mut known = KnownHeaders::default();
        for (index, name) in names.enumerate().take(usize::from(u8::MAX)) {
            if let Some(header) = KnownHeader::of(name) {
                let slot = &mut known.0[header as usize];
                if *slot == 0 {
                    *slot = index as u8 + 1;
                }
            }
        }
        known
    }
}

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
    pub(super) headers: HeaderSpans,
    /// The body, de-chunked if it was sent chunked; empty when there is none.
    pub body: Bytes,
    /// Whether the connection stays open after this request (HTTP/1.1 default, `Connection`
    /// header, HTTP/1.0 `keep-alive`).
    pub keep_alive: bool,
    /// Where the headers azq reads on every request are in `headers`. Both are made together
    /// (by the parser, or `Request::build`) and read through `headers()` and `known()`, so
    /// the slots always describe the headers.
    pub(super) known: KnownHeaders,
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
        let known = KnownHeaders::find(headers.iter().map(|(name, _)| *name));
        Some(Request {
            head: Bytes::from(head),
            method: Method::from_token(method),
            target: target_span,
            version_minor: 1,
            headers: header_spans,
            body: Bytes::copy_from_slice(body),
            keep_alive: true,
            known,
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

    /// The first header `header` (found when the request was made: no scan of the headers).
    pub fn known(&self, header: KnownHeader) -> Option<&[u8]> {
        match self.known.0[header as usize] {
            0 if self.headers.len() > usize::from(u8::MAX) => self.header(header.name()),
            0 => None,
            slot => {
                let (_, value) = self.headers[usize::from(slot) - 1];
                Some(value.slice(&self.head))
            }
        }
    }

    /// `known`, if the value is valid UTF-8.
    pub fn known_str(&self, header: KnownHeader) -> Option<&str> {
        self.known(header)
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    /// The first header named `name`, if present and valid UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name)
            .and_then(|value| std::str::from_utf8(value).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `eq_lowercase` answers as `eq_ignore_ascii_case` (the naive oracle) for every known
    /// name against names that differ from it in each position by each byte value.
    #[test]
    fn lowercase_comparison_agrees_with_eq_ignore_ascii_case() {
        for known in KnownHeader::ALL {
            let lowercase = known.name().as_bytes();
            for at in 0..lowercase.len() {
                for byte in 0..=u8::MAX {
                    let mut name = lowercase.to_vec();
                    name[at] = byte;
                    assert_eq!(
                        eq_lowercase(&name, lowercase),
                        name.eq_ignore_ascii_case(lowercase),
                        "{known:?} with {byte} at {at}"
                    );
                }
            }
            let upper = lowercase.to_ascii_uppercase();
            assert!(eq_lowercase(&upper, lowercase));
            assert!(!eq_lowercase(&upper[1..], lowercase));
        }
    }

    /// `known` finds what the scan of every header (`header`) finds, the naive oracle: any
    /// case, repeats (the first wins), absent headers, names that share a known one's length.
    #[test]
    fn known_headers_agree_with_the_scan() {
        let header_lists: &[&[(&str, &str)]] = &[
            &[],
            &[("Host", "h"), ("hosT", "second"), ("X-MS-DATE", "d")],
            &[
                ("Authorization", "SharedKey a:b"),
                ("x-ms-version", "2026-04-06"),
                ("Date", "old"),
                ("x-ms-date", "new"),
                ("X-Ms-Client-Request-Id", "id"),
                ("Origin", "https://example.com"),
                ("Content-Length", "0"),
            ],
            &[
                ("Hosts", "no"),
                ("dats", "no"),
                ("x-ms-datf", "no"),
                ("orig", "no"),
            ],
        ];
        for headers in header_lists {
            let request = Request::from_parts("GET", "/a/q", headers, Bytes::new());
            for header in KnownHeader::ALL {
                assert_eq!(
                    request.known(header),
                    request.header(header.name()),
                    "{header:?} in {headers:?}"
                );
            }
        }
        // Past the 255 headers the index holds, a known header is still found, by a scan.
        let mut many: Vec<(String, String)> = (0..300)
            .map(|index| (format!("x-{index}"), String::new()))
            .collect();
        many.push(("Host".to_string(), "late".to_string()));
        let many: Vec<(&str, &str)> = many
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let request = Request::from_parts("GET", "/a/q", &many, Bytes::new());
        assert_eq!(request.known(KnownHeader::Host), Some(&b"late"[..]));
        assert_eq!(request.known(KnownHeader::Origin), None);
    }
}
