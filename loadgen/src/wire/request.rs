//! Requests encoded into a reused buffer and signed with azq's own SharedKey code (or carrying a
//! SAS or bearer token). A Put, Get or Peek has the same target and length for a whole second,
//! so its signature is computed once per second per queue and copied after that: the hot path
//! does not allocate. Update and Delete name a message and its pop receipt, so they are signed
//! one by one.

use azq::auth::sign_shared_key;
use azq::http::response::put_decimal;
use azq::time::{rfc1123, RFC1123_BYTES};

use crate::endpoint::{Credentials, Endpoint};

use crate::wire::mark::{
    write_put_mark, write_timestamp, PutMark, PUT_MARK_DIGITS, TIMESTAMP_DIGITS,
};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{parse_endpoint, resolve, TargetArguments};
    use crate::wire::listing::listed_messages;
    use crate::wire::mark::{parse_put_mark, parse_timestamp};
    use crate::wire::response::parse_response_head;
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
}
