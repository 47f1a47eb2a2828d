//! What a producer writes at the start of each message text, and the consumers read back: the
//! send timestamp (microseconds since the Unix epoch, for end-to-end latency) and, where the text
//! has room, the put mark (which put wrote the message, with which attempt, to count the copies
//! a retried put stored). Pure byte arithmetic; it imports nothing of the loadgen.

/// Digits of the send timestamp (microseconds since the Unix epoch) at the start of each message
/// text; 16 digits last until the year 2286.
pub const TIMESTAMP_DIGITS: usize = 16;
/// Hex digits of the put mark after the timestamp, where the text has room: the run's nonce
/// (8), the logical put's token (16) and the attempt that wrote it (2).
pub const PUT_MARK_DIGITS: usize = 26;

/// Which logical put wrote a message, and with which attempt: a put that failed (an error
/// answer, a lost connection) may still have been stored, and its retry then stores a second
/// copy, with the same token and a later attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutMark {
    /// Random per run (per step of a stepped run): marks of other runs, other loadgens or
    /// earlier steps sharing the queues are told apart and ignored.
    pub nonce: u32,
    /// Unique per logical put within the run.
    pub token: u64,
    /// 0 for the first try, then the retry's number.
    pub attempt: u8,
}

/// Writes `value` as exactly `out.len()` decimal digits, zero-padded (the leading digits are
/// dropped if it is longer, which a microsecond timestamp is not before 2286).
pub(super) fn write_timestamp(mut value: u64, out: &mut [u8]) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Reads the send timestamp at the start of a message text written by a producer; `None` for a
/// text some other client wrote.
pub fn parse_timestamp(text: &[u8]) -> Option<u64> {
    let digits = text.get(..TIMESTAMP_DIGITS)?;
    digits.iter().try_fold(0u64, |value, &digit| {
        digit
            .is_ascii_digit()
            .then(|| value * 10 + u64::from(digit - b'0'))
    })
}

/// Writes `mark` as lowercase hex: the nonce's 8 digits, the token's 16, the attempt's 2.
pub(super) fn write_put_mark(mark: PutMark, out: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let value =
        (u128::from(mark.nonce) << 72) | (u128::from(mark.token) << 8) | u128::from(mark.attempt);
    for (index, digit) in out[..PUT_MARK_DIGITS].iter_mut().rev().enumerate() {
        *digit = HEX[((value >> (4 * index)) & 0xF) as usize];
    }
}

/// Reads the put mark after the timestamp of a message text a producer wrote; `None` for a text
/// without a timestamp, too short to hold a mark, or written by a preload or another client.
pub fn parse_put_mark(text: &[u8]) -> Option<PutMark> {
    parse_timestamp(text)?;
    let digits = text.get(TIMESTAMP_DIGITS..TIMESTAMP_DIGITS + PUT_MARK_DIGITS)?;
    let value = digits.iter().try_fold(0u128, |value, &digit| {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return None,
        };
        Some((value << 4) | u128::from(nibble))
    })?;
    Some(PutMark {
        nonce: (value >> 72) as u32,
        token: (value >> 8) as u64,
        attempt: value as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let mut digits = [0u8; TIMESTAMP_DIGITS];
        write_timestamp(1_795_305_600_123_456, &mut digits);
        assert_eq!(&digits, b"1795305600123456");
        assert_eq!(
            parse_timestamp(b"1795305600123456xxx"),
            Some(1_795_305_600_123_456)
        );
        assert_eq!(parse_timestamp(b"179530560012345"), None);
        assert_eq!(parse_timestamp(b"hello, world, it is me"), None);
    }
}
