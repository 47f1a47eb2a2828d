//! Vectors in pages, for recovery's images: a backlog of millions of messages is held twice
//! while it is read (the records replayed, then the messages by slot) and once more while the
//! shard state is built from it. In one `Vec` each copy stays whole until the next is done,
//! three times the state's own memory at the peak; in pages of `RECOVERY_PAGE_BYTES` each page
//! is freed as soon as it has been passed (`into_iter`), so a copy shrinks while the next grows.
//!
//! - `Pages`: a sequence, appended to and drained in order.
//! - `SlotPages`: values by dense index (a slab slot), drained in index order.
//!
//! A page holds at least `RECOVERY_PAGE_BYTES`, at or above glibc's largest threshold for
//! mapping an allocation of its own: freeing a full page gives its memory back to the system at
//! once. The first page grows as a `Vec` does, so a small image reserves little (reserving it
//! whole, a nearly empty restart asked for about 124 MB a shard, which a `ulimit -v` or strict
//! overcommit refused: helper-60's review); every later one, opened once an image is large,
//! is reserved whole at once (only what is written to is ever touched).

use crate::limits::RECOVERY_PAGE_BYTES;

/// Entries of `T` in a page of at least `page_bytes`: a power of two (an index's page and
/// place in it are a shift and a mask), one at least.
fn entries_per_page<T>(page_bytes: usize) -> usize {
    page_bytes
        .div_ceil(std::mem::size_of::<T>().max(1))
        .next_power_of_two()
}

/// A sequence in pages, appended to with `push` and consumed in order by `into_iter`.
pub struct Pages<T> {
    pages: Vec<Vec<T>>,
    per_page: usize,
}

#[cfg(test)]
thread_local! {
    /// The page size of the images made on this thread (`with_test_page_bytes`).
    static TEST_PAGE_BYTES: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// `RECOVERY_PAGE_BYTES`, or in tests the size `with_test_page_bytes` asks for.
fn default_page_bytes() -> usize {
    #[cfg(test)]
    if let Some(bytes) = TEST_PAGE_BYTES.with(std::cell::Cell::get) {
        return bytes;
    }
    RECOVERY_PAGE_BYTES
}

/// Runs `run` with every `Pages` and `SlotPages` made on this thread in pages of
/// `page_bytes`: a recovery of a few messages (on the simulated disk, which recovers on the
/// calling thread) then passes page edges.
#[cfg(test)]
pub fn with_test_page_bytes<R>(page_bytes: usize, run: impl FnOnce() -> R) -> R {
    TEST_PAGE_BYTES.with(|bytes| bytes.set(Some(page_bytes)));
    let result = run();
    TEST_PAGE_BYTES.with(|bytes| bytes.set(None));
    result
}

impl<T> Default for Pages<T> {
    fn default() -> Self {
        Pages::with_page_bytes(default_page_bytes())
    }
}

impl<T> Pages<T> {
    /// Pages of at least `page_bytes` (tests use small ones).
    pub fn with_page_bytes(page_bytes: usize) -> Pages<T> {
        Pages {
            pages: Vec::new(),
            per_page: entries_per_page::<T>(page_bytes),
        }
    }

    /// Appends `value`.
    pub fn push(&mut self, value: T) {
        match self.pages.last_mut() {
            Some(page) if page.len() < self.per_page => page.push(value),
            Some(_) => {
                let mut page = Vec::with_capacity(self.per_page);
                crate::huge_pages::advise(&page);
                page.push(value);
                self.pages.push(page);
            }
            None => self.pages.push(vec![value]),
        }
    }

    /// The values in order (and, reversed, from the last).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.pages.iter().flatten()
    }
}

impl<T> IntoIterator for Pages<T> {
    type Item = T;
    type IntoIter = std::iter::Flatten<std::vec::IntoIter<Vec<T>>>;

    /// The values in order, each page freed once its last value is taken.
    fn into_iter(self) -> Self::IntoIter {
        self.pages.into_iter().flatten()
    }
}

/// Values by index in pages (`Vec<Option<T>>` in shape), for dense indices such as slab slots.
/// A page's entries are written (as `None`) only up to the highest index set in it.
pub struct SlotPages<T> {
    pages: Vec<Vec<Option<T>>>,
    per_page: usize,
    /// `per_page`'s logarithm.
    page_shift: u32,
}

impl<T> Default for SlotPages<T> {
    fn default() -> Self {
        SlotPages::with_page_bytes(default_page_bytes())
    }
}

impl<T> SlotPages<T> {
    /// Pages of at least `page_bytes` (tests use small ones).
    pub fn with_page_bytes(page_bytes: usize) -> SlotPages<T> {
        let per_page = entries_per_page::<Option<T>>(page_bytes);
        SlotPages {
            pages: Vec::new(),
            per_page,
            page_shift: per_page.trailing_zeros(),
        }
    }

    fn place(&self, index: usize) -> (usize, usize) {
        (index >> self.page_shift, index & (self.per_page - 1))
    }

    /// One past the highest index ever set (0 when none was).
    pub fn span(&self) -> usize {
        match self.pages.last() {
            Some(last) => ((self.pages.len() - 1) << self.page_shift) + last.len(),
            None => 0,
        }
    }

    /// The bytes its pages reserve.
    #[cfg(test)]
    pub fn reserved_bytes(&self) -> usize {
        let entries: usize = self.pages.iter().map(Vec::capacity).sum();
        entries * std::mem::size_of::<Option<T>>()
    }

    /// The value at `index`, if any.
    pub fn get(&self, index: usize) -> Option<&T> {
        let (page, offset) = self.place(index);
        self.pages.get(page)?.get(offset)?.as_ref()
    }

    /// The value at `index`, if any, to change.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        let (page, offset) = self.place(index);
        self.pages.get_mut(page)?.get_mut(offset)?.as_mut()
    }

    /// Sets the value at `index`, replacing any.
    pub fn insert(&mut self, index: usize, value: T) {
        let (page, offset) = self.place(index);
        // Pages passed over stay unreserved until an index in them is set.
        while self.pages.len() <= page {
            self.pages.push(Vec::new());
        }
        let first = page == 0;
        let page = &mut self.pages[page];
        if page.capacity() == 0 && !first {
            page.reserve_exact(self.per_page);
            crate::huge_pages::advise(page);
        }
        if page.len() <= offset {
            page.resize_with(offset + 1, || None);
        }
        page[offset] = Some(value);
    }

    /// Takes the value at `index` out, if any.
    pub fn remove(&mut self, index: usize) -> Option<T> {
        let (page, offset) = self.place(index);
        self.pages.get_mut(page)?.get_mut(offset)?.take()
    }

    /// The values, by index.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.pages.iter().flatten().flatten()
    }

    /// The values, by index, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.pages.iter_mut().flatten().flatten()
    }

    /// The values with their indices, by index (`rev` for the highest first).
    pub fn indexed(&self) -> impl DoubleEndedIterator<Item = (usize, &T)> {
        let shift = self.page_shift;
        self.pages
            .iter()
            .enumerate()
            .flat_map(move |(page, values)| {
                let first = page << shift;
                let values = values.iter().enumerate();
                values.filter_map(move |(offset, value)| Some((first + offset, value.as_ref()?)))
            })
    }

    /// The values with their indices, by index, each page freed once its last entry is passed.
    pub fn into_indexed(self) -> impl Iterator<Item = (usize, T)> {
        let shift = self.page_shift;
        self.pages
            .into_iter()
            .enumerate()
            .flat_map(move |(page, values)| {
                let first = page << shift;
                values
                    .into_iter()
                    .enumerate()
                    .filter_map(move |(offset, value)| Some((first + offset, value?)))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::{entries_per_page, Pages, SlotPages};
    use crate::limits::RECOVERY_PAGE_BYTES;
    use crate::random::SplitMix64;

    /// A page holds at least its bytes, so that it is mapped on its own; never zero entries.
    #[test]
    fn a_page_holds_at_least_its_bytes() {
        assert_eq!(entries_per_page::<u64>(24), 4);
        assert_eq!(entries_per_page::<u64>(32), 4);
        assert_eq!(entries_per_page::<u64>(33), 8);
        assert_eq!(entries_per_page::<u64>(1), 1);
        assert_eq!(entries_per_page::<u64>(0), 1);
        // 335,545 entries of 100 bytes reach 32 MiB: 2^19 of them.
        assert_eq!(entries_per_page::<[u8; 100]>(RECOVERY_PAGE_BYTES), 1 << 19);
        assert_eq!(entries_per_page::<[u8; 128]>(RECOVERY_PAGE_BYTES), 1 << 18);
        assert_eq!(entries_per_page::<()>(8), 8);
    }

    /// Every length around the page boundaries, pushed, read both ways and drained in order.
    #[test]
    fn a_sequence_reads_back_in_order_at_every_length() {
        for length in 0..=13 {
            let mut pages = Pages::with_page_bytes(3 * std::mem::size_of::<u32>());
            assert_eq!(pages.per_page, 4);
            for value in 0..length {
                pages.push(value);
            }
            let expected: Vec<u32> = (0..length).collect();
            assert_eq!(pages.iter().copied().collect::<Vec<_>>(), expected);
            let reversed: Vec<u32> = pages.iter().rev().copied().collect();
            assert_eq!(reversed, expected.iter().rev().copied().collect::<Vec<_>>());
            assert_eq!(pages.pages.len(), (length as usize).div_ceil(4));
            // The first page grows as a vector does; every later one is reserved whole.
            for (index, page) in pages.pages.iter().enumerate() {
                assert!(index == 0 || page.capacity() == 4, "{length}: page {index}");
            }
            assert_eq!(pages.into_iter().collect::<Vec<_>>(), expected);
        }
    }

    /// Random inserts, reads, changes and removals over indices around several page edges,
    /// against a plain vector of options; pages of 1, 2, 4 and 8 entries.
    #[test]
    fn slots_agree_with_a_vector_of_options() {
        let mut random = SplitMix64::new(7);
        for per_page in [1, 2, 4, 8] {
            for _ in 0..200 {
                let bytes = per_page * std::mem::size_of::<Option<u64>>();
                let mut slots: SlotPages<u64> = SlotPages::with_page_bytes(bytes);
                assert_eq!(slots.per_page, per_page);
                let mut model: Vec<Option<u64>> = Vec::new();
                let mut ever_set = std::collections::BTreeSet::new();
                let span = 1 + random.next_u64() as usize % (4 * per_page + 3);
                for _ in 0..random.next_u64() % 40 {
                    let index = random.next_u64() as usize % span;
                    let value = random.next_u64();
                    match random.next_u64() % 4 {
                        0 | 1 => {
                            slots.insert(index, value);
                            ever_set.insert(index);
                            if model.len() <= index {
                                model.resize(index + 1, None);
                            }
                            model[index] = Some(value);
                        }
                        2 => {
                            let taken = model.get_mut(index).and_then(Option::take);
                            assert_eq!(slots.remove(index), taken);
                        }
                        _ => {
                            let expected = model.get_mut(index).and_then(Option::as_mut);
                            let found = slots.get_mut(index);
                            assert_eq!(found.as_deref(), expected.as_deref());
                            if let (Some(found), Some(expected)) = (found, expected) {
                                *found ^= value;
                                *expected ^= value;
                            }
                        }
                    }
                    for index in 0..span + per_page {
                        let expected = model.get(index).copied().flatten();
                        assert_eq!(slots.get(index).copied(), expected, "{index}");
                    }
                }
                // A page is written only up to the highest index ever set in it, and reserved
                // only once one is (whole, but for the first).
                for (page, entries) in slots.pages.iter().enumerate() {
                    let mut set_in_page = ever_set.range(page * per_page..(page + 1) * per_page);
                    let highest = set_in_page.next_back().map(|index| index % per_page);
                    assert_eq!(entries.len(), highest.map_or(0, |highest| highest + 1));
                    match highest {
                        // The first page grows as a vector does.
                        Some(_) if page == 0 => assert!(entries.capacity() >= entries.len()),
                        Some(_) => assert_eq!(entries.capacity(), per_page),
                        None => assert_eq!(entries.capacity(), 0),
                    }
                }
                assert_eq!(
                    slots.span(),
                    ever_set.last().map_or(0, |highest| highest + 1)
                );
                let expected: Vec<u64> = model.iter().flatten().copied().collect();
                assert_eq!(slots.values().copied().collect::<Vec<_>>(), expected);
                slots
                    .values_mut()
                    .for_each(|value| *value = value.wrapping_add(1));
                let added: Vec<(usize, u64)> = model
                    .iter()
                    .enumerate()
                    .filter_map(|(index, value)| Some((index, (*value)?.wrapping_add(1))))
                    .collect();
                assert_eq!(slots.into_indexed().collect::<Vec<_>>(), added);
            }
        }
    }
}
