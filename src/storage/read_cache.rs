//! A shard's cache of its log's files read back for texts on disk only (`Log::read_texts`):
//! aligned chunks of `TEXT_READ_CACHE_CHUNK_BYTES`, the oldest going first past its capacity
//! (`capacity_for`: `TEXT_READ_CACHE_BYTES`, or an eighth of the shard's `--max-memory` share
//! if less). A backlog spread over many queues lies interleaved in the log, so the texts at the
//! heads of all its queues share chunks: one read of a chunk serves the Gets of every queue
//! whose next text is in it, where each text was a read of the device of its own (io_uring's
//! O_DIRECT bypasses the page cache). Not on a backend whose reads go through the page cache
//! (`Disk::page_cached`: portable), which keeps those pages already.
//!
//! Only bytes that never change are kept: a file's chunk up to the end the log knows written
//! for it when the read was asked (`Log::cacheable_end`; blocks before the open segment's end
//! are never written again), and only if no file was replaced under its name since (`forget`,
//! which a snapshot of the same replay point calls: a read asked before it may have read the
//! old file). A chunk is checked as any read is: the record's CRC, message and sequence.

use crate::limits::{TEXT_READ_CACHE_BYTES, TEXT_READ_CACHE_CHUNK_BYTES};
use crate::queue::key::TextFile;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

/// A chunk's key: its file and its index there (offset / `TEXT_READ_CACHE_CHUNK_BYTES`).
type ChunkKey = (TextFile, u64);

/// The chunks read, and in which order they came.
pub struct ReadCache {
    /// The most bytes of chunks held.
    capacity: usize,
    chunks: HashMap<ChunkKey, Bytes, ahash::RandomState>,
    /// The keys of the chunks held, in the order inserted, the oldest first.
    order: VecDeque<ChunkKey>,
    /// Bytes of the chunks held.
    bytes: usize,
    /// Counts `forget`s: a read asked before one inserts nothing.
    epoch: u64,
    /// Reads of ranges answered from a chunk held, and chunks inserted.
    hits: u64,
    inserted: u64,
    /// Bytes of the chunks read, inserted or not: each is freed once let go.
    read_bytes: u64,
}

/// The capacity of a shard's read cache whose `--max-memory` share is `share` bytes: the cache
/// is beside it, so at most an eighth of it (with a share of 128 KiB or less, less than a
/// chunk: nothing is kept), and `TEXT_READ_CACHE_BYTES` at most.
pub fn capacity_for(share: u64) -> usize {
    usize::try_from(share / 8).map_or(TEXT_READ_CACHE_BYTES, |eighth| {
        eighth.min(TEXT_READ_CACHE_BYTES)
    })
}

impl Default for ReadCache {
    fn default() -> Self {
        ReadCache::with_capacity(TEXT_READ_CACHE_BYTES)
    }
}

/// The chunk that holds the whole of the range at `offset` of `length` bytes in a file of
/// which the first `end` bytes never change: (its index, its offset, its length, cut at
/// `end`). `None` when the range crosses a chunk's end, is empty, or reaches past `end`.
pub fn chunk_of(offset: u64, length: u32, end: u64) -> Option<(u64, u64, u32)> {
    let chunk_bytes = TEXT_READ_CACHE_CHUNK_BYTES as u64;
    let range_end = offset.checked_add(u64::from(length))?;
    let index = offset / chunk_bytes;
    let start = index * chunk_bytes;
    let chunk_end = start.saturating_add(chunk_bytes).min(end);
    (length > 0 && range_end <= chunk_end).then(|| {
        let bytes = u32::try_from(chunk_end - start).expect("a chunk is small");
        (index, start, bytes)
    })
}

impl ReadCache {
    /// An empty cache that holds at most `capacity` bytes of chunks.
    pub fn with_capacity(capacity: usize) -> ReadCache {
        ReadCache {
            capacity,
            chunks: HashMap::default(),
            order: VecDeque::new(),
            bytes: 0,
            epoch: 0,
            hits: 0,
            inserted: 0,
            read_bytes: 0,
        }
    }

    /// What a read asked now passes to `insert`.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The bytes of `file` at `offset` of `length`, if a chunk held has them all.
    pub fn get(&mut self, file: TextFile, offset: u64, length: u32) -> Option<Bytes> {
        let chunk_bytes = TEXT_READ_CACHE_CHUNK_BYTES as u64;
        let index = offset / chunk_bytes;
        let chunk = self.chunks.get(&(file, index))?;
        let from = usize::try_from(offset - index * chunk_bytes).ok()?;
        let to = from.checked_add(length as usize)?;
        let bytes = (length > 0 && to <= chunk.len()).then(|| chunk.slice(from..to))?;
        self.hits += 1;
        Some(bytes)
    }

    /// Keeps chunk `index` of `file`, read by a read asked at `epoch` (`epoch()` then): nothing
    /// if a file was replaced under its name since. Replaces a shorter one held (the open
    /// segment grew), and lets the oldest chunks go past the capacity.
    pub fn insert(&mut self, file: TextFile, index: u64, chunk: Bytes, epoch: u64) {
        self.read_bytes += chunk.len() as u64;
        if epoch != self.epoch || chunk.is_empty() {
            return;
        }
        let length = chunk.len();
        match self.chunks.insert((file, index), chunk) {
            Some(old) => self.bytes -= old.len(),
            None => self.order.push_back((file, index)),
        }
        self.bytes += length;
        self.inserted += 1;
        while self.bytes > self.capacity {
            let oldest = self
                .order
                .pop_front()
                .expect("the chunks held are in the order");
            if let Some(gone) = self.chunks.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
    }

    /// Lets every chunk of `file` go, and keeps what reads asked before this read from going
    /// in: `file` was replaced under its name, or a chunk of it read wrong.
    pub fn forget(&mut self, file: TextFile) {
        self.epoch += 1;
        let before = self.chunks.len();
        self.chunks.retain(|&(held, _), _| held != file);
        if self.chunks.len() != before {
            self.bytes = self.chunks.values().map(Bytes::len).sum();
            self.order.retain(|key| self.chunks.contains_key(key));
        }
    }

    /// Ranges answered from chunks held, and chunks read into it, since the shard started.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits, self.inserted)
    }

    /// Bytes of the chunks read since the shard started (`insert`), held or freed: what the
    /// shard counts as memory freed, to give back (`Engine::give_back_memory`).
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: u64 = TEXT_READ_CACHE_CHUNK_BYTES as u64;

    /// The bytes of a file at `offset` of `length`: each a function of its offset and the
    /// file's `salt`, so any slice says where it was and which file it came from.
    fn file_bytes(offset: u64, length: u64, salt: u8) -> Vec<u8> {
        (offset..offset + length)
            .map(|at| (at % 251) as u8 ^ salt)
            .collect()
    }

    /// Every range of up to two chunks and a little, at every offset around the first three
    /// chunk boundaries, against every `end` around them: a chunk is found exactly when the
    /// range is nonempty, within one chunk and before `end`, and it starts at the chunk's
    /// boundary, covers the range and stops at the chunk's end or `end`.
    #[test]
    fn chunk_of_answers_at_every_boundary() {
        let mut places = Vec::new();
        for boundary in [0, CHUNK, 2 * CHUNK, 3 * CHUNK] {
            places.extend(boundary.saturating_sub(3)..=boundary + 3);
        }
        let lengths = [0, 1, 2, 3, 4095, 4096, 4097, CHUNK - 1, CHUNK, CHUNK + 1];
        for &offset in &places {
            for &length in &lengths {
                for &end in &places {
                    let length = length as u32;
                    let found = chunk_of(offset, length, end);
                    let range_end = offset + u64::from(length);
                    let index = offset / CHUNK;
                    let fits = length > 0 && range_end <= (index + 1) * CHUNK && range_end <= end;
                    assert_eq!(found.is_some(), fits, "{offset}+{length} end {end}");
                    if let Some((found_index, start, bytes)) = found {
                        assert_eq!(found_index, index);
                        assert_eq!(start, index * CHUNK);
                        assert_eq!(start + u64::from(bytes), ((index + 1) * CHUNK).min(end));
                        assert!(start <= offset && range_end <= start + u64::from(bytes));
                    }
                }
            }
        }
        // The largest offsets do not overflow.
        assert_eq!(chunk_of(u64::MAX - 1, 2, u64::MAX), None);
        assert!(chunk_of(u64::MAX - 1, 1, u64::MAX).is_some());
    }

    /// Random ranges of files that grow (an open segment) and are replaced under their names
    /// (a snapshot of the same replay point), read through the cache as `Log::read_texts`
    /// does, some reads asked before a replacement and inserted after it: every range
    /// answered is the file's bytes as they are now, and the cache never holds more than its
    /// bound.
    #[test]
    fn ranges_read_through_the_cache_are_the_files_bytes() {
        let mut hits = 0;
        for seed in 0..40u64 {
            let mut random = crate::random::SplitMix64::new(seed);
            // Half the seeds with a capacity of a few chunks: chunks go all the time.
            let mut cache = match seed % 2 {
                0 => ReadCache::default(),
                _ => ReadCache::with_capacity(3 * CHUNK as usize + 100),
            };
            let files = [TextFile::Segment(1), TextFile::Snapshot(1)];
            // Each file's salt (its bytes now), its size, and its end known written.
            let mut contents: [(u8, u64, u64); 2] = [
                (0, 40 * CHUNK, 5 * CHUNK + 100),
                (7, 3000 * CHUNK, 3000 * CHUNK),
            ];
            // Reads asked and not yet inserted: (file, index, bytes, epoch).
            let mut in_flight: Vec<(usize, u64, Bytes, u64)> = Vec::new();
            for _ in 0..3000 {
                let which = (random.next_u64() % 2) as usize;
                let file = files[which];
                match random.next_u64() % 10 {
                    // The segment grows.
                    0 if which == 0 => {
                        let (_, size, end) = &mut contents[0];
                        *end = (*end + random.next_u64() % 3000).min(*size);
                    }
                    // The snapshot is replaced under its name.
                    1 if which == 1 => {
                        contents[1].0 = contents[1].0.wrapping_add(1);
                        cache.forget(file);
                    }
                    // A read in flight completes.
                    2 if !in_flight.is_empty() => {
                        let at = (random.next_u64() % in_flight.len() as u64) as usize;
                        let (which, index, bytes, epoch) = in_flight.swap_remove(at);
                        cache.insert(files[which], index, bytes, epoch);
                    }
                    _ => {
                        let (salt, _, end) = contents[which];
                        let offset = random.next_u64() % end;
                        let length = (1 + random.next_u64() % 600).min(end - offset) as u32;
                        let want = file_bytes(offset, u64::from(length), salt);
                        if let Some(got) = cache.get(file, offset, length) {
                            hits += 1;
                            assert_eq!(got[..], want[..], "seed {seed}: {file:?} at {offset}");
                        } else if let Some((index, start, size)) = chunk_of(offset, length, end) {
                            let chunk = Bytes::from(file_bytes(start, u64::from(size), salt));
                            let epoch = cache.epoch();
                            if random.next_u64() % 3 == 0 {
                                in_flight.push((which, index, chunk, epoch));
                            } else {
                                cache.insert(file, index, chunk, epoch);
                            }
                        }
                    }
                }
                assert!(cache.bytes <= cache.capacity);
                assert_eq!(
                    cache.bytes,
                    cache.chunks.values().map(Bytes::len).sum::<usize>()
                );
            }
        }
        assert!(hits > 10_000, "{hits} hits");
    }

    /// The cache takes an eighth of a share, at most `TEXT_READ_CACHE_BYTES`; no share (the
    /// largest) gives it all.
    #[test]
    fn the_capacity_is_an_eighth_of_the_share_at_most() {
        assert_eq!(capacity_for(u64::MAX), TEXT_READ_CACHE_BYTES);
        assert_eq!(capacity_for(0), 0);
        assert_eq!(capacity_for(1 << 20), 128 << 10);
        assert_eq!(
            capacity_for(8 * TEXT_READ_CACHE_BYTES as u64 - 8),
            TEXT_READ_CACHE_BYTES - 1
        );
        assert_eq!(
            capacity_for(8 * TEXT_READ_CACHE_BYTES as u64),
            TEXT_READ_CACHE_BYTES
        );
        // Less than a chunk keeps nothing.
        let mut cache = ReadCache::with_capacity(capacity_for(CHUNK * 8 - 8));
        cache.insert(
            TextFile::Segment(1),
            0,
            Bytes::from(vec![0; CHUNK as usize]),
            0,
        );
        assert!(cache.get(TextFile::Segment(1), 0, 1).is_none());
        assert_eq!(cache.bytes, 0);
    }

    /// Past its bound the oldest chunks go first; a chunk read again after it went counts
    /// from then.
    #[test]
    fn the_oldest_chunks_go_first() {
        let mut cache = ReadCache::default();
        let file = TextFile::Segment(9);
        let held = (TEXT_READ_CACHE_BYTES as u64 / CHUNK) as usize;
        let chunk = Bytes::from(vec![1; CHUNK as usize]);
        for index in 0..held as u64 {
            cache.insert(file, index, chunk.clone(), 0);
        }
        assert_eq!(cache.bytes, TEXT_READ_CACHE_BYTES);
        assert!(cache.get(file, 0, 1).is_some());
        cache.insert(file, held as u64, chunk.clone(), 0);
        assert!(cache.get(file, 0, 1).is_none(), "the oldest went");
        assert!(cache.get(file, CHUNK, 1).is_some());
        // A shorter chunk replaced by a longer one counts once.
        cache.insert(file, 0, chunk.slice(..100), 0);
        cache.insert(file, 0, chunk.clone(), 0);
        assert!(cache.bytes <= TEXT_READ_CACHE_BYTES);
        assert!(cache.get(file, 200, 1).is_some());
        // A read asked before a `forget` inserts nothing.
        let epoch = cache.epoch();
        cache.forget(TextFile::Snapshot(3));
        cache.insert(file, 5000, chunk, epoch);
        assert!(cache.get(file, 5000 * CHUNK, 1).is_none());
    }
}
