//! The bytes on the wire, without I/O: requests encoded into a reused buffer and signed with
//! azq's own SharedKey code; responses parsed from a buffer (status, the headers the scenarios
//! need, a Content-Length or chunked body); and the fields of a Get Messages XML answer.
//!
//! Hot-path requests do not allocate: a Put, Get or Peek has the same target and length for a
//! whole second, so its signature is computed once per second per queue and copied after that.
//! Update and Delete name a message and its pop receipt, so they are signed one by one. Reading
//! a Get or Peek answer costs quick-xml's stack of open element names: a few small allocations
//! per answer, however many messages it lists.

use std::ops::Range;

use azq::auth::sign_shared_key;
use azq::http::response::put_decimal;
use azq::time::{rfc1123, RFC1123_BYTES};

use crate::endpoint::{Credentials, Endpoint};

/// The `x-ms-version` sent by default: old enough for every Azurite 3.x without
/// `--skipApiVersionCheck`, and still served by Azure.
pub const API_VERSION_DEFAULT: &str = "2021-12-02";
/// Digits of the send timestamp (microseconds since the Unix epoch) at the start of each message
/// text; 16 digits last until the year 2286.
pub const TIMESTAMP_DIGITS: usize = 16;
/// Hex digits of the put mark after the timestamp, where the text has room: the run's nonce
/// (8), the logical put's token (16) and the attempt that wrote it (2).
pub const PUT_MARK_DIGITS: usize = 26;
/// Longest message ID kept from a Get answer (Azure and azq send 36-character GUIDs).
pub const MESSAGE_ID_BYTES_MAX: usize = 64;
/// Longest pop receipt kept from a Get or Update answer.
pub const POP_RECEIPT_BYTES_MAX: usize = 128;
/// Headers read from one response; Azure sends about a dozen.
const RESPONSE_HEADERS_MAX: usize = 48;
/// Length of a base64 HMAC-SHA256 signature.
const SIGNATURE_BYTES: usize = 44;

const PUT_BODY_PREFIX: &[u8] = b"<QueueMessage><MessageText>";
const PUT_BODY_SUFFIX: &[u8] = b"</MessageText></QueueMessage>";

/// The request kinds whose signature is cached for a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CachedKind {
    Put = 0,
    Get = 1,
    Peek = 2,
}
const CACHED_KINDS: usize = 3;

/// One request to encode.
#[derive(Clone, Copy, Debug)]
pub enum RequestKind<'a> {
    /// Create Queue (`PUT /q`).
    CreateQueue,
    /// Get Queue Metadata (`GET /q?comp=metadata`), for the approximate message count.
    GetMetadata,
    /// Put Message whose text starts with `sent_unix_us`, then `mark` where the text has room
    /// (else, and without a mark, the fill).
    Put {
        sent_unix_us: u64,
        mark: Option<PutMark>,
    },
    /// Get Messages (`numofmessages` and `visibilitytimeout` from the encoder's settings).
    Get,
    /// Peek Messages.
    Peek,
    /// Update Message without a body: extends the lease by the visibility timeout.
    Update {
        message_id: &'a [u8],
        pop_receipt: &'a [u8],
    },
    /// Delete Message.
    Delete {
        message_id: &'a [u8],
        pop_receipt: &'a [u8],
    },
}

/// Which logical put wrote a message, and with which attempt: a put that failed (an error
/// answer, a lost connection) may still have been stored, and its retry then stores a second
/// copy, with the same token and a later attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutMark {
    /// Random per run (per step of a stepped run): marks of other runs, other loadgens or
    /// earlier steps sharing the queues are told apart and ignored.
    pub nonce: u32,
    /// Unique per logical put within the run.
    pub token: u64,
    /// 0 for the first try, then the retry's number.
    pub attempt: u8,
}

/// Why a request could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeError(pub String);

/// What every request of a run shares.
#[derive(Clone, Debug)]
pub struct RequestSettings {
    pub queue_names: Vec<String>,
    pub message_bytes: usize,
    /// `numofmessages` of Get and Peek.
    pub batch: u32,
    /// `visibilitytimeout` of Get and Update.
    pub visibility_timeout_s: u64,
    pub api_version: String,
    /// The nonce of this run's put marks (see `PutMark`).
    pub put_mark_nonce: u32,
}

/// Encodes requests into a caller's buffer, reusing its own scratch space and signatures.
pub struct RequestEncoder {
    endpoint: Endpoint,
    credentials: Credentials,
    settings: RequestSettings,
    /// The Put body; only the timestamp digits change from one Put to the next.
    put_body: Vec<u8>,
    /// Scratch space for the request target.
    target: String,
    /// The second `date` holds, and its RFC 1123 form.
    date_unix_s: u64,
    date: [u8; RFC1123_BYTES],
    /// Indexed by `queue * CACHED_KINDS + kind`: the second a signature was made for, and it.
    signatures: Vec<Option<(u64, [u8; SIGNATURE_BYTES])>>,
}

impl RequestEncoder {
    /// An encoder for `endpoint`, signing with `credentials`.
    pub fn new(
        endpoint: Endpoint,
        credentials: Credentials,
        settings: RequestSettings,
    ) -> Result<RequestEncoder, EncodeError> {
        if settings.message_bytes < TIMESTAMP_DIGITS {
            return Err(EncodeError(format!(
                "messages must hold at least {TIMESTAMP_DIGITS} bytes for the send timestamp"
            )));
        }
        let mut put_body = Vec::with_capacity(
            PUT_BODY_PREFIX.len() + settings.message_bytes + PUT_BODY_SUFFIX.len(),
        );
        put_body.extend_from_slice(PUT_BODY_PREFIX);
        put_body.resize(PUT_BODY_PREFIX.len() + settings.message_bytes, b'x');
        put_body.extend_from_slice(PUT_BODY_SUFFIX);
        let signatures = vec![None; settings.queue_names.len() * CACHED_KINDS];
        Ok(RequestEncoder {
            endpoint,
            credentials,
            settings,
            put_body,
            target: String::with_capacity(512),
            date_unix_s: u64::MAX,
            date: [0; RFC1123_BYTES],
            signatures,
        })
    }

    /// The run's settings.
    pub fn settings(&self) -> &RequestSettings {
        &self.settings
    }

    /// Appends `kind` on `queue` to `out`, dated `now_unix_ms`.
    pub fn encode(
        &mut self,
        queue: usize,
        kind: RequestKind<'_>,
        now_unix_ms: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        use std::fmt::Write;
        let now_unix_s = now_unix_ms / 1000;
        if now_unix_s != self.date_unix_s {
            self.date_unix_s = now_unix_s;
            self.date = rfc1123(now_unix_ms);
        }
        let queue_name = &self.settings.queue_names[queue];
        self.target.clear();
        self.target.push_str(&self.endpoint.base_path);
        self.target.push('/');
        self.target.push_str(queue_name);
        // Writing to a String cannot fail.
        let _ = match kind {
            RequestKind::CreateQueue => Ok(()),
            RequestKind::GetMetadata => self.target.write_str("?comp=metadata"),
            RequestKind::Put { .. } => self.target.write_str("/messages"),
            RequestKind::Get => write!(
                self.target,
                "/messages?numofmessages={}&visibilitytimeout={}",
                self.settings.batch, self.settings.visibility_timeout_s
            ),
            RequestKind::Peek => write!(
                self.target,
                "/messages?numofmessages={}&peekonly=true",
                self.settings.batch
            ),
            RequestKind::Update {
                message_id,
                pop_receipt,
            }
            | RequestKind::Delete {
                message_id,
                pop_receipt,
            } => {
                self.target.push_str("/messages/");
                percent_encode_into(message_id, &mut self.target);
                self.target.push_str("?popreceipt=");
                percent_encode_into(pop_receipt, &mut self.target);
                if matches!(kind, RequestKind::Update { .. }) {
                    write!(
                        self.target,
                        "&visibilitytimeout={}",
                        self.settings.visibility_timeout_s
                    )
                } else {
                    Ok(())
                }
            }
        };
        if let Credentials::Sas { token } = &self.credentials {
            self.target
                .push(if self.target.contains('?') { '&' } else { '?' });
            self.target.push_str(token);
        }
        let (method, body): (&str, &[u8]) = match kind {
            RequestKind::CreateQueue | RequestKind::Update { .. } => ("PUT", b""),
            RequestKind::GetMetadata | RequestKind::Get | RequestKind::Peek => ("GET", b""),
            RequestKind::Delete { .. } => ("DELETE", b""),
            RequestKind::Put { sent_unix_us, mark } => {
                let start = PUT_BODY_PREFIX.len();
                let text = &mut self.put_body[start..start + self.settings.message_bytes];
                write_timestamp(sent_unix_us, &mut text[..TIMESTAMP_DIGITS]);
                if let Some(room) =
                    text.get_mut(TIMESTAMP_DIGITS..TIMESTAMP_DIGITS + PUT_MARK_DIGITS)
                {
                    match mark {
                        Some(mark) => write_put_mark(mark, room),
                        None => room.fill(b'x'),
                    }
                }
                ("POST", &self.put_body)
            }
        };
        let has_body = !body.is_empty();

        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.endpoint.host_header.as_bytes());
        out.extend_from_slice(b"\r\nx-ms-version: ");
        out.extend_from_slice(self.settings.api_version.as_bytes());
        out.extend_from_slice(b"\r\nx-ms-date: ");
        out.extend_from_slice(&self.date);
        if has_body {
            out.extend_from_slice(b"\r\nContent-Type: application/xml");
        }
        out.extend_from_slice(b"\r\nContent-Length: ");
        put_decimal(out, body.len() as u64);
        out.extend_from_slice(b"\r\n");
        if let Credentials::SharedKey { account, key } = &self.credentials {
            let cached_kind = match kind {
                RequestKind::Put { .. } => Some(CachedKind::Put),
                RequestKind::Get => Some(CachedKind::Get),
                RequestKind::Peek => Some(CachedKind::Peek),
                _ => None,
            };
            let slot = cached_kind.map(|cached| queue * CACHED_KINDS + cached as usize);
            let cached = slot
                .and_then(|slot| self.signatures[slot])
                .filter(|(second, _)| *second == now_unix_s)
                .map(|(_, signature)| signature);
            let signature = match cached {
                Some(signature) => signature,
                None => {
                    let date = std::str::from_utf8(&self.date).unwrap_or_default();
                    let all_headers = [
                        ("x-ms-version", self.settings.api_version.as_str()),
                        ("x-ms-date", date),
                        ("Content-Type", "application/xml"),
                    ];
                    let headers = if has_body {
                        &all_headers[..]
                    } else {
                        &all_headers[..2]
                    };
                    let text = sign_shared_key(
                        method,
                        &self.target,
                        headers,
                        body.len() as u64,
                        account,
                        key,
                    )
                    .map_err(|failure| EncodeError(format!("cannot sign: {failure}")))?;
                    let signature: [u8; SIGNATURE_BYTES] = text
                        .as_bytes()
                        .try_into()
                        .map_err(|_| EncodeError("unexpected signature length".to_string()))?;
                    if let Some(slot) = slot {
                        self.signatures[slot] = Some((now_unix_s, signature));
                    }
                    signature
                }
            };
            out.extend_from_slice(b"Authorization: SharedKey ");
            out.extend_from_slice(account.as_bytes());
            out.push(b':');
            out.extend_from_slice(&signature);
            out.extend_from_slice(b"\r\n");
        }
        if let Credentials::Bearer { token } = &self.credentials {
            out.extend_from_slice(b"Authorization: Bearer ");
            out.extend_from_slice(token.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        Ok(())
    }
}

/// Writes `value` as exactly `out.len()` decimal digits, zero-padded (the leading digits are
/// dropped if it is longer, which a microsecond timestamp is not before 2286).
fn write_timestamp(mut value: u64, out: &mut [u8]) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters: pop receipts are base64 and
/// carry `+`, `/` and `=`, which would otherwise decode as a space or split the query.
pub fn percent_encode_into(raw: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in raw {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0xF)] as char);
        }
    }
}

/// Reads the send timestamp at the start of a message text written by a producer; `None` for a
/// text some other client wrote.
pub fn parse_timestamp(text: &[u8]) -> Option<u64> {
    let digits = text.get(..TIMESTAMP_DIGITS)?;
    digits.iter().try_fold(0u64, |value, &digit| {
        digit
            .is_ascii_digit()
            .then(|| value * 10 + u64::from(digit - b'0'))
    })
}

/// Writes `mark` as lowercase hex: the nonce's 8 digits, the token's 16, the attempt's 2.
fn write_put_mark(mark: PutMark, out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let value =
        (u128::from(mark.nonce) << 72) | (u128::from(mark.token) << 8) | u128::from(mark.attempt);
    for (index, digit) in out[..PUT_MARK_DIGITS].iter_mut().rev().enumerate() {
        *digit = HEX[((value >> (4 * index)) & 0xF) as usize];
    }
}

/// Reads the put mark after the timestamp of a message text a producer wrote; `None` for a text
/// without a timestamp, too short to hold a mark, or written by a preload or another client.
pub fn parse_put_mark(text: &[u8]) -> Option<PutMark> {
    parse_timestamp(text)?;
    let digits = text.get(TIMESTAMP_DIGITS..TIMESTAMP_DIGITS + PUT_MARK_DIGITS)?;
    let value = digits.iter().try_fold(0u128, |value, &digit| {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return None,
        };
        Some((value << 4) | u128::from(nibble))
    })?;
    Some(PutMark {
        nonce: (value >> 72) as u32,
        token: (value >> 8) as u64,
        attempt: value as u8,
    })
}

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

/// One message of a Get Messages or Peek Messages answer; fields borrow the body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListedMessage<'a> {
    pub message_id: &'a [u8],
    /// Empty for Peek, which issues no receipt.
    pub pop_receipt: &'a [u8],
    pub message_text: &'a [u8],
    /// Deliveries so far, this one included (0 when absent, as in a Peek of a new message).
    pub dequeue_count: u32,
}

/// The `<QueueMessage>` elements of a `<QueueMessagesList>` body, read with quick-xml's borrowed
/// reader: every field is a slice of the body. Values are not XML-unescaped: IDs and receipts
/// are GUIDs and base64, and only the leading digits of the text are read. The walk stops at
/// the first malformed or truncated element, which is not a message.
pub struct ListedMessages<'a> {
    reader: quick_xml::Reader<&'a [u8]>,
    /// Set once the body is exhausted or malformed.
    finished: bool,
}

/// Iterates the messages of a Get Messages or Peek Messages answer.
pub fn listed_messages(body: &[u8]) -> ListedMessages<'_> {
    ListedMessages {
        reader: quick_xml::Reader::from_reader(body),
        finished: false,
    }
}

/// The child of `<QueueMessage>` whose text is being read.
#[derive(Clone, Copy)]
enum MessageField {
    MessageId,
    PopReceipt,
    MessageText,
    DequeueCount,
}

impl<'a> ListedMessages<'a> {
    /// The next event; `None` (and finished) at the end of the body or on malformed XML.
    fn next_event(&mut self) -> Option<quick_xml::events::Event<'a>> {
        match self.reader.read_event() {
            Ok(quick_xml::events::Event::Eof) | Err(_) => {
                self.finished = true;
                None
            }
            Ok(event) => Some(event),
        }
    }
}

impl<'a> Iterator for ListedMessages<'a> {
    type Item = ListedMessage<'a>;

    fn next(&mut self) -> Option<ListedMessage<'a>> {
        use quick_xml::events::Event;
        use std::borrow::Cow;

        if self.finished {
            return None;
        }
        loop {
            match self.next_event()? {
                Event::Start(start) if start.name().as_ref() == b"QueueMessage" => break,
                _ => {}
            }
        }
        let mut message = ListedMessage::default();
        let mut field = None;
        loop {
            let text = match self.next_event()? {
                Event::Start(start) => {
                    field = match start.name().as_ref() {
                        b"MessageId" => Some(MessageField::MessageId),
                        b"PopReceipt" => Some(MessageField::PopReceipt),
                        b"MessageText" => Some(MessageField::MessageText),
                        b"DequeueCount" => Some(MessageField::DequeueCount),
                        _ => None,
                    };
                    continue;
                }
                Event::End(end) if end.name().as_ref() == b"QueueMessage" => return Some(message),
                Event::End(_) => {
                    field = None;
                    continue;
                }
                Event::Text(text) => text.into_inner(),
                Event::CData(text) => text.into_inner(),
                _ => continue,
            };
            // A reader over a slice lends slices of it.
            let Cow::Borrowed(text) = text else {
                continue;
            };
            match field {
                Some(MessageField::MessageId) => message.message_id = text,
                Some(MessageField::PopReceipt) => message.pop_receipt = text,
                Some(MessageField::MessageText) => message.message_text = text,
                Some(MessageField::DequeueCount) => {
                    message.dequeue_count = std::str::from_utf8(text)
                        .ok()
                        .and_then(|digits| digits.trim().parse().ok())
                        .unwrap_or(0);
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{parse_endpoint, resolve, TargetArguments};
    use azq::auth::SigningKey;
    use azq::auth::DEVELOPMENT_ACCOUNT_KEY;

    fn settings() -> RequestSettings {
        RequestSettings {
            queue_names: vec!["azqload-0".to_string(), "azqload-1".to_string()],
            message_bytes: 20,
            batch: 32,
            visibility_timeout_s: 30,
            api_version: "2026-04-06".to_string(),
            put_mark_nonce: 0x00c0_ffee,
        }
    }

    fn development_encoder() -> RequestEncoder {
        let (endpoint, credentials) = resolve(&TargetArguments::default()).unwrap();
        RequestEncoder::new(endpoint, credentials, settings()).unwrap()
    }

    /// 2026-11-22T00:00:00Z in milliseconds.
    const NOVEMBER_22_MS: u64 = 1_795_305_600_000;

    fn encode(encoder: &mut RequestEncoder, queue: usize, kind: RequestKind<'_>) -> String {
        let mut out = Vec::new();
        encoder
            .encode(queue, kind, NOVEMBER_22_MS, &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The signature must be the one azq's server-side code would verify for exactly the bytes
    /// sent, including the percent-encoded receipt (signed decoded).
    fn signature_of(method: &str, target: &str, headers: &[(&str, &str)], length: u64) -> String {
        let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
        sign_shared_key(method, target, headers, length, "devstoreaccount1", &key).unwrap()
    }

    #[test]
    fn put_request_bytes() {
        let mut encoder = development_encoder();
        let request = encode(
            &mut encoder,
            1,
            RequestKind::Put {
                sent_unix_us: 1_795_305_600_123_456,
                mark: None,
            },
        );
        let body = "<QueueMessage><MessageText>1795305600123456xxxx</MessageText></QueueMessage>";
        let signature = signature_of(
            "POST",
            "/devstoreaccount1/azqload-1/messages",
            &[
                ("x-ms-version", "2026-04-06"),
                ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
                ("Content-Type", "application/xml"),
            ],
            body.len() as u64,
        );
        assert_eq!(
            request,
            format!(
                "POST /devstoreaccount1/azqload-1/messages HTTP/1.1\r\n\
                 Host: 127.0.0.1:10001\r\n\
                 x-ms-version: 2026-04-06\r\n\
                 x-ms-date: Sun, 22 Nov 2026 00:00:00 GMT\r\n\
                 Content-Type: application/xml\r\n\
                 Content-Length: {}\r\n\
                 Authorization: SharedKey devstoreaccount1:{signature}\r\n\r\n{body}",
                body.len()
            )
        );
        // The next Put in the same second reuses the signature and changes only the digits.
        let again = encode(
            &mut encoder,
            1,
            RequestKind::Put {
                sent_unix_us: 7,
                mark: None,
            },
        );
        assert!(again.contains(&signature));
        assert!(again.contains("<MessageText>0000000000000007xxxx<"));
    }

    /// A text with room carries the put mark after the timestamp, read back exactly; a Put
    /// without a mark (a preload) leaves the fill there, and a text too short has no mark.
    #[test]
    fn put_marks_are_written_and_read_back() {
        let (endpoint, credentials) = resolve(&TargetArguments::default()).unwrap();
        let mut long = settings();
        long.message_bytes = TIMESTAMP_DIGITS + PUT_MARK_DIGITS + 2;
        let mut encoder = RequestEncoder::new(endpoint, credentials, long).unwrap();
        let mark = PutMark {
            nonce: 0x00c0_ffee,
            token: (7 << 40) | 3,
            attempt: 2,
        };
        let marked = encode(
            &mut encoder,
            0,
            RequestKind::Put {
                sent_unix_us: 5,
                mark: Some(mark),
            },
        );
        let text = "0000000000000005".to_string() + "00c0ffee" + "0000070000000003" + "02" + "xx";
        assert!(
            marked.contains(&format!("<MessageText>{text}<")),
            "{marked}"
        );
        assert_eq!(parse_put_mark(text.as_bytes()), Some(mark));
        let highest = PutMark {
            nonce: u32::MAX,
            token: u64::MAX,
            attempt: u8::MAX,
        };
        let mut room = [0u8; PUT_MARK_DIGITS];
        write_put_mark(highest, &mut room);
        let text = [b"0000000000000005".as_slice(), &room].concat();
        assert_eq!(parse_put_mark(&text), Some(highest));
        let unmarked = encode(
            &mut encoder,
            0,
            RequestKind::Put {
                sent_unix_us: 6,
                mark: None,
            },
        );
        let fill = "x".repeat(PUT_MARK_DIGITS + 2);
        assert!(unmarked.contains(&format!("<MessageText>0000000000000006{fill}<")));
        assert_eq!(
            parse_put_mark(format!("0000000000000006{fill}").as_bytes()),
            None
        );
        // Hex where the timestamp belongs (another client's text) is no mark.
        let foreign = [b"0123456789abcdef".as_slice(), &room].concat();
        assert_eq!(parse_put_mark(&foreign), None);
        // Twenty bytes of text: a timestamp and four bytes of fill, no room for a mark.
        let short = encode(
            &mut development_encoder(),
            0,
            RequestKind::Put {
                sent_unix_us: 6,
                mark: Some(mark),
            },
        );
        assert!(short.contains("<MessageText>0000000000000006xxxx<"));
        assert_eq!(parse_put_mark(b"0000000000000006xxxx"), None);
    }

    /// Counts this thread's heap allocations, so that a test can prove a path allocates nothing.
    mod allocation_counter {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
        }

        struct Counting;

        // SAFETY: every call is forwarded unchanged to the system allocator; counting touches
        // only a const-initialised thread-local, which itself never allocates.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                ALLOCATIONS.with(|count| count.set(count.get() + 1));
                // SAFETY: the caller's guarantees for `layout` are the system allocator's.
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
                // SAFETY: `pointer` came from this allocator, so from `System`, with `layout`.
                unsafe { System.dealloc(pointer, layout) }
            }
            unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, size: usize) -> *mut u8 {
                ALLOCATIONS.with(|count| count.set(count.get() + 1));
                // SAFETY: `pointer` came from `System` with `layout`; the caller vouches for
                // `size`, as `GlobalAlloc::realloc` requires.
                unsafe { System.realloc(pointer, layout, size) }
            }
        }

        #[global_allocator]
        static ALLOCATOR: Counting = Counting;

        /// Allocations made by this thread so far.
        pub fn allocations() -> u64 {
            ALLOCATIONS.with(Cell::get)
        }
    }

    /// The hot path of a closed-loop Put, Get or Peek run, after the first request of the second:
    /// encoding and parsing the answer head allocate nothing, and walking a Get's messages
    /// allocates only quick-xml's stack of open element names, the same for 1 message as for 32.
    #[test]
    fn the_hot_path_does_not_allocate() {
        let mut encoder = development_encoder();
        let mut out = Vec::with_capacity(64 * 1024);
        let kinds = [
            RequestKind::Put {
                sent_unix_us: 1,
                mark: None,
            },
            RequestKind::Get,
            RequestKind::Peek,
        ];
        for kind in kinds {
            encoder.encode(1, kind, NOVEMBER_22_MS, &mut out).unwrap();
        }
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length:   120\r\nx-ms-request-id: r\r\n\r\n";
        let before = allocation_counter::allocations();
        for round in 0..1000 {
            out.clear();
            for kind in kinds {
                encoder
                    .encode(1, kind, NOVEMBER_22_MS + round % 1000, &mut out)
                    .unwrap();
            }
            let head = parse_response_head(answer).unwrap().unwrap();
            assert_eq!(head.status, 200);
        }
        assert_eq!(allocation_counter::allocations() - before, 0);

        let message = "<QueueMessage><MessageId>a</MessageId><PopReceipt>r</PopReceipt>\
            <MessageText>1795305600123456</MessageText></QueueMessage>";
        let walk_allocations = |messages: usize| {
            let body = format!(
                "<QueueMessagesList>{}</QueueMessagesList>",
                message.repeat(messages)
            );
            let before = allocation_counter::allocations();
            let timestamps: u64 = listed_messages(body.as_bytes())
                .filter_map(|message| parse_timestamp(message.message_text))
                .sum();
            assert_eq!(timestamps, 1_795_305_600_123_456 * messages as u64);
            allocation_counter::allocations() - before
        };
        let one = walk_allocations(1);
        assert_eq!(walk_allocations(32), one);
        assert!(one <= 4, "{one} allocations to walk one message");
    }

    #[test]
    fn delete_percent_encodes_the_receipt_and_signs_it_decoded() {
        let mut encoder = development_encoder();
        let request = encode(
            &mut encoder,
            0,
            RequestKind::Delete {
                message_id: b"0b4a3c1e-0000-4000-8000-000000000001",
                pop_receipt: b"AgAA+/w=",
            },
        );
        let target = "/devstoreaccount1/azqload-0/messages/0b4a3c1e-0000-4000-8000-000000000001\
                      ?popreceipt=AgAA%2B%2Fw%3D";
        assert!(request.starts_with(&format!("DELETE {target} HTTP/1.1\r\n")));
        assert!(request.contains("Content-Length: 0\r\n"));
        assert!(!request.contains("Content-Type"));
        let signature = signature_of(
            "DELETE",
            target,
            &[
                ("x-ms-version", "2026-04-06"),
                ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
            ],
            0,
        );
        assert!(request.contains(&format!("SharedKey devstoreaccount1:{signature}\r\n\r\n")));
    }

    #[test]
    fn targets_of_every_kind() {
        let mut encoder = development_encoder();
        let cases: [(RequestKind<'_>, &str); 5] = [
            (RequestKind::CreateQueue, "PUT /devstoreaccount1/azqload-0 "),
            (
                RequestKind::GetMetadata,
                "GET /devstoreaccount1/azqload-0?comp=metadata ",
            ),
            (
                RequestKind::Get,
                "GET /devstoreaccount1/azqload-0/messages?numofmessages=32&visibilitytimeout=30 ",
            ),
            (
                RequestKind::Peek,
                "GET /devstoreaccount1/azqload-0/messages?numofmessages=32&peekonly=true ",
            ),
            (
                RequestKind::Update {
                    message_id: b"id",
                    pop_receipt: b"r",
                },
                "PUT /devstoreaccount1/azqload-0/messages/id?popreceipt=r&visibilitytimeout=30 ",
            ),
        ];
        for (kind, start) in cases {
            let request = encode(&mut encoder, 0, kind);
            assert!(request.starts_with(start), "{request}");
        }
    }

    #[test]
    fn sas_is_appended_and_nothing_is_signed() {
        let endpoint = parse_endpoint(
            "http://127.0.0.1:10001/devstoreaccount1",
            &crate::tls::TlsArguments::default(),
        )
        .unwrap();
        let credentials = Credentials::Sas {
            token: "sv=2026-10-06&sig=abc%3D".to_string(),
        };
        let mut encoder = RequestEncoder::new(endpoint, credentials, settings()).unwrap();
        let put = encode(
            &mut encoder,
            0,
            RequestKind::Put {
                sent_unix_us: 1,
                mark: None,
            },
        );
        assert!(put.starts_with(
            "POST /devstoreaccount1/azqload-0/messages?sv=2026-10-06&sig=abc%3D HTTP/1.1\r\n"
        ));
        let get = encode(&mut encoder, 0, RequestKind::Get);
        assert!(get.contains("visibilitytimeout=30&sv=2026-10-06&sig=abc%3D HTTP/1.1"));
        assert!(!put.contains("Authorization"));
    }

    #[test]
    fn messages_too_short_for_a_timestamp_are_refused() {
        let (endpoint, credentials) = resolve(&TargetArguments::default()).unwrap();
        let mut short = settings();
        short.message_bytes = TIMESTAMP_DIGITS - 1;
        assert!(RequestEncoder::new(endpoint, credentials, short).is_err());
    }

    #[test]
    fn timestamps_round_trip() {
        let mut digits = [0u8; TIMESTAMP_DIGITS];
        write_timestamp(1_795_305_600_123_456, &mut digits);
        assert_eq!(&digits, b"1795305600123456");
        assert_eq!(
            parse_timestamp(b"1795305600123456xxx"),
            Some(1_795_305_600_123_456)
        );
        assert_eq!(parse_timestamp(b"179530560012345"), None);
        assert_eq!(parse_timestamp(b"hello, world, it is me"), None);
    }

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

    #[test]
    fn get_answers() {
        let azq = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
            <MessageId>id-1</MessageId><InsertionTime>t</InsertionTime><PopReceipt>AgAA+/w=</PopReceipt>\
            <DequeueCount>1</DequeueCount><MessageText>1795305600123456xx</MessageText></QueueMessage>\
            <QueueMessage><MessageId>id-2</MessageId><PopReceipt>r2</PopReceipt><MessageText>hello</MessageText>\
            </QueueMessage></QueueMessagesList>";
        let messages: Vec<_> = listed_messages(azq).collect();
        assert_eq!(
            messages,
            vec![
                ListedMessage {
                    message_id: b"id-1",
                    pop_receipt: b"AgAA+/w=",
                    message_text: b"1795305600123456xx",
                    dequeue_count: 1,
                },
                ListedMessage {
                    message_id: b"id-2",
                    pop_receipt: b"r2",
                    message_text: b"hello",
                    dequeue_count: 0,
                },
            ]
        );
        assert_eq!(listed_messages(b"<QueueMessagesList />").count(), 0);
        assert_eq!(listed_messages(b"<QueueMessagesList/>").count(), 0);
        // A truncated element is not a message.
        assert_eq!(listed_messages(b"<QueueMessage><MessageId>x").count(), 0);
        // Neither is anything after malformed XML.
        let broken = b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId></QueueMessage>\
            <QueueMessage><MessageId>b</Wrong></QueueMessage>\
            <QueueMessage><MessageId>c</MessageId></QueueMessage></QueueMessagesList>";
        let ids: Vec<&[u8]> = listed_messages(broken).map(|m| m.message_id).collect();
        assert_eq!(ids, vec![&b"a"[..]]);
        // Values are the raw bytes between the tags: entities stay escaped, an empty element
        // is an empty value, and a message without a receipt (Peek) has an empty one.
        let peek = b"<QueueMessagesList><QueueMessage><MessageId>x</MessageId>\
            <MessageText>a &amp; b</MessageText></QueueMessage><QueueMessage>\
            <MessageId>y</MessageId><MessageText/></QueueMessage></QueueMessagesList>";
        let messages: Vec<_> = listed_messages(peek).collect();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].message_text, b"a &amp; b");
        assert_eq!(messages[0].pop_receipt, b"");
        assert_eq!(messages[1].message_text, b"");
    }
}
