//! Civil (calendar) dates in UTC and the conversion to and from seconds since the Unix epoch,
//! Howard Hinnant's algorithms over the proleptic Gregorian calendar: a year counted from March,
//! so the leap day falls last, in 400-year eras of 146,097 days. The one place azq does calendar
//! arithmetic; RFC 1123 and ISO 8601 build on it.

/// A calendar date and time of day in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    /// The proleptic Gregorian year; 1970 at the Unix epoch.
    pub year: i64,
    /// 1 (January) to 12.
    pub month: u32,
    /// 1 to the month's length (28 to 31).
    pub day: u32,
    /// 0 to 23.
    pub hour: u32,
    /// 0 to 59.
    pub minute: u32,
    /// 0 to 59: Unix time has no leap seconds.
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

/// Whether `year` has a 29 February.
pub fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Days in `month` (1-12) of `year`.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Writes `value` as exactly `out.len()` decimal digits, zero-padded (the high digits of a
/// larger value are dropped).
pub fn put_digits(out: &mut [u8], mut value: u64) {
    for slot in out.iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn month_lengths() {
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2026, 2), 28);
        assert_eq!(days_in_month(2026, 11), 30);
        assert_eq!(days_in_month(2026, 12), 31);
    }

    #[test]
    fn digits_are_zero_padded() {
        let mut out = [0u8; 4];
        put_digits(&mut out, 7);
        assert_eq!(&out, b"0007");
        put_digits(&mut out[..2], 42);
        assert_eq!(&out, b"4207");
    }
}
