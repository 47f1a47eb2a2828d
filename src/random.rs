//! SplitMix64 (Steele, Lea and Flood): the one small, fast, seedable generator azq uses where
//! values must be spread but need not be unpredictable — request IDs, the message-ID prefix and
//! hash seeds of a shard, azq-loadgen's Poisson arrivals. Not for anything secret.

/// The generator's increment: the golden ratio in 64 bits.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The value a stream seeded with `seed` gives first: the seed moved on by one step and put
/// through SplitMix64's finaliser, which spreads its bits over the whole word (a bijection).
pub fn mix64(seed: u64) -> u64 {
    let mut mixed = seed.wrapping_add(GOLDEN_GAMMA);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    mixed ^ (mixed >> 31)
}

/// A SplitMix64 stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The stream that starts from `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next value of the stream.
    pub fn next_u64(&mut self) -> u64 {
        let value = mix64(self.state);
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        // The first outputs for seed 0 of the reference implementation (Vigna's splitmix64.c).
        let mut stream = SplitMix64::new(0);
        assert_eq!(stream.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(stream.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(stream.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn mix_is_the_first_value_of_a_stream() {
        for seed in [0, 1, u64::MAX, 0x5eed] {
            let mut stream = SplitMix64::new(seed);
            assert_eq!(stream.next_u64(), mix64(seed));
            assert_eq!(stream.next_u64(), mix64(seed.wrapping_add(GOLDEN_GAMMA)));
        }
    }
}
