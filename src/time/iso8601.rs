//! ISO 8601 instants. Read as Azure accepts them in SAS tokens (`st`, `se`) and stored access
//! policies (`Start`, `Expiry`): `2026-11-22`, `2026-11-22T00:00Z`, `2026-11-22T00:00:00Z`,
//! `2026-11-22T00:00:00.1234567Z`, with `Z` or a `±hh:mm` offset, into milliseconds since the
//! Unix epoch, the unit of every clock reading in azq. Written as Azure writes the time of an
//! error: seven fractional digits and `Z`.

use super::civil::{civil_from_unix_s, days_in_month, put_digits, unix_s_from_civil, Civil};

/// Earliest year accepted: instants before the epoch do not fit `u64` milliseconds, and no SAS
/// token or access policy needs one.
const YEAR_MIN: u32 = 1970;
const MS_PER_MINUTE: i64 = 60_000;

/// Length of an instant as `format_iso8601_7` writes it: `2026-11-22T00:00:00.0000000Z`.
pub const ISO8601_7_BYTES: usize = 28;

/// Parses one instant; `None` when the text is not one of the accepted forms or names an
/// impossible date or time.
pub fn parse_iso8601_ms(text: &str) -> Option<u64> {
    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        at: 0,
    };
    let year = cursor.number(4)?;
    cursor.literal(b'-')?;
    let month = cursor.number(2)?;
    cursor.literal(b'-')?;
    let day = cursor.number(2)?;
    if year < YEAR_MIN
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(i64::from(year), month)
    {
        return None;
    }
    let midnight = Civil {
        year: i64::from(year),
        month,
        day,
        hour: 0,
        minute: 0,
        second: 0,
    };
    let date_ms = i64::try_from(unix_s_from_civil(midnight)?).ok()? * 1000;
    if cursor.is_done() {
        return u64::try_from(date_ms).ok();
    }

    cursor.literal(b'T')?;
    let hour = cursor.number(2)?;
    cursor.literal(b':')?;
    let minute = cursor.number(2)?;
    let mut second = 0;
    let mut millisecond = 0;
    if cursor.peek() == Some(b':') {
        cursor.literal(b':')?;
        second = cursor.number(2)?;
        if cursor.peek() == Some(b'.') {
            cursor.literal(b'.')?;
            millisecond = cursor.fraction_ms()?;
        }
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let offset_ms = cursor.zone_offset_ms()?;
    if !cursor.is_done() {
        return None;
    }
    let local_ms = date_ms
        + i64::from(hour) * 60 * MS_PER_MINUTE
        + i64::from(minute) * MS_PER_MINUTE
        + i64::from(second) * 1000
        + i64::from(millisecond);
    u64::try_from(local_ms - offset_ms).ok()
}

/// A read position in the text being parsed.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn literal(&mut self, expected: u8) -> Option<()> {
        (self.peek()? == expected).then(|| self.at += 1)
    }

    /// Exactly `digit_count` decimal digits.
    fn number(&mut self, digit_count: usize) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + digit_count)?;
        let mut value = 0;
        for &digit in digits {
            if !digit.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u32::from(digit - b'0');
        }
        self.at += digit_count;
        Some(value)
    }

    /// One to seven fractional-second digits (.NET's `fffffff`, the most Azure reads; the .NET
    /// and JS SDKs write seven), truncated to milliseconds.
    fn fraction_ms(&mut self) -> Option<u32> {
        let digit_count = self.bytes[self.at..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        if !(1..=7).contains(&digit_count) {
            return None;
        }
        let mut millisecond = 0;
        for place in 0..3 {
            let digit = self
                .bytes
                .get(self.at + place)
                .filter(|b| b.is_ascii_digit());
            millisecond = millisecond * 10 + digit.map_or(0, |digit| u32::from(digit - b'0'));
        }
        self.at += digit_count;
        Some(millisecond)
    }

    /// `Z` (UTC) or `+hh:mm` / `-hh:mm`, as milliseconds east of UTC.
    fn zone_offset_ms(&mut self) -> Option<i64> {
        let sign = match self.peek()? {
            b'Z' => {
                self.at += 1;
                return Some(0);
            }
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        self.at += 1;
        let hours = self.number(2)?;
        self.literal(b':')?;
        let minutes = self.number(2)?;
        if hours > 23 || minutes > 59 {
            return None;
        }
        Some(sign * (i64::from(hours) * 60 + i64::from(minutes)) * MS_PER_MINUTE)
    }
}

/// Formats `unix_ms` as `2026-11-22T00:00:00.1230000Z`: milliseconds, then zeros to seven
/// fractional digits, the form of the `Time` line of Azure's error messages.
pub fn format_iso8601_7(unix_ms: u64) -> [u8; ISO8601_7_BYTES] {
    let civil = civil_from_unix_s(unix_ms / 1000);
    let mut text = *b"0000-00-00T00:00:00.0000000Z";
    put_digits(&mut text[0..4], civil.year.clamp(0, 9999) as u64);
    put_digits(&mut text[5..7], u64::from(civil.month));
    put_digits(&mut text[8..10], u64::from(civil.day));
    put_digits(&mut text[11..13], u64::from(civil.hour));
    put_digits(&mut text[14..16], u64::from(civil.minute));
    put_digits(&mut text[17..19], u64::from(civil.second));
    put_digits(&mut text[20..23], unix_ms % 1000);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-22T00:00:00Z, checked with `date -u -d 2026-11-22 +%s`.
    const NOVEMBER_22_MS: u64 = 1_795_305_600_000;

    #[test]
    fn valid_table() {
        let cases: &[(&str, u64)] = &[
            ("1970-01-01", 0),
            ("1970-01-01T00:00:00Z", 0),
            ("2026-11-22", NOVEMBER_22_MS),
            ("2026-11-22T00:00Z", NOVEMBER_22_MS),
            ("2026-11-22T00:00:00Z", NOVEMBER_22_MS),
            ("2026-11-22T00:17:36Z", NOVEMBER_22_MS + 1_056_000),
            ("2026-11-22T00:00:00.5Z", NOVEMBER_22_MS + 500),
            ("2026-11-22T00:00:00.1234567Z", NOVEMBER_22_MS + 123),
            ("2026-11-22T00:00:00.9999999Z", NOVEMBER_22_MS + 999),
            ("2026-11-22T01:30:00+01:30", NOVEMBER_22_MS),
            ("2026-11-21T22:00:00-02:00", NOVEMBER_22_MS),
            ("2024-02-29T12:00:00Z", 1_709_208_000_000),
            ("2000-03-01", 951_868_800_000),
            ("9999-12-31T23:59:59Z", 253_402_300_799_000),
        ];
        for &(text, expected) in cases {
            assert_eq!(parse_iso8601_ms(text), Some(expected), "{text}");
        }
    }

    #[test]
    fn formatted_instants_read_back() {
        let cases = [
            (0, "1970-01-01T00:00:00.0000000Z"),
            (NOVEMBER_22_MS + 1_056_123, "2026-11-22T00:17:36.1230000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.9990000Z"),
        ];
        for (unix_ms, text) in cases {
            assert_eq!(&format_iso8601_7(unix_ms), text.as_bytes());
            assert_eq!(parse_iso8601_ms(text), Some(unix_ms), "{text}");
        }
    }

    #[test]
    fn invalid_table() {
        let cases = [
            "",
            "2026",
            "2026-11",
            "2026-1-22",
            "2026-11-22T",
            "2026-11-22T00",
            "2026-11-22T00:00",
            "2026-11-22T00:00:00",
            "2026-11-22 00:00:00Z",
            "2026-11-22T00:00:00z",
            "2026-11-22T00:00:00.Z",
            "2026-11-22T00:00:00.12345678Z",
            "2026-11-22T00:00:00.1234567890Z",
            "2026-11-22T00:00:00ZZ",
            "2026-11-22T00:00:00+01",
            "2026-11-22T00:00:00+24:00",
            "2026-13-01",
            "2026-00-01",
            "2026-11-31",
            "2025-02-29",
            "1900-02-29",
            "2026-11-22T24:00:00Z",
            "2026-11-22T00:60:00Z",
            "2026-11-22T00:00:60Z",
            "1969-12-31",
            "1970-01-01T00:00:00+00:01",
            "+2026-11-22",
            "２０２６-11-22",
            "Sun, 22 Nov 2026 00:00:00 GMT",
        ];
        for text in cases {
            assert_eq!(parse_iso8601_ms(text), None, "{text}");
        }
    }
}
