//! A token bucket on an injected clock: `rate_per_s` tokens a second, holding at most
//! `burst_ms` worth of them (`--rate-burst`; by default `TOKEN_BUCKET_BURST_MS`, one second, as
//! Azure's targets allow short bursts). Tokens are counted in thousandths so that a rate below
//! 1,000/s still refills every millisecond. Time only moves forward: an earlier `now_ms` (a clock
//! step back) refills nothing.

/// Thousandths of a token per token.
const MILLI: u64 = 1000;

/// One rate limit's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    /// Tokens per second; 0 refuses everything.
    rate_per_s: u64,
    /// What the bucket holds when full, as time at its rate, ms.
    burst_ms: u64,
    /// Thousandths of a token available now.
    tokens_milli: u64,
    /// When `tokens_milli` was last brought up to date, ms since the epoch.
    updated_ms: u64,
}

impl TokenBucket {
    /// A full bucket of `rate_per_s` tokens a second holding `burst_ms` of them, as of `now_ms`.
    pub fn new(rate_per_s: u64, burst_ms: u64, now_ms: u64) -> TokenBucket {
        TokenBucket {
            rate_per_s,
            burst_ms,
            tokens_milli: capacity_milli(rate_per_s, burst_ms),
            updated_ms: now_ms,
        }
    }

    /// Takes one token at `now_ms`: `false` (nothing taken) when the bucket is empty.
    pub fn take(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        if self.tokens_milli >= MILLI {
            self.tokens_milli -= MILLI;
            true
        } else {
            false
        }
    }

    /// Whether the bucket is full at `now_ms`: it then remembers nothing a new bucket would not.
    pub fn is_full(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        self.tokens_milli == capacity_milli(self.rate_per_s, self.burst_ms)
    }

    /// Changes the rate from `now_ms` on; tokens beyond the new capacity are dropped.
    pub fn set_rate(&mut self, rate_per_s: u64, now_ms: u64) {
        self.refill(now_ms);
        self.rate_per_s = rate_per_s;
        self.tokens_milli = self
            .tokens_milli
            .min(capacity_milli(rate_per_s, self.burst_ms));
    }

    fn refill(&mut self, now_ms: u64) {
        if now_ms > self.updated_ms {
            // rate × elapsed ms = thousandths of a token.
            let added = self.rate_per_s.saturating_mul(now_ms - self.updated_ms);
            self.tokens_milli = self
                .tokens_milli
                .saturating_add(added)
                .min(capacity_milli(self.rate_per_s, self.burst_ms));
            self.updated_ms = now_ms;
        }
    }
}

/// Thousandths of a token a bucket of `rate_per_s` holds when full.
fn capacity_milli(rate_per_s: u64, burst_ms: u64) -> u64 {
    // rate × burst ms = thousandths of a token; at least one whole token, so a tiny rate still
    // lets a request through now and then.
    rate_per_s.saturating_mul(burst_ms).max(MILLI)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::TOKEN_BUCKET_BURST_MS;

    #[test]
    fn a_full_bucket_allows_the_burst_then_the_rate() {
        let mut bucket = TokenBucket::new(100, TOKEN_BUCKET_BURST_MS, 0);
        let burst = (0..1000).filter(|_| bucket.take(0)).count() as u64;
        assert_eq!(burst, 100 * TOKEN_BUCKET_BURST_MS / 1000);
        assert!(!bucket.take(0));
        // 10 ms at 100/s is one token.
        assert!(bucket.take(10));
        assert!(!bucket.take(10));
        // Over ten seconds of steady asking, about the rate gets through.
        let accepted = (11..10_011).filter(|&now_ms| bucket.take(now_ms)).count();
        assert!((999..=1001).contains(&accepted), "{accepted}");
    }

    #[test]
    fn time_going_back_refills_nothing() {
        let mut bucket = TokenBucket::new(1, TOKEN_BUCKET_BURST_MS, 1_000);
        assert!(bucket.take(1_000));
        assert!(!bucket.take(500));
        assert!(!bucket.take(1_999));
        assert!(bucket.take(2_000));
    }

    #[test]
    fn a_lower_rate_drops_the_excess_tokens() {
        let mut bucket = TokenBucket::new(1000, TOKEN_BUCKET_BURST_MS, 0);
        bucket.set_rate(10, 0);
        let burst = (0..1000).filter(|_| bucket.take(0)).count() as u64;
        assert_eq!(burst, 10 * TOKEN_BUCKET_BURST_MS / 1000);
        assert!(!bucket.is_full(0));
        assert!(bucket.is_full(TOKEN_BUCKET_BURST_MS));
    }

    #[test]
    fn a_zero_rate_still_holds_one_token() {
        let mut bucket = TokenBucket::new(0, TOKEN_BUCKET_BURST_MS, 0);
        assert!(bucket.take(0));
        assert!(!bucket.take(1_000_000));
    }

    #[test]
    fn a_shorter_burst_holds_fewer_tokens_but_refills_at_the_same_rate() {
        // 50 ms at 300/s: 15 tokens.
        let mut bucket = TokenBucket::new(300, 50, 0);
        assert_eq!((0..1000).filter(|_| bucket.take(0)).count(), 15);
        // Empty, it is full again 50 ms later, and no fuller after a second.
        assert!(!bucket.is_full(49) && bucket.is_full(50));
        assert_eq!((0..1000).filter(|_| bucket.take(1_050)).count(), 15);
        // Over ten seconds of steady asking, about the rate gets through.
        let accepted = (1_051..11_051)
            .filter(|&now_ms| bucket.take(now_ms))
            .count();
        assert!((2_999..=3_001).contains(&accepted), "{accepted}");
        // The shortest burst, a millisecond: a high rate is still reached (the bucket refills a
        // millisecond at a time), and a low one lets one request through at a time.
        let mut bucket = TokenBucket::new(20_000, 1, 0);
        let accepted: usize = (0..1000)
            .map(|now_ms| (0..100).filter(|_| bucket.take(now_ms)).count())
            .sum();
        assert_eq!(accepted, 20_000);
        let mut bucket = TokenBucket::new(300, 1, 0);
        assert!(bucket.take(0));
        assert!(!bucket.take(0));
    }
}
