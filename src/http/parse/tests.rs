//! Tests of the HTTP/1.1 request parser (`http::parse`): splits, pipelining, bodies, limits and
//! malformed input.

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
    let mut cases = vec![
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
            seen(
                Method::Put,
                "/account/queue",
                1,
                &[("content-length", "0")],
                b"",
                true,
            ),
        ),
        (
            "Content-Length repeated with the same value, and as a list",
            b"POST /q HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\nabc".to_vec(),
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
            seen(
                Method::Put,
                "/q",
                1,
                &[("Transfer-Encoding", "Chunked")],
                b"",
                true,
            ),
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
            seen(
                Method::Get,
                "/q",
                0,
                &[("Connection", "Keep-Alive")],
                b"",
                true,
            ),
        ),
        (
            "HTTP/1.1 with Connection: close",
            b"DELETE /q HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec(),
            seen(
                Method::Delete,
                "/q",
                1,
                &[("Connection", "close")],
                b"",
                false,
            ),
        ),
        (
            "close among other connection options",
            b"GET /q HTTP/1.1\r\nConnection: Upgrade ,  CLOSE\r\n\r\n".to_vec(),
            seen(
                Method::Get,
                "/q",
                1,
                &[("Connection", "Upgrade ,  CLOSE")],
                b"",
                false,
            ),
        ),
        (
            "HEAD",
            b"HEAD /account/queue?comp=metadata HTTP/1.1\r\n\r\n".to_vec(),
            seen(
                Method::Head,
                "/account/queue?comp=metadata",
                1,
                &[],
                b"",
                true,
            ),
        ),
        (
            "unknown method",
            b"PATCH /q HTTP/1.1\r\n\r\n".to_vec(),
            seen(Method::Other, "/q", 1, &[], b"", true),
        ),
        (
            "OPTIONS",
            b"OPTIONS /q HTTP/1.1\r\nOrigin: http://a\r\n\r\n".to_vec(),
            seen(
                Method::Options,
                "/q",
                1,
                &[("Origin", "http://a")],
                b"",
                true,
            ),
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
    const BYTES: &[u8] = b"GET / HTTP/1.1\r\n\r\n:;0123456789abcdefABCDEF chunked Content-Length";
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
