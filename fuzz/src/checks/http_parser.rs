//! `http_parser`: arbitrary bytes through `http::Parser`, fed whole, in fuzzer-chosen pieces and
//! (when short) byte by byte. Properties: no panic; every way of feeding yields the same requests
//! and the same end (see `assert_same_outcome` for the one allowed difference); a complete
//! request's head, header count and body stay within the parser's limits; a `Content-Length`
//! body has exactly that length; `send_continue` comes at most once per request.
//!
//! Input: one byte choosing the limits (the server's, or small ones so that every limit is
//! reachable in a short input), a count of split points and two bytes per point, then the
//! stream itself.

use azq::http::{Method, ParseError, Parser, Progress, Request};
use azq::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX};
use bytes::BytesMut;

use super::input::Input;

/// Longest stream also fed one byte per call: that is one `parse` per byte, quadratic in the
/// worst case of a growing head, so it is kept to inputs where it stays cheap.
const BYTE_BY_BYTE_BYTES_MAX: usize = 4096;
/// Most split points one input asks for.
const SPLITS_MAX: u8 = 32;

/// The limits one parser runs with.
#[derive(Clone, Copy, Debug)]
struct Limits {
    head_bytes_max: usize,
    headers_max: usize,
    body_bytes_max: usize,
}

impl Limits {
    fn decode(input: &mut Input<'_>) -> Limits {
        if input.bool() {
            Limits {
                head_bytes_max: REQUEST_HEAD_BYTES_MAX,
                headers_max: REQUEST_HEADERS_MAX,
                body_bytes_max: REQUEST_BODY_BYTES_MAX,
            }
        } else {
            Limits {
                head_bytes_max: input.below(512),
                headers_max: input.below(16),
                body_bytes_max: input.below(2048),
            }
        }
    }

    fn parser(self) -> Parser {
        Parser::new(self.head_bytes_max, self.headers_max, self.body_bytes_max)
    }
}

/// A request as the check compares it: owned, readable in a failure message.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    method: Method,
    target: Vec<u8>,
    version_minor: u8,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    body: Vec<u8>,
    keep_alive: bool,
}

/// What feeding a stream produced: the requests, then the bytes left in the buffer or the error
/// that stopped the parser (after which a connection is closed, so nothing more is parsed).
type Outcome = (Vec<Seen>, Result<usize, ParseError>);

/// The `http_parser` property on one input (see the module doc); panics when it breaks.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let limits = Limits::decode(&mut input);
    let split_count = input.u8() % (SPLITS_MAX + 1);
    let raw_splits: Vec<u16> = (0..split_count).map(|_| input.u16()).collect();
    let stream = input.rest();

    let mut piece_ends: Vec<usize> = raw_splits
        .iter()
        .map(|&split| usize::from(split) % (stream.len() + 1))
        .collect();
    piece_ends.sort_unstable();

    let whole = feed(limits, stream, &[]);
    let pieces = feed(limits, stream, &piece_ends);
    assert_same_outcome(&whole, &pieces, "whole vs pieces");
    if stream.len() <= BYTE_BY_BYTE_BYTES_MAX {
        let byte_ends: Vec<usize> = (1..stream.len()).collect();
        let bytes = feed(limits, stream, &byte_ends);
        assert_same_outcome(&whole, &bytes, "whole vs byte by byte");
    }
}

/// Feeds `stream` to a fresh parser in pieces ending at `piece_ends` (sorted; the last piece
/// ends at the stream's end), calling `parse` after each piece until it needs more, as the
/// connection loop does after each read. Checks every request as it comes out.
fn feed(limits: Limits, stream: &[u8], piece_ends: &[usize]) -> Outcome {
    let mut parser = limits.parser();
    let mut buffer = BytesMut::new();
    let mut requests = Vec::new();
    let mut fed_bytes = 0;
    // Whether `send_continue` was already true for the request under way.
    let mut continue_sent = false;
    for &end in piece_ends.iter().chain([&stream.len()]) {
        buffer.extend_from_slice(&stream[fed_bytes..end]);
        fed_bytes = end;
        loop {
            match parser.parse(&mut buffer) {
                Ok(Progress::Complete(request)) => {
                    check_request(limits, &request);
                    requests.push(seen(&request));
                    continue_sent = false;
                }
                Ok(Progress::NeedMore { send_continue }) => {
                    assert!(
                        !(send_continue && continue_sent),
                        "100 Continue signalled twice for one request"
                    );
                    continue_sent |= send_continue;
                    break;
                }
                Err(error) => return (requests, Err(error)),
            }
        }
    }
    (requests, Ok(buffer.len()))
}

/// The limits and the framing of one complete request.
fn check_request(limits: Limits, request: &Request) {
    assert!(
        request.head.len() <= limits.head_bytes_max,
        "head of {} bytes over the limit of {}",
        request.head.len(),
        limits.head_bytes_max
    );
    assert!(request.headers().count() <= limits.headers_max);
    assert!(
        request.body.len() <= limits.body_bytes_max,
        "body of {} bytes over the limit of {}",
        request.body.len(),
        limits.body_bytes_max
    );
    assert!(request.version_minor <= 1);
    // Every accessor must stay inside the head it slices.
    let _ = (request.target(), request.path(), request.query());
    for (name, _value) in request.headers() {
        assert!(!name.is_empty());
    }
    // The parser accepts a Content-Length only when every value in every such header is the
    // same number, and then takes exactly that many bytes as the body.
    if let Some(value) = request.header("content-length") {
        let first = value.split(|&byte| byte == b',').next().unwrap_or_default();
        let declared: usize = std::str::from_utf8(first.trim_ascii())
            .ok()
            .and_then(|text| text.parse().ok())
            .expect("an accepted Content-Length is a number");
        assert_eq!(
            request.body.len(),
            declared,
            "body length vs Content-Length"
        );
    }
}

fn seen(request: &Request) -> Seen {
    Seen {
        method: request.method,
        target: request.target().to_vec(),
        version_minor: request.version_minor,
        headers: request
            .headers()
            .map(|(name, value)| (name.to_vec(), value.to_vec()))
            .collect(),
        body: request.body.to_vec(),
        keep_alive: request.keep_alive,
    }
}

/// However the bytes were split, the same requests come out, and both ends agree. `whole` is
/// the stream fed at once, `split` the same stream in pieces. The one allowed difference:
/// garbage in an incomplete head is found only when httparse runs, which happens once the
/// head's blank line arrives or the buffer has doubled since its last look, so the pieces may
/// still be waiting (with bytes left over) where the whole stream, which httparse saw at once,
/// has failed. Never the other way round: httparse finds no error in a prefix that it does not
/// find in the whole.
fn assert_same_outcome(whole: &Outcome, split: &Outcome, what: &str) {
    assert_eq!(whole.0, split.0, "{what}: requests differ");
    match (&whole.1, &split.1) {
        (Err(whole_error), Err(split_error)) => {
            assert_eq!(whole_error, split_error, "{what}: errors differ")
        }
        (Ok(whole_leftover), Ok(split_leftover)) => {
            assert_eq!(whole_leftover, split_leftover, "{what}: leftover bytes differ")
        }
        (Err(_), Ok(leftover)) => assert!(
            *leftover > 0,
            "{what}: the whole stream failed, the pieces have nothing pending: {whole:?} vs {split:?}"
        ),
        (Ok(_), Err(_)) => panic!(
            "{what}: the pieces failed where the whole stream did not: {whole:?} vs {split:?}"
        ),
    }
}
