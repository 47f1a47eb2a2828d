//! ISO 8601 instants as Azure accepts them in SAS tokens (`st`, `se`) and stored access policies
//! (`Start`, `Expiry`): `2026-11-22`, `2026-11-22T00:00Z`, `2026-11-22T00:00:00Z`,
//! `2026-11-22T00:00:00.1234567Z`, with `Z` or a `±hh:mm` offset. Converted to milliseconds since
//! the Unix epoch, the unit of every clock reading in azq.

/// Earliest year accepted: instants before the epoch do not fit `u64` milliseconds, and no SAS
/// token or access policy needs one.
const YEAR_MIN: u32 = 1970;
const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_DAY: i64 = 86_400_000;

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
    if year < YEAR_MIN || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month)
    {
        return None;
    }
    let date_ms = days_since_epoch(year, month, day) * MS_PER_DAY;
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

fn is_leap_year(year: u32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`: count from a March-based year so the leap day falls last).
fn days_since_epoch(year: u32, month: u32, day: u32) -> i64 {
    let year = i64::from(if month <= 2 { year - 1 } else { year });
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
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
