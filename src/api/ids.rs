//! Request IDs: UUID-formatted values from a per-thread generator (SplitMix64 seeded once from the
//! OS), so a response does not pay for a system call. They only need to be unique enough to find a
//! request in a log, not unpredictable.

use std::cell::Cell;

use crate::random::SplitMix64;

thread_local! {
    static STREAM: Cell<SplitMix64> =
        Cell::new(SplitMix64::new(uuid::Uuid::new_v4().as_u64_pair().0));
}

fn next_u64() -> u64 {
    STREAM.with(|stream| {
        let mut next = stream.get();
        let value = next.next_u64();
        stream.set(next);
        value
    })
}

/// A fresh request ID, in UUID v4 layout.
pub fn request_id() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(
        ((u128::from(next_u64()) << 64) | u128::from(next_u64())).to_le_bytes(),
    )
    .into_uuid()
}

/// Writes `id` hyphenated and lowercase into `out` (36 bytes) without allocating.
pub fn hyphenated(id: uuid::Uuid) -> [u8; uuid::fmt::Hyphenated::LENGTH] {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    id.hyphenated().encode_lower(&mut text);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_v4_and_distinct() {
        let first = request_id();
        let second = request_id();
        assert_ne!(first, second);
        assert_eq!(first.get_version_num(), 4);
        assert_eq!(hyphenated(first).len(), 36);
        assert_eq!(&hyphenated(first)[..], first.to_string().as_bytes());
    }
}
