//! Responses parsed from a buffer without I/O: the status, the headers the scenarios need, and
//! the body's framing (Content-Length or chunked, decoded as its bytes arrive).

use std::ops::Range;

/// Headers read from one response; Azure sends about a dozen.
const RESPONSE_HEADERS_MAX: usize = 48;

/// Why a response could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseError {
    /// Not HTTP/1.x, or broken framing.
    Malformed(&'static str),
    /// Larger than the reader allows.
    TooLarge,
}

/// How a response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes follow the head (0 when absent, and for a 1xx, 204 or 304).
    Length(usize),
    /// `Transfer-Encoding: chunked` (Azurite answers this way).
    Chunked,
}

/// A parsed response head. Ranges index the buffer it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// Bytes of the status line and headers, up to and including the blank line.
    pub head_bytes: usize,
    pub framing: Framing,
    /// `x-ms-error-code`.
    pub error_code: Option<Range<usize>>,
    /// `x-ms-popreceipt` (Update Message).
    pub pop_receipt: Option<Range<usize>>,
    /// `x-ms-approximate-messages-count` (Get Queue Metadata).
    pub approximate_messages_count: Option<u64>,
    /// `Connection: close`: the server will not read another request.
    pub close: bool,
}

/// Parses a response head from the start of `buffer`. `Ok(None)` when more bytes are needed.
/// The load generator sends no HEAD requests, so the headers alone say whether a body follows.
pub fn parse_response_head(buffer: &[u8]) -> Result<Option<ResponseHead>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; RESPONSE_HEADERS_MAX];
    let mut response = httparse::Response::new(&mut headers);
    let head_bytes = match response.parse(buffer) {
        Ok(httparse::Status::Complete(bytes)) => bytes,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooLarge),
        Err(_) => return Err(ResponseError::Malformed("not an HTTP/1.x response head")),
    };
    let status = response.code.ok_or(ResponseError::Malformed("no status"))?;
    let mut parsed = ResponseHead {
        status,
        head_bytes,
        framing: Framing::Length(0),
        error_code: None,
        pop_receipt: None,
        approximate_messages_count: None,
        close: false,
    };
    let base = buffer.as_ptr() as usize;
    // httparse hands out subslices of `buffer`; their offsets let the caller keep ranges
    // instead of borrowing.
    let range_of = |value: &[u8]| {
        let start = value.as_ptr() as usize - base;
        start..start + value.len()
    };
    let mut content_length = None;
    let mut chunked = false;
    for header in response.headers.iter() {
        let name = header.name;
        // httparse leaves optional whitespace after the colon out of values but not before a
        // line end on every version; trim both sides.
        let value = header.value.trim_ascii();
        if name.eq_ignore_ascii_case("content-length") {
            let length = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse::<usize>().ok())
                .ok_or(ResponseError::Malformed("bad Content-Length"))?;
            content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .split(|&byte| byte == b',')
                .any(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("x-ms-error-code") {
            parsed.error_code = Some(range_of(value));
        } else if name.eq_ignore_ascii_case("x-ms-popreceipt") {
            parsed.pop_receipt = Some(range_of(value));
        } else if name.eq_ignore_ascii_case("x-ms-approximate-messages-count") {
            parsed.approximate_messages_count = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse().ok());
        } else if name.eq_ignore_ascii_case("connection") {
            parsed.close = value.eq_ignore_ascii_case(b"close");
        }
    }
    parsed.framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked
    } else {
        Framing::Length(content_length.unwrap_or(0))
    };
    Ok(Some(parsed))
}

/// Decodes a chunked body as its bytes arrive. Each call starts where the last one stopped, at
/// the first chunk not yet decoded, so a large answer read in many pieces is decoded once, not
/// again from its first byte after every read.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    /// Bytes of the chunked body already decoded: whole chunks with their size lines.
    consumed_bytes: usize,
}

impl ChunkedDecoder {
    /// `buffer` holds the chunked body from its first byte (the bytes earlier calls decoded are
    /// not read again); decoded data is appended to `body`, which must hold what earlier calls
    /// appended. Returns the bytes the whole chunked body occupies in `buffer` once its last
    /// chunk and trailer have arrived, or `Ok(None)` when more bytes are needed.
    /// `body_bytes_max` bounds the decoded size.
    pub fn decode(
        &mut self,
        buffer: &[u8],
        body: &mut Vec<u8>,
        body_bytes_max: usize,
    ) -> Result<Option<usize>, ResponseError> {
        loop {
            let at = self.consumed_bytes;
            let Some(line_end) = find(&buffer[at..], b"\r\n") else {
                return Ok(None);
            };
            let line = &buffer[at..at + line_end];
            // Chunk extensions (`;name=value`) are allowed and ignored.
            let size_text = line.split(|&byte| byte == b';').next().unwrap_or(line);
            let size_text = std::str::from_utf8(size_text.trim_ascii())
                .map_err(|_| ResponseError::Malformed("bad chunk size"))?;
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| ResponseError::Malformed("bad chunk size"))?;
            let data_start = at + line_end + 2;
            if size == 0 {
                // Trailer fields, then an empty line; read again whole until they are complete.
                let mut end = data_start;
                loop {
                    let Some(line_end) = find(&buffer[end..], b"\r\n") else {
                        return Ok(None);
                    };
                    end += line_end + 2;
                    if line_end == 0 {
                        return Ok(Some(end));
                    }
                }
            }
            if body.len() + size > body_bytes_max {
                return Err(ResponseError::TooLarge);
            }
            if buffer.len() < data_start + size + 2 {
                return Ok(None);
            }
            if &buffer[data_start + size..data_start + size + 2] != b"\r\n" {
                return Err(ResponseError::Malformed("chunk not followed by CRLF"));
            }
            body.extend_from_slice(&buffer[data_start..data_start + size]);
            self.consumed_bytes = data_start + size + 2;
        }
    }
}

/// The position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads() {
        // azq pads Content-Length with spaces (optional whitespace is valid HTTP).
        let azq = b"HTTP/1.1 201 Created\r\nContent-Length:        3\r\nx-ms-request-id: r\r\n\r\nabcHTTP/1.1";
        let head = parse_response_head(azq).unwrap().unwrap();
        assert_eq!(head.status, 201);
        assert_eq!(head.framing, Framing::Length(3));
        assert_eq!(&azq[head.head_bytes..head.head_bytes + 3], b"abc");

        let error = b"HTTP/1.1 404 The specified message does not exist.\r\n\
                      x-ms-error-code: MessageNotFound\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let head = parse_response_head(error).unwrap().unwrap();
        assert_eq!(head.status, 404);
        assert_eq!(&error[head.error_code.clone().unwrap()], b"MessageNotFound");
        assert!(head.close);

        let update = b"HTTP/1.1 204 No Content\r\nx-ms-popreceipt: AgAA+/w=\r\n\r\n";
        let head = parse_response_head(update).unwrap().unwrap();
        assert_eq!(&update[head.pop_receipt.clone().unwrap()], b"AgAA+/w=");
        assert_eq!(head.framing, Framing::Length(0));

        let metadata = b"HTTP/1.1 200 OK\r\nx-ms-approximate-messages-count: 10000\r\nContent-Length: 12\r\n\r\n";
        let head = parse_response_head(metadata).unwrap().unwrap();
        assert_eq!(head.approximate_messages_count, Some(10_000));
        assert_eq!(head.framing, Framing::Length(12));

        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head = parse_response_head(chunked).unwrap().unwrap();
        assert_eq!(head.framing, Framing::Chunked);

        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nContent-"),
            Ok(None)
        );
        assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
    }

    /// Decodes `chunked` fed in two pieces cut at `cut`, the way a connection's reads deliver it.
    fn decode_in_two_reads(chunked: &[u8], cut: usize) -> Result<(Vec<u8>, usize), ResponseError> {
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        if let Some(bytes) = decoder.decode(&chunked[..cut], &mut body, 100)? {
            return Ok((body, bytes));
        }
        let bytes = decoder
            .decode(chunked, &mut body, 100)?
            .expect("the whole body is there");
        Ok((body, bytes))
    }

    #[test]
    fn chunked_bodies() {
        let complete = b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n\r\nHTTP";
        let body_bytes = complete.len() - 4;
        for cut in 0..=complete.len() {
            assert_eq!(
                decode_in_two_reads(complete, cut),
                Ok((b"abcdefg".to_vec(), body_bytes)),
                "{cut}"
            );
        }
        for cut in 0..body_bytes {
            let mut body = Vec::new();
            assert_eq!(
                ChunkedDecoder::default().decode(&complete[..cut], &mut body, 100),
                Ok(None),
                "{cut}"
            );
        }
        let trailer = b"1\r\na\r\n0\r\nx-trailer: 1\r\n\r\n";
        for cut in 0..=trailer.len() {
            assert_eq!(
                decode_in_two_reads(trailer, cut),
                Ok((b"a".to_vec(), trailer.len())),
                "{cut}"
            );
        }
        let mut body = Vec::new();
        let mut decode = |bytes: &[u8]| ChunkedDecoder::default().decode(bytes, &mut body, 100);
        assert!(decode(b"zz\r\n").is_err());
        assert!(decode(b"2\r\nabX\r\n").is_err());
        assert_eq!(decode(b"ff\r\n"), Err(ResponseError::TooLarge));
    }

    /// Regression: the decoder used to start from the body's first byte after every read, so a
    /// body of n chunks arriving in n reads cost O(n^2). Decoded chunks are never read again:
    /// overwriting them between reads changes nothing.
    #[test]
    fn chunked_decoding_resumes_after_the_chunks_already_decoded() {
        let mut buffer = b"3\r\nabc\r\n2\r\nde\r\n4\r\nfg".to_vec();
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        assert_eq!(decoder.decode(&buffer, &mut body, 100), Ok(None));
        assert_eq!(body, b"abcde");
        let decoded_bytes = b"3\r\nabc\r\n2\r\nde\r\n".len();
        buffer[..decoded_bytes].fill(b'!');
        buffer.extend_from_slice(b"hi\r\n0\r\n\r\n");
        assert_eq!(
            decoder.decode(&buffer, &mut body, 100),
            Ok(Some(buffer.len()))
        );
        assert_eq!(body, b"abcdefghi");
    }
}
