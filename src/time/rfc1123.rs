//! RFC 1123 dates (`Thu, 27 Oct 2022 22:04:45 GMT`), the form of HTTP headers and message times,
//! written into a fixed array without allocating, plus a per-thread cache of the current
//! second's `Date` header so most responses copy 29 bytes instead of formatting.

use std::cell::Cell;

use super::civil::{civil_from_unix_s, put_digits};

/// Length of an RFC 1123 date: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const RFC1123_BYTES: usize = 29;

const WEEKDAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Formats `unix_ms` (truncated to the second) as RFC 1123.
pub fn rfc1123(unix_ms: u64) -> [u8; RFC1123_BYTES] {
    let unix_s = unix_ms / 1000;
    let civil = civil_from_unix_s(unix_s);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[0..3].copy_from_slice(WEEKDAYS[((unix_s / 86_400) % 7) as usize]);
    put_digits(&mut out[5..7], u64::from(civil.day));
    out[8..11].copy_from_slice(MONTHS[(civil.month - 1) as usize]);
    put_digits(&mut out[12..16], civil.year.clamp(0, 9999) as u64);
    put_digits(&mut out[17..19], u64::from(civil.hour));
    put_digits(&mut out[20..22], u64::from(civil.minute));
    put_digits(&mut out[23..25], u64::from(civil.second));
    out
}

thread_local! {
    static DATE_CACHE: Cell<(u64, [u8; RFC1123_BYTES])> =
        const { Cell::new((u64::MAX, [0; RFC1123_BYTES])) };
}

/// The `Date` header value for `now_ms`, formatted once per second per thread (each shard is one
/// thread, so the cache is never shared).
pub fn rfc1123_cached(now_ms: u64) -> [u8; RFC1123_BYTES] {
    let now_s = now_ms / 1000;
    DATE_CACHE.with(|cache| {
        let (cached_s, cached) = cache.get();
        if cached_s == now_s {
            return cached;
        }
        let formatted = rfc1123(now_ms);
        cache.set((now_s, formatted));
        formatted
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1123_table() {
        let cases = [
            (0u64, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (1_666_908_285_000, "Thu, 27 Oct 2022 22:04:45 GMT"),
            (1_795_305_600_000, "Sun, 22 Nov 2026 00:00:00 GMT"),
            (951_782_400_000, "Tue, 29 Feb 2000 00:00:00 GMT"),
            (253_402_300_799_000, "Fri, 31 Dec 9999 23:59:59 GMT"),
            (1_795_305_600_999, "Sun, 22 Nov 2026 00:00:00 GMT"),
        ];
        for (unix_ms, expected) in cases {
            assert_eq!(
                std::str::from_utf8(&rfc1123(unix_ms)).unwrap(),
                expected,
                "{unix_ms}"
            );
        }
    }

    #[test]
    fn cache_follows_the_second() {
        let first = rfc1123_cached(1_795_305_600_000);
        let same_second = rfc1123_cached(1_795_305_600_500);
        let next_second = rfc1123_cached(1_795_305_601_000);
        assert_eq!(first, same_second);
        assert_eq!(&next_second[..], b"Sun, 22 Nov 2026 00:00:01 GMT");
    }
}
