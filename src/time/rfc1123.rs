//! RFC 1123 dates (`Thu, 27 Oct 2022 22:04:45 GMT`), the form of HTTP headers and message times,
//! written into a fixed array without allocating and read back strictly (a request's date),
//! plus a per-thread cache of the current second's `Date` header so most responses copy 29
//! bytes instead of formatting.

use std::cell::Cell;

use super::civil::{civil_from_unix_s, days_in_month, put_digits, unix_s_from_civil, Civil};

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

/// `rfc1123(unix_ms)`, copied from this thread's `Date` cache when `unix_ms` falls in its second
/// (a new message's insertion time, a request's next-visible time), else formatted; the cache
/// keeps the current second either way.
pub fn rfc1123_memoized(unix_ms: u64) -> [u8; RFC1123_BYTES] {
    let (cached_s, cached) = DATE_CACHE.with(Cell::get);
    if cached_s == unix_ms / 1000 {
        cached
    } else {
        rfc1123(unix_ms)
    }
}

/// Parses an RFC 1123 date as HTTP sends it (`Sun, 06 Nov 1994 08:49:37 GMT`) into ms since the
/// Unix epoch. Strict: exactly that form, a weekday that is the date's, no date before 1970.
/// What `rfc1123` writes is what it reads, so a date is parsed by formatting the value it names
/// and comparing (one check covers ranges, the weekday and the layout).
pub fn parse_rfc1123_ms(text: &[u8]) -> Option<u64> {
    if text.len() != RFC1123_BYTES {
        return None;
    }
    // A client's date is mostly the second of the last response's `Date`: the cache holds what
    // the comparison below would format.
    let (cached_s, cached) = DATE_CACHE.with(Cell::get);
    if cached_s != u64::MAX && cached[..] == *text {
        return Some(cached_s * 1000);
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = &text[range];
        digits.iter().all(u8::is_ascii_digit).then(|| {
            digits
                .iter()
                .fold(0, |value, digit| value * 10 + u32::from(digit - b'0'))
        })
    };
    let month = MONTHS.iter().position(|name| &text[8..11] == *name)? as u32 + 1;
    let civil = Civil {
        year: i64::from(number(12..16)?),
        month,
        day: number(5..7)?.clamp(1, days_in_month(i64::from(number(12..16)?), month)),
        hour: number(17..19)?.min(23),
        minute: number(20..22)?.min(59),
        second: number(23..25)?.min(59),
    };
    let unix_ms = unix_s_from_civil(civil)?.checked_mul(1000)?;
    (rfc1123(unix_ms)[..] == *text).then_some(unix_ms)
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

    #[test]
    fn memoized_and_cached_parse_agree_with_the_plain_ones() {
        // Each test runs on its own thread, so this one's cache is its own.
        let now_ms = 1_795_305_600_250;
        rfc1123_cached(now_ms);
        for unix_ms in [
            now_ms,
            1_795_305_600_999,
            1_795_305_601_000,
            0,
            253_402_300_799_000,
        ] {
            assert_eq!(rfc1123_memoized(unix_ms), rfc1123(unix_ms), "{unix_ms}");
            assert_eq!(
                parse_rfc1123_ms(&rfc1123(unix_ms)),
                Some(unix_ms / 1000 * 1000),
                "{unix_ms}"
            );
        }
        // The cached second is read, not replaced, by either.
        assert_eq!(DATE_CACHE.with(Cell::get).0, now_ms / 1000);
        assert_eq!(parse_rfc1123_ms(b"Sun, 22 Nov 2026 00:00:00 GMX"), None);
    }

    #[test]
    fn parse_reads_what_format_writes_and_nothing_else() {
        for unix_ms in [0, 784_111_777_000, 1_795_305_600_000, 253_402_300_799_000] {
            let text = rfc1123(unix_ms);
            assert_eq!(parse_rfc1123_ms(&text), Some(unix_ms), "{text:?}");
        }
        for invalid in [
            "",
            "Sun, 06 Nov 1994 08:49:37 GMT ",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT",
            "Thu, 31 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:3x GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994     ",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "whenever",
        ] {
            assert_eq!(parse_rfc1123_ms(invalid.as_bytes()), None, "{invalid:?}");
        }
    }
}
