//! The names queue commands carry: `QueueKey` (account and queue name), `MessageId` (a UUID in
//! its hyphenated form) and `PopReceipt` (where a message lives, which lease of it the holder
//! owns and a tag only the server can make, 28 base64 characters), and `shard_for`, the plain
//! function that says which shard owns a queue; `TextLocator` (where a message's text is on
//! disk, tiered storage) and `SegmentRecordBytes` (such records' bytes by log segment).
//! Everything else in `queue/` builds on these; they depend
//! on nothing in it.

/// Identifies a queue: the account it belongs to and its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueKey {
    /// The primary account's name, never with `-secondary`: both endpoints reach one queue.
    pub account: String,
    /// 3-63 characters of `[a-z0-9-]`, validated before any command is built.
    pub name: String,
}

/// A message ID: a UUID, rendered in its hyphenated lowercase form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u128);

/// A pop receipt: where the message lives, which lease of it the holder owns, and the tag that
/// proves the server issued it. Encoded for the client as base64 of 20 little-endian bytes
/// (slot, generation, lease, tag): 28 characters, as Azure's receipts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PopReceipt {
    /// The message's slab slot.
    pub slot: u32,
    /// The slot's generation when the message was stored; a reused slot has another.
    pub generation: u32,
    /// Which lease of the message this receipt belongs to; each Get and Update makes a new one.
    pub lease: u32,
    /// `Secret::receipt_tag` of the message's ID and the three fields above: without the
    /// server's secret, a receipt cannot be made up or altered.
    pub tag: u64,
}

/// Length of a message ID in its hyphenated form (`8-4-4-4-12` hex digits).
const MESSAGE_ID_TEXT_BYTES: usize = 36;
/// Where the hyphenated form has its hyphens.
const MESSAGE_ID_HYPHEN_POSITIONS: [usize; 4] = [8, 13, 18, 23];

impl MessageId {
    /// Parses the hyphenated form, hex digits in either case. Anything else (braces, a `urn:`
    /// prefix, the simple 32-digit form, stray characters) is `None`: Azure only ever hands out
    /// the hyphenated form, so a client that sends another one did not get it from us.
    pub fn parse(text: &str) -> Option<MessageId> {
        let bytes = text.as_bytes();
        if bytes.len() != MESSAGE_ID_TEXT_BYTES {
            return None;
        }
        let mut value: u128 = 0;
        for (position, &byte) in bytes.iter().enumerate() {
            if MESSAGE_ID_HYPHEN_POSITIONS.contains(&position) {
                if byte != b'-' {
                    return None;
                }
                continue;
            }
            let digit = (byte as char).to_digit(16)?;
            value = (value << 4) | u128::from(digit);
        }
        Some(MessageId(value))
    }
}

impl std::fmt::Display for MessageId {
    /// The hyphenated lowercase form, written from a stack buffer (no allocation).
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [b'-'; MESSAGE_ID_TEXT_BYTES];
        let mut remaining = self.0;
        for position in (0..MESSAGE_ID_TEXT_BYTES).rev() {
            if MESSAGE_ID_HYPHEN_POSITIONS.contains(&position) {
                continue;
            }
            text[position] = DIGITS[(remaining & 0xf) as usize];
            remaining >>= 4;
        }
        // Every byte written above is an ASCII hex digit or a hyphen.
        let text = std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?;
        formatter.write_str(text)
    }
}

impl PopReceipt {
    /// Bytes of the receipt before base64: slot, generation and lease, each a little-endian `u32`,
    /// then the tag, a little-endian `u64`.
    const RAW_BYTES: usize = 20;
    /// Length of the encoded receipt: 20 bytes are six base64 groups and two bytes, padded.
    pub const ENCODED_BYTES: usize = 28;

    /// Appends the receipt's base64 form (standard alphabet, 28 characters) to `out` without
    /// building an intermediate `String`.
    pub fn encode_into(&self, out: &mut impl bytes::BufMut) {
        out.put_slice(&self.encoded());
    }

    /// The receipt's base64 form (standard alphabet, 28 characters).
    pub fn encoded(&self) -> [u8; Self::ENCODED_BYTES] {
        use base64::Engine as _;
        let raw = self.to_raw();
        let mut encoded = [0u8; Self::ENCODED_BYTES];
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(raw, &mut encoded)
            .unwrap_or(0);
        // 20 bytes always encode to exactly 28 characters; anything else is a bug in this function.
        assert_eq!(written, Self::ENCODED_BYTES);
        encoded
    }

    /// Decodes a receipt as sent by a client (after URL decoding). `None` for anything that is
    /// not exactly 28 characters of canonical standard base64; the api layer answers
    /// 400 `InvalidQueryParameterValue` for it. A well-formed receipt that points at no message
    /// is the state's business (404 `MessageNotFound`), not this function's.
    pub fn decode(text: &str) -> Option<PopReceipt> {
        use base64::Engine as _;
        if text.len() != Self::ENCODED_BYTES {
            return None;
        }
        // Decoding 28 characters needs room for 20 bytes; the engine wants slack for its estimate.
        let mut raw = [0u8; Self::RAW_BYTES + 3];
        let decoded = base64::engine::general_purpose::STANDARD
            .decode_slice(text.as_bytes(), &mut raw)
            .ok()?;
        if decoded != Self::RAW_BYTES {
            return None;
        }
        let word = |index: usize| {
            u32::from_le_bytes([
                raw[index * 4],
                raw[index * 4 + 1],
                raw[index * 4 + 2],
                raw[index * 4 + 3],
            ])
        };
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&raw[12..20]);
        Some(PopReceipt {
            slot: word(0),
            generation: word(1),
            lease: word(2),
            tag: u64::from_le_bytes(tag),
        })
    }

    fn to_raw(self) -> [u8; Self::RAW_BYTES] {
        let mut raw = [0u8; Self::RAW_BYTES];
        raw[0..4].copy_from_slice(&self.slot.to_le_bytes());
        raw[4..8].copy_from_slice(&self.generation.to_le_bytes());
        raw[8..12].copy_from_slice(&self.lease.to_le_bytes());
        raw[12..20].copy_from_slice(&self.tag.to_le_bytes());
        raw
    }
}

/// Fixed hash seeds: the queue → shard mapping must be the same on every shard and every run
/// (the digits of pi, nothing up the sleeve).
const SHARD_HASH_SEEDS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

/// The shard, in `0..shards`, that owns `queue`. A plain function of the key, as glommio's
/// `ShardFn` wants, stable across runs of the same binary.
pub fn shard_for(queue: &QueueKey, shards: usize) -> usize {
    assert!((1..=crate::limits::SHARDS_MAX).contains(&shards));
    let [k0, k1, k2, k3] = SHARD_HASH_SEEDS;
    let hash = ahash::RandomState::with_seeds(k0, k1, k2, k3).hash_one(queue);
    (hash % shards as u64) as usize
}

/// Whether `text` (a queue name) matches `pattern`, as fault rules and `/_azq/reset` match
/// queues, where `*` is any run of characters and `?` one character.
/// Iterative with one backtrack point, so linear-ish and never recursive.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (pattern, text) = (pattern.as_bytes(), text.as_bytes());
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

/// Which file holds a text record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TextFile {
    /// The log segment whose first record has this sequence (`storage::format::segment_name`).
    Segment(u64),
    /// The snapshot whose replay starts at this sequence (`storage::format::snapshot_name`).
    Snapshot(u64),
}

/// Where a message's text lives on disk: the record that last wrote it (a `MessagePut`, or a
/// `MessageUpdated` with a text, in a log segment; a snapshot's `MessagePut` entry), by the file
/// that holds it and the record's place in it. The record is read whole, so its CRC, the message
/// it names and (in a segment) its sequence are checked before its text is trusted.
///
/// 20 bytes, packed to 4-byte alignment so that `slab::TextSlot` stays the size of `Bytes`: the
/// offset's top bit says which kind of file (files are far smaller than 2^63 bytes), and a
/// snapshot can be larger than 4 GiB.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, packed(4))]
pub struct TextLocator {
    /// The segment's first sequence or the snapshot's replay point.
    file: u64,
    /// Bytes from the start of the file to the record, with `SNAPSHOT_BIT` set in a snapshot.
    place: u64,
    /// The record's bytes, header included.
    record_bytes: u32,
}

/// The bit of `TextLocator::place` set for a record in a snapshot.
const SNAPSHOT_BIT: u64 = 1 << 63;

impl TextLocator {
    /// The record of `record_bytes` at `offset` in `file`.
    pub fn new(file: TextFile, offset: u64, record_bytes: u32) -> TextLocator {
        assert!(offset < SNAPSHOT_BIT, "a file of 2^63 bytes");
        let (file, place) = match file {
            TextFile::Segment(sequence) => (sequence, offset),
            TextFile::Snapshot(sequence) => (sequence, offset | SNAPSHOT_BIT),
        };
        TextLocator {
            file,
            place,
            record_bytes,
        }
    }

    /// The file that holds the record.
    pub fn file(&self) -> TextFile {
        let file = self.file;
        match self.place & SNAPSHOT_BIT {
            0 => TextFile::Segment(file),
            _ => TextFile::Snapshot(file),
        }
    }

    /// Bytes from the start of the file to the record.
    pub fn offset(&self) -> u64 {
        self.place & !SNAPSHOT_BIT
    }

    /// The record's bytes, header included.
    pub fn record_bytes(&self) -> u32 {
        self.record_bytes
    }
}

/// The bytes of text records by the log segment that holds them (its first sequence), none at
/// 0, counted as records are added and removed: the texts on disk only (`EvictedTexts`) and the
/// homes of texts in memory (`HomeIndex`). Records in a snapshot's entries are not counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentRecordBytes(std::collections::HashMap<u64, u64>);

impl SegmentRecordBytes {
    /// Counts the record at `locator`, if it is in a segment.
    pub fn add(&mut self, locator: TextLocator) {
        if let (TextFile::Segment(first), bytes @ 1..) = (locator.file(), locator.record_bytes()) {
            *self.0.entry(first).or_default() += u64::from(bytes);
        }
    }

    /// Stops counting a record `add` counted. A miscount only moves a trigger (the rules that
    /// read these): it must not end the process.
    pub fn remove(&mut self, locator: TextLocator) {
        if let (TextFile::Segment(first), bytes @ 1..) = (locator.file(), locator.record_bytes()) {
            let counted = self.0.entry(first).or_default();
            debug_assert!(*counted >= u64::from(bytes), "segment {first}");
            *counted = counted.saturating_sub(u64::from(bytes));
            if *counted == 0 {
                self.0.remove(&first);
            }
        }
    }

    /// The bytes counted in the segment that starts at `first`.
    pub fn get(&self, first: u64) -> u64 {
        self.0.get(&first).copied().unwrap_or(0)
    }

    /// Every segment with bytes counted, and its bytes.
    pub fn by_segment(&self) -> &std::collections::HashMap<u64, u64> {
        &self.0
    }
}

impl std::fmt::Debug for TextLocator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TextLocator")
            .field("file", &self.file())
            .field("offset", &self.offset())
            .field("record_bytes", &self.record_bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(account: &str, name: &str) -> QueueKey {
        QueueKey {
            account: account.to_string(),
            name: name.to_string(),
        }
    }

    /// Every kind of file, at the smallest and largest sequences, offsets and lengths (and
    /// around 2^32, past which a `u32` offset would wrap), reads back as made.
    #[test]
    fn text_locators_round_trip_at_their_boundaries() {
        assert_eq!(std::mem::size_of::<TextLocator>(), 20);
        let sequences = [0, 1, u64::from(u32::MAX) + 1, u64::MAX - 1, u64::MAX];
        let offsets = [0, 1, 4095, 4096, 1 << 32, (1 << 32) + 1, SNAPSHOT_BIT - 1];
        let lengths = [0, 1, u32::MAX - 1, u32::MAX];
        let mut seen = std::collections::HashSet::new();
        for sequence in sequences {
            for file in [TextFile::Segment(sequence), TextFile::Snapshot(sequence)] {
                for offset in offsets {
                    for record_bytes in lengths {
                        let locator = TextLocator::new(file, offset, record_bytes);
                        assert_eq!(locator.file(), file);
                        assert_eq!(locator.offset(), offset);
                        assert_eq!(locator.record_bytes(), record_bytes);
                        assert!(seen.insert(locator), "{locator:?} made twice");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "2^63")]
    fn a_text_locator_past_2_63_bytes_is_a_bug() {
        TextLocator::new(TextFile::Segment(0), SNAPSHOT_BIT, 1);
    }

    #[test]
    fn shard_for_is_in_range_and_stable() {
        for shards in [1, 2, 3, 7, 256] {
            for index in 0..200 {
                let queue = key("devstoreaccount1", &format!("queue-{index}"));
                let shard = shard_for(&queue, shards);
                assert!(shard < shards);
                assert_eq!(shard, shard_for(&queue.clone(), shards));
            }
        }
        assert_eq!(shard_for(&key("a", "q"), 1), 0);
    }

    #[test]
    fn shard_for_spreads_queues() {
        let shards = 4;
        let mut counts = [0usize; 4];
        for index in 0..4000 {
            counts[shard_for(&key("devstoreaccount1", &format!("q{index}")), shards)] += 1;
        }
        assert!(counts.iter().all(|&count| count > 800), "{counts:?}");
    }

    #[test]
    fn shard_for_depends_on_the_account() {
        let differing = (0..100)
            .filter(|index| {
                let name = format!("q{index}");
                shard_for(&key("one", &name), 16) != shard_for(&key("two", &name), 16)
            })
            .count();
        assert!(differing > 50);
    }

    #[test]
    #[should_panic]
    fn shard_for_zero_shards_is_a_bug() {
        shard_for(&key("a", "q"), 0);
    }

    #[test]
    fn message_id_display_is_hyphenated_lowercase() {
        let id = MessageId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(id.to_string(), "01234567-89ab-cdef-fedc-ba9876543210");
        assert_eq!(
            MessageId(0).to_string(),
            "00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(
            MessageId(u128::MAX).to_string(),
            "ffffffff-ffff-ffff-ffff-ffffffffffff"
        );
    }

    #[test]
    fn message_id_parse_table() {
        let valid = [
            (
                "01234567-89ab-cdef-fedc-ba9876543210",
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            ),
            (
                "01234567-89AB-CDEF-FEDC-BA9876543210",
                0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
            ),
            ("00000000-0000-0000-0000-000000000000", 0),
        ];
        for (text, value) in valid {
            assert_eq!(MessageId::parse(text), Some(MessageId(value)), "{text}");
        }
        let invalid = [
            "",
            "0123456789abcdeffedcba9876543210",
            "{01234567-89ab-cdef-fedc-ba9876543210}",
            "urn:uuid:01234567-89ab-cdef-fedc-ba9876543210",
            "01234567-89ab-cdef-fedc-ba987654321",
            "01234567-89ab-cdef-fedc-ba98765432100",
            "01234567089ab-cdef-fedc-ba9876543210",
            "0123456-789ab-cdef-fedc-ba9876543210",
            "01234567-89ab-cdef-fedc-ba987654321g",
            "01234567-89ab-cdef-fedc-ba987654321 ",
            "+1234567-89ab-cdef-fedc-ba9876543210",
            "01234567-89ab-cdef-fedc-ba98765432é",
        ];
        for text in invalid {
            assert_eq!(MessageId::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn message_id_round_trips() {
        let mut rng = fastrand::Rng::with_seed(0x1d);
        for _ in 0..1000 {
            let id = MessageId(rng.u128(..));
            assert_eq!(MessageId::parse(&id.to_string()), Some(id));
        }
    }

    fn encoded(receipt: PopReceipt) -> String {
        let mut out = Vec::new();
        receipt.encode_into(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pop_receipt_encoding_table() {
        let table = [
            (
                PopReceipt {
                    slot: 0,
                    generation: 0,
                    lease: 0,
                    tag: 0,
                },
                "AAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            ),
            (
                PopReceipt {
                    slot: 1,
                    generation: 2,
                    lease: 3,
                    tag: 0x0807_0605_0403_0201,
                },
                "AQAAAAIAAAADAAAAAQIDBAUGBwg=",
            ),
            (
                PopReceipt {
                    slot: u32::MAX,
                    generation: u32::MAX,
                    lease: u32::MAX,
                    tag: u64::MAX,
                },
                "//////////////////////////8=",
            ),
        ];
        for (receipt, text) in table {
            assert_eq!(encoded(receipt), text);
            assert_eq!(PopReceipt::decode(text), Some(receipt));
        }
    }

    #[test]
    fn pop_receipt_decode_rejects_malformed() {
        let invalid = [
            "",
            // The 16-character receipts of earlier versions carried no tag.
            "AQAAAAIAAAADAAAA",
            "AQAAAAIAAAADAAAAAQIDBAUGBw",
            "AQAAAAIAAAADAAAAAQIDBAUGBwg",
            "AQAAAAIAAAADAAAAAQIDBAUGBwgA",
            "AQAAAAIAAAADAAAAAQIDBAUGBwg==",
            "AQAAAAIAAAADAAAAAQIDBAUGBw==",
            // Non-canonical: the last character carries bits past the 20th byte.
            "AQAAAAIAAAADAAAAAQIDBAUGBwh=",
            "AQAAAAIAAAADAAAAAQIDBAUG-_g=",
            "AQAAAAIAAAADAAAAAQIDBAUG Bg=",
            "AQAAAAIAAAADAAAAAQIDBAUG%2g=",
            "AQAAAAIAAAADAAAAAQIDBAUGBé=",
        ];
        for text in invalid {
            assert_eq!(PopReceipt::decode(text), None, "{text:?}");
        }
    }

    #[test]
    fn pop_receipt_round_trips() {
        let mut rng = fastrand::Rng::with_seed(0x9e);
        for _ in 0..1000 {
            let receipt = PopReceipt {
                slot: rng.u32(..),
                generation: rng.u32(..),
                lease: rng.u32(..),
                tag: rng.u64(..),
            };
            let text = encoded(receipt);
            assert_eq!(text.len(), PopReceipt::ENCODED_BYTES);
            assert_eq!(PopReceipt::decode(&text), Some(receipt));
        }
    }

    #[test]
    fn glob_table() {
        let cases = [
            ("*", "", true),
            ("orders-*", "orders-1", true),
            ("orders-*", "orders-", true),
            ("orders-*", "order-1", false),
            ("*-dlq", "a-b-dlq", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(glob(pattern, text), expected, "{pattern} {text}");
        }
    }
}
