//! Recovery's messages kept slim. A restart holds each message it brings back in a record read
//! from the log, then in its shard's image by slot, then in the shard state: the first two as a
//! `MessageState` (its `Bytes`, its foreign ID's room and its text's place: 176 bytes beside a
//! 32-byte place), which set the restart's peak memory at about twice the steady state's. Here a
//! message is its numbers and where its text lies in the files recovery read and keeps mapped
//! until the image goes (`Sources`): 80 bytes. What does not fit (a foreign ID, a text that is
//! not a slice of a file read) stays as it was, beside the slim entry (`Image` in
//! `recovery.rs`), so that nothing depends on the files being read in any particular way.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::queue::key::{TextFile, TextLocator};
use crate::queue::record::MessageState;

/// Where recovery read a text: the record (in a segment, or the entry in the snapshot) and the
/// sequence of the record that wrote the text (`RECOVERED_TEXT_SEQUENCE` for a snapshot's).
pub type TextPlace = (TextLocator, u64);

/// The files one shard's recovery read (mapped on Unix: `StdFiles::read`), which the texts of
/// its image are slices of.
#[derive(Default)]
pub struct Sources {
    files: Vec<(TextFile, Bytes)>,
    /// Looked up once a message restored: ahash, not SipHash (with `Image::held`'s, SipHash
    /// was 7.4% of a restart's samples).
    by_file: HashMap<TextFile, u32, ahash::RandomState>,
    /// Each file's first byte's address: a text is found by its own.
    by_address: BTreeMap<usize, u32>,
    /// How many texts still to be taken are slices of each file (`count_uses`, `taken`).
    uses: Vec<u32>,
}

impl Sources {
    /// Adds the bytes read of `file` (the first read of a file is the one its texts are found
    /// in; a later one of the same file is not added).
    pub fn add(&mut self, file: TextFile, data: &Bytes) {
        if self.by_file.contains_key(&file) {
            return;
        }
        let source = u32::try_from(self.files.len()).expect("fewer than 2^32 files");
        self.by_file.insert(file, source);
        if !data.is_empty() {
            self.by_address.insert(data.as_ptr() as usize, source);
        }
        self.files.push((file, data.clone()));
    }

    /// The bytes read of each file, while they are held (not yet `taken` whole).
    pub fn data(&self) -> impl Iterator<Item = &Bytes> {
        self.files.iter().map(|(_, data)| data)
    }

    /// Where `text` starts in the source it is a slice of, if any.
    fn offset_in(&self, source: u32, text: &Bytes) -> Option<u64> {
        let data = &self.files[source as usize].1;
        let start = (text.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        (start.checked_add(text.len())? <= data.len()).then_some(start as u64)
    }

    /// Counts the texts of `texts` that are slices of each file, so that each file goes once
    /// the last of them is taken (`taken`): recovery's files are mapped, and their pages
    /// resident once read.
    pub fn count_uses<'a>(&mut self, texts: impl Iterator<Item = &'a SlimText>) {
        self.uses = vec![0; self.files.len()];
        for text in texts.filter(|text| text.in_source()) {
            self.uses[text.source as usize] += 1;
        }
    }

    /// `text`, counted by `count_uses`, was taken (`SlimText::text`): its file goes once no
    /// other text counted is a slice of it.
    pub fn taken(&mut self, text: &SlimText) {
        if !text.in_source() {
            return;
        }
        let uses = &mut self.uses[text.source as usize];
        *uses -= 1;
        if *uses == 0 {
            self.files[text.source as usize].1 = Bytes::new();
        }
    }

    /// The source `text` (not empty) is a slice of, and where it starts there.
    fn find(&self, text: &Bytes) -> Option<(u32, u64)> {
        let (_, &source) = self
            .by_address
            .range(..=text.as_ptr() as usize)
            .next_back()?;
        Some((source, self.offset_in(source, text)?))
    }
}

/// No source: an empty text that names no record.
const NO_SOURCE: u32 = u32::MAX;
/// The text is kept beside the slim entry, as it was read (`SlimText::held`).
const HELD: u32 = u32::MAX - 1;

/// A message's text, as where it lies in a source, and the place of the record that wrote it
/// when texts are located. 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlimText {
    /// Where the text starts in its source (the record's start when the text is empty).
    offset: u64,
    /// The sequence of the record that wrote it, when located.
    record_sequence: u64,
    /// Its source, `NO_SOURCE` or `HELD`.
    source: u32,
    /// The text's bytes.
    bytes: u32,
    /// From the record's start to the text's.
    record_delta: u32,
    /// The record's bytes, header included; 0 when the text is not located.
    record_bytes: u32,
}

impl SlimText {
    /// `text`, read at `place` when texts are located, as a slice of one of `sources`; `None`
    /// when it is not one, or its place is not in the source it is found in.
    pub fn new(text: &Bytes, place: Option<TextPlace>, sources: &Sources) -> Option<SlimText> {
        let bytes = u32::try_from(text.len()).ok()?;
        let Some((locator, record_sequence)) = place else {
            let (source, offset) = match text.is_empty() {
                true => (NO_SOURCE, 0),
                false => sources.find(text)?,
            };
            return Some(SlimText {
                offset,
                record_sequence: 0,
                source,
                bytes,
                record_delta: 0,
                record_bytes: 0,
            });
        };
        let source = *sources.by_file.get(&locator.file())?;
        let record_offset = locator.offset();
        let offset = match text.is_empty() {
            true => record_offset,
            false => sources.offset_in(source, text)?,
        };
        let record_delta = u32::try_from(offset.checked_sub(record_offset)?).ok()?;
        let record_bytes = locator.record_bytes();
        // 0 says "not located"; and the text lies within its record.
        let within = u64::from(record_delta) + u64::from(bytes) <= u64::from(record_bytes);
        (record_bytes > 0 && within).then_some(SlimText {
            offset,
            record_sequence,
            source,
            bytes,
            record_delta,
            record_bytes,
        })
    }

    /// A text of `bytes` kept beside the slim entry, as read.
    pub fn held(bytes: usize) -> SlimText {
        SlimText {
            offset: 0,
            record_sequence: 0,
            source: HELD,
            bytes: u32::try_from(bytes).expect("texts are small"),
            record_delta: 0,
            record_bytes: 0,
        }
    }

    /// Whether the text is kept beside the slim entry (`held`).
    pub fn is_held(&self) -> bool {
        self.source == HELD
    }

    /// The text's bytes.
    pub fn len(&self) -> usize {
        self.bytes as usize
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Whether the text is a slice of a source (not empty, nor held).
    fn in_source(&self) -> bool {
        self.bytes > 0 && !self.is_held()
    }

    /// The text, a slice of its source (not for a held one).
    pub fn text(&self, sources: &Sources) -> Bytes {
        assert!(!self.is_held(), "a held text is kept beside its entry");
        if self.bytes == 0 {
            return Bytes::new();
        }
        let start = self.offset as usize;
        sources.files[self.source as usize]
            .1
            .slice(start..start + self.bytes as usize)
    }

    /// Where it was read, when located (not for a held one).
    pub fn place(&self, sources: &Sources) -> Option<TextPlace> {
        assert!(!self.is_held(), "a held text is kept beside its entry");
        (self.record_bytes > 0).then(|| {
            let file = sources.files[self.source as usize].0;
            let record_offset = self.offset - u64::from(self.record_delta);
            let locator = TextLocator::new(file, record_offset, self.record_bytes);
            (locator, self.record_sequence)
        })
    }

    /// Forgets where it was read: every text is then copied.
    pub fn forget_place(&mut self) {
        self.record_bytes = 0;
    }
}

/// A message's state but its slot (its index in the image) and foreign ID, with its text slim.
/// 80 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlimMessage {
    /// `MessageState::sequence`.
    pub sequence: u64,
    /// `MessageState::insertion_ms`.
    pub insertion_ms: u64,
    /// `MessageState::visible_ms`.
    pub visible_ms: u64,
    /// `MessageState::queue`.
    pub queue: u32,
    /// `MessageState::generation`.
    pub generation: u32,
    /// `MessageState::ttl_s`.
    pub ttl_s: u32,
    /// `MessageState::delay_s`.
    pub delay_s: u32,
    /// `MessageState::dequeue_count`.
    pub dequeue_count: u32,
    /// `MessageState::lease`.
    pub lease: u32,
    /// The text.
    pub text: SlimText,
}

impl SlimMessage {
    /// `message` as its slot and slim state; itself back when it has a foreign ID or its text
    /// is not slim (`SlimText::new`).
    #[allow(clippy::result_large_err)] // the error is the message, handed back untouched
    pub fn new(
        message: MessageState,
        place: Option<TextPlace>,
        sources: &Sources,
    ) -> Result<(u32, SlimMessage), (MessageState, Option<TextPlace>)> {
        if message.foreign_id.is_some() {
            return Err((message, place));
        }
        let Some(text) = SlimText::new(&message.text, place, sources) else {
            return Err((message, place));
        };
        Ok((message.slot, SlimMessage::numbers(&message, text)))
    }

    /// `message`'s numbers, with `text` for its text.
    pub fn numbers<T>(message: &MessageState<T>, text: SlimText) -> SlimMessage {
        SlimMessage {
            sequence: message.sequence,
            insertion_ms: message.insertion_ms,
            visible_ms: message.visible_ms,
            queue: message.queue,
            generation: message.generation,
            ttl_s: message.ttl_s,
            delay_s: message.delay_s,
            dequeue_count: message.dequeue_count,
            lease: message.lease,
            text,
        }
    }

    /// The whole state of the message in `slot`, with `foreign_id` and `text`.
    pub fn state(
        &self,
        slot: u32,
        foreign_id: Option<crate::queue::MessageId>,
        text: Bytes,
    ) -> MessageState {
        MessageState {
            queue: self.queue,
            slot,
            generation: self.generation,
            sequence: self.sequence,
            insertion_ms: self.insertion_ms,
            ttl_s: self.ttl_s,
            delay_s: self.delay_s,
            dequeue_count: self.dequeue_count,
            lease: self.lease,
            visible_ms: self.visible_ms,
            foreign_id,
            text,
        }
    }

    /// When it expires (`MessageState::expiration_ms`).
    pub fn expiration_ms(&self) -> u64 {
        crate::queue::record::expiration_ms(self.insertion_ms, self.ttl_s)
    }
}

const _: () = assert!(std::mem::size_of::<SlimText>() == 32);
const _: () = assert!(std::mem::size_of::<SlimMessage>() == 80);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::MessageId;
    use crate::random::SplitMix64;

    /// Files of every length from 0 to `longest`, segments and snapshots, their bytes distinct.
    fn files(longest: usize) -> Vec<(TextFile, Bytes)> {
        (0..=longest)
            .flat_map(|length| {
                let data = |kind: u8| {
                    let bytes = (0..length).map(|at| kind ^ (at as u8).wrapping_mul(31));
                    Bytes::from(bytes.collect::<Vec<u8>>())
                };
                let number = length as u64;
                [
                    (TextFile::Segment(number), data(1)),
                    (TextFile::Snapshot(u64::MAX - number), data(2)),
                ]
            })
            .collect()
    }

    fn sources_of(files: &[(TextFile, Bytes)]) -> Sources {
        let mut sources = Sources::default();
        for (file, data) in files {
            sources.add(*file, data);
        }
        sources
    }

    /// Every text of every small file, at every place it can start and end, read at every
    /// record around it (or none), with the smallest and largest record sequences, comes back
    /// as the same slice and the same place; a record that does not hold it, a record of no
    /// bytes, another file's record and a file never added are refused, never misread.
    #[test]
    fn every_text_of_small_files_comes_back_at_every_place() {
        let files = files(9);
        let sources = sources_of(&files);
        for (file, data) in &files {
            let length = data.len();
            for start in 0..=length {
                for end in start..=length {
                    let text = data.slice(start..end);
                    let slim = SlimText::new(&text, None, &sources).expect("a slice");
                    assert_eq!(slim.text(&sources), text);
                    if !text.is_empty() {
                        assert_eq!(slim.text(&sources).as_ptr(), text.as_ptr());
                    }
                    assert_eq!(slim.place(&sources), None);
                    assert_eq!(slim.len(), end - start);
                    for record_start in 0..=length {
                        for record_end in record_start..=length {
                            let record_bytes = (record_end - record_start) as u32;
                            let locator =
                                TextLocator::new(*file, record_start as u64, record_bytes);
                            let holds = record_start <= start && end <= record_end;
                            for sequence in [0, 1, u64::MAX - 1, u64::MAX] {
                                let place = Some((locator, sequence));
                                let found = SlimText::new(&text, place, &sources);
                                // An empty text is anywhere in its record.
                                let holds = match text.is_empty() {
                                    true => record_bytes > 0,
                                    false => holds && record_bytes > 0,
                                };
                                let Some(found) = found else {
                                    assert!(!holds, "{file:?} {start}..{end} in {locator:?}");
                                    continue;
                                };
                                assert!(holds, "{file:?} {start}..{end} in {locator:?}");
                                assert_eq!(found.text(&sources), text);
                                assert_eq!(found.place(&sources), place);
                                let mut forgotten = found;
                                forgotten.forget_place();
                                assert_eq!(forgotten.place(&sources), None);
                                assert_eq!(forgotten.text(&sources), text);
                            }
                        }
                    }
                }
            }
        }
        // Another file's record, a file never added, a text of no file added.
        let (_, first) = &files[2];
        let text = first.slice(0..1);
        let other = TextLocator::new(files[3].0, 0, 1);
        assert_eq!(SlimText::new(&text, Some((other, 7)), &sources), None);
        let absent = TextLocator::new(TextFile::Segment(1 << 40), 0, 1);
        assert_eq!(SlimText::new(&text, Some((absent, 7)), &sources), None);
        let fresh = Bytes::from_static(b"not read from a file");
        assert_eq!(SlimText::new(&fresh, None, &sources), None);
        // A second read of a file added: its texts are not found (the first read's are).
        let mut again = sources_of(&files);
        let copy = Bytes::copy_from_slice(first);
        again.add(files[2].0, &copy);
        assert_eq!(SlimText::new(&copy.slice(0..1), None, &again), None);
        let place = Some((TextLocator::new(files[2].0, 0, 1), 3));
        assert_eq!(SlimText::new(&copy.slice(0..1), place, &again), None);
        assert!(SlimText::new(&first.slice(0..1), place, &again).is_some());
    }

    /// Files that sit next to each other in memory: a text at the very end of one, or the
    /// very start of the next, is found in its own.
    #[test]
    fn texts_of_adjacent_files_are_found_in_their_own() {
        let whole = Bytes::from((0..64u8).collect::<Vec<u8>>());
        for cut in 1..63 {
            let (left, right) = (whole.slice(..cut), whole.slice(cut..));
            let mut sources = Sources::default();
            sources.add(TextFile::Segment(0), &left);
            sources.add(TextFile::Segment(1), &right);
            for (text, file) in [
                (left.slice(cut - 1..), 0),
                (right.slice(..1), 1),
                (left.clone(), 0),
                (right.clone(), 1),
            ] {
                let slim = SlimText::new(&text, None, &sources).expect("found");
                assert_eq!(slim.source, file);
                assert_eq!(slim.text(&sources), text);
            }
            // A slice across both is in neither.
            let across = whole.slice(cut - 1..cut + 1);
            assert_eq!(SlimText::new(&across, None, &sources), None);
        }
    }

    /// A random message, with its text one of `files`' (its index and range), a fresh one or
    /// empty, its place a record around it or not, and a foreign ID now and then.
    struct Drawn {
        message: MessageState,
        place: Option<TextPlace>,
        /// Whether it must be slim: no foreign ID, and its text in a file added, within its
        /// record, read at a record of the same file.
        slim: bool,
    }

    fn number(random: &mut SplitMix64) -> u64 {
        match random.next_u64() % 4 {
            0 => 0,
            1 => u64::MAX - random.next_u64() % 2,
            _ => random.next_u64() >> (random.next_u64() % 64),
        }
    }

    fn draw(random: &mut SplitMix64, files: &[(TextFile, Bytes)], added: usize) -> Drawn {
        let small = |random: &mut SplitMix64| number(random) as u32;
        let pick = random.next_u64() as usize % files.len();
        let (file, data) = &files[pick];
        let (text, range, from_file) = match random.next_u64() % 5 {
            0 => (Bytes::new(), 0..0, true),
            1 => (Bytes::from(vec![7u8; 3]), 0..0, false),
            _ => {
                let start = random.next_u64() as usize % (data.len() + 1);
                let end = start + random.next_u64() as usize % (data.len() - start + 1);
                (data.slice(start..end), start..end, true)
            }
        };
        let place = match random.next_u64() % 3 {
            0 => None,
            _ => {
                let record_start = random.next_u64() as usize % (data.len() + 1);
                let record_bytes = random.next_u64() as usize % (data.len() - record_start + 1);
                let locator = TextLocator::new(*file, record_start as u64, record_bytes as u32);
                Some((locator, number(random)))
            }
        };
        let foreign = random.next_u64() % 8 == 0;
        let in_added = pick < added;
        let text_fits = match (&place, text.is_empty(), from_file) {
            (_, false, false) => false,
            (None, true, _) => true,
            (None, false, true) => in_added,
            (Some((locator, _)), empty, _) => {
                let record = locator.offset() as usize
                    ..locator.offset() as usize + locator.record_bytes() as usize;
                in_added
                    && locator.record_bytes() > 0
                    && (empty || (record.start <= range.start && range.end <= record.end))
            }
        };
        let message = MessageState {
            queue: small(random),
            slot: small(random),
            generation: small(random),
            sequence: number(random),
            insertion_ms: number(random),
            ttl_s: small(random),
            delay_s: small(random),
            dequeue_count: small(random),
            lease: small(random),
            visible_ms: number(random),
            foreign_id: foreign.then(|| MessageId(u128::from(number(random)) << 64)),
            text,
        };
        Drawn {
            message,
            place,
            slim: !foreign && text_fits,
        }
    }

    /// Random messages over files some of which were never added: a message that can be slim
    /// is, and its state, text and place come back whole; one that cannot is handed back as it
    /// was.
    #[test]
    fn random_messages_come_back_whole_or_are_handed_back() {
        let files = files(40);
        for seed in 0..20_000u64 {
            let mut random = SplitMix64::new(seed);
            let added = random.next_u64() as usize % (files.len() + 1);
            let sources = sources_of(&files[..added]);
            let drawn = draw(&mut random, &files, added);
            let (message, place) = (drawn.message.clone(), drawn.place);
            match SlimMessage::new(drawn.message, drawn.place, &sources) {
                Ok((slot, slim)) => {
                    assert!(drawn.slim, "seed {seed}: slim, and should not be");
                    assert_eq!(slot, message.slot);
                    let text = slim.text.text(&sources);
                    assert_eq!(slim.state(slot, None, text), message, "seed {seed}");
                    assert_eq!(slim.text.place(&sources), place, "seed {seed}");
                    // Where the draw's times do not overflow (a real insertion is near now).
                    let ttl_ms = u64::from(message.ttl_s) * 1000;
                    if message.insertion_ms.checked_add(ttl_ms).is_some() {
                        assert_eq!(slim.expiration_ms(), message.expiration_ms());
                    }
                }
                Err((back, back_place)) => {
                    assert!(!drawn.slim, "seed {seed}: not slim, and should be");
                    assert_eq!(back, message, "seed {seed}");
                    assert_eq!(back_place, place, "seed {seed}");
                }
            }
        }
    }

    /// A file goes once the last text counted in it is taken; empty and held texts count in
    /// none.
    #[test]
    fn a_file_goes_once_its_last_text_is_taken() {
        let files = files(6);
        let mut sources = sources_of(&files);
        let (_, data) = &files[12];
        let texts: Vec<SlimText> = [0..1, 2..5, 3..3, 5..6]
            .into_iter()
            .map(|range| SlimText::new(&data.slice(range), None, &sources).expect("a slice"))
            .chain([SlimText::held(4)])
            .collect();
        sources.count_uses(texts.iter());
        assert_eq!(sources.uses[12], 3);
        for (taken, text) in texts.iter().enumerate() {
            if !text.is_held() {
                assert_eq!(text.text(&sources).len(), text.len());
            }
            sources.taken(text);
            let left = sources.files[12].1.len();
            // The empty text (the third) and the held one count in none.
            assert_eq!(left == 0, taken >= 3, "after {taken}");
        }
        assert!(sources.files[13].1.len() == data.len(), "the others stay");
    }
}
