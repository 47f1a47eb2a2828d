//! Date formats on the wire: RFC 1123 (`Thu, 27 Oct 2022 22:04:45 GMT`) for headers and message
//! times, written into a fixed array without allocating, plus a per-thread cache of the current
//! second's `Date` header so most responses copy 29 bytes instead of formatting.

use std::cell::Cell;

/// Length of an RFC 1123 date: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const RFC1123_BYTES: usize = 29;

const WEEKDAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// A calendar date and time of day in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// Converts seconds since the Unix epoch to a UTC calendar date (Howard Hinnant's algorithm).
pub fn civil_from_unix_s(unix_s: u64) -> Civil {
    let days = (unix_s / 86_400) as i64;
    let second_of_day = (unix_s % 86_400) as u32;
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: second_of_day / 3600,
        minute: second_of_day / 60 % 60,
        second: second_of_day % 60,
    }
}

/// Converts a UTC calendar date to seconds since the Unix epoch; `None` before 1970.
pub fn unix_s_from_civil(civil: Civil) -> Option<u64> {
    let year = civil.year - i64::from(civil.month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(civil.month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(civil.day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400
        + i64::from(civil.hour) * 3600
        + i64::from(civil.minute) * 60
        + i64::from(civil.second);
    u64::try_from(seconds).ok()
}

/// Formats `unix_ms` (truncated to the second) as RFC 1123.
pub fn rfc1123(unix_ms: u64) -> [u8; RFC1123_BYTES] {
    let unix_s = unix_ms / 1000;
    let civil = civil_from_unix_s(unix_s);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[0..3].copy_from_slice(WEEKDAYS[((unix_s / 86_400) % 7) as usize]);
    put_two_digits(&mut out[5..7], civil.day);
    out[8..11].copy_from_slice(MONTHS[(civil.month - 1) as usize]);
    let year = civil.year.clamp(0, 9999) as u32;
    put_two_digits(&mut out[12..14], year / 100);
    put_two_digits(&mut out[14..16], year % 100);
    put_two_digits(&mut out[17..19], civil.hour);
    put_two_digits(&mut out[20..22], civil.minute);
    put_two_digits(&mut out[23..25], civil.second);
    out
}

fn put_two_digits(out: &mut [u8], value: u32) {
    out[0] = b'0' + (value / 10) as u8;
    out[1] = b'0' + (value % 10) as u8;
}

thread_local! {
    static DATE_CACHE: Cell<(u64, [u8; RFC1123_BYTES])> = const { Cell::new((u64::MAX, [0; RFC1123_BYTES])) };
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
    fn civil_round_trips_over_four_centuries_of_days() {
        let mut unix_s = 0u64;
        while unix_s < 253_402_300_799 {
            let civil = civil_from_unix_s(unix_s);
            assert_eq!(unix_s_from_civil(civil), Some(unix_s), "{civil:?}");
            unix_s += 86_400 * 7 + 3_601;
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
