//! `Input`: reads fuzzer bytes as a stream of small decisions. Every read succeeds: past the
//! end it yields zeros and empty slices, so any byte string decodes to some test case and a
//! shorter input is a simpler case (which keeps libFuzzer's minimisation effective).

/// A cursor over the fuzzer's bytes.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte; 0 once the input is used up, so every decoding has a value.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&byte, rest)) => {
                self.data = rest;
                byte
            }
            None => 0,
        }
    }

    /// The low bit of the next byte.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// Little-endian, so that the low byte (the one a fuzzer mutates first) matters most.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Two `u16`s, low half first.
    pub fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }

    /// Two `u32`s, low half first.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A value in `0..count` (0 when `count` is 0); from one byte when `count` fits one.
    pub fn below(&mut self, count: usize) -> usize {
        match count {
            0 => 0,
            1..=256 => usize::from(self.u8()) % count,
            _ => self.u32() as usize % count,
        }
    }

    /// One of `choices` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())]
    }

    /// The bytes up to the next `separator` (which is consumed), or all the rest. Separated
    /// fields keep an input readable and let the fuzzer grow one field without shifting the
    /// decisions that follow it.
    pub fn field(&mut self, separator: u8) -> &'a [u8] {
        match self.data.iter().position(|&byte| byte == separator) {
            Some(at) => {
                let field = &self.data[..at];
                self.data = &self.data[at + 1..];
                field
            }
            None => self.rest(),
        }
    }

    /// At most `bytes_max` bytes, the length taken from one byte first.
    pub fn bytes(&mut self, bytes_max: usize) -> &'a [u8] {
        let wanted = usize::from(self.u8()).min(bytes_max);
        let (taken, rest) = self.data.split_at(wanted.min(self.data.len()));
        self.data = rest;
        taken
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}
