#!/usr/bin/env python3
"""Writes the committed seeds of the storage_format target's writer mode (first byte 3) into
fuzz/seeds/storage_format/, named by their SHA-1 as libFuzzer names its inputs.

In that mode the check runs the real log writer (`Log` over a memory disk) on a shard given
commands from the input, flushed where the input says, and reads every segment back (see
fuzz/src/checks/storage_format.rs). A flush ends 1 to 3 bytes short of a block boundary only
when its records add up to within 3 bytes of a multiple of 4 KiB, which random sizes seldom
hit and coverage guidance does not steer to (the old reader lost the records after such a
flush: commit 631e836). So besides random sessions these seeds hold, on purpose:

- flushes ending every padding length 1, 2 and 3 (and 0 and 4), each followed by more
  flushes in the same segment, whose first records are of every kind the check makes;
- a record header split across a block boundary at every byte of the header, inside a flush;
- the largest text (64 KiB) at a header split and at padding 1 to 3;
- segments small enough to rotate at every flush, and both durability modes.

Deterministic (a fixed random seed): running it again writes the same files. `make_seeds.sh
storage_format` replaces the seed directory with a cmin'd pick of a run's corpus and then runs
this script again, so these seeds survive it. Standard library only.

Input layout (mode 3), every integer little-endian:
    u8 3, u8 segment blocks (2 + value % 63), u8 durability (bit 0: write, else fsync),
    u8 cut segment, u32 cut position, then commands, each an operation byte and its fields:
    0 or 1 Put: u16 text length, u8 bit 16 of it (bit 0), u8 fill
    2 Put that leaves the next flush `padding` bytes short of a block boundary:
      u16 padding (% 4096), u8 blocks more (% 17), u8 fill
    3 Get: u8 count (1 + value % 32), u8 visibility (1 + value s)
    4 Delete a leased message: u16 index (% leased)
    5 Update a leased message: u16 index, u8 visibility, u8 with text (bit 0), u16 text length
      (% 8193), u8 fill
    6 Set Queue Metadata: u16 value length (% 4097), u8 letter
    7 Flush
"""
import hashlib
import os
import random
import struct
import sys

DIRECTORY = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "seeds", "storage_format"
)
TEXT_BYTES_MAX = 64 * 1024
RECORD_HEADER_BYTES = 16


def u16(value):
    return struct.pack("<H", value)


def u32(value):
    return struct.pack("<I", value)


def start(segment_blocks, write_mode=False, cut_segment=0, cut_position=0):
    assert 2 <= segment_blocks <= 64
    return bytes([3, segment_blocks - 2, int(write_mode), cut_segment]) + u32(cut_position)


def put(text_bytes, fill=0x61):
    assert 0 <= text_bytes <= TEXT_BYTES_MAX
    return bytes([0]) + u16(text_bytes & 0xFFFF) + bytes([text_bytes >> 16, fill])


def pad(padding, blocks_more=0, fill=0x62):
    assert 0 <= padding < 4096 and 0 <= blocks_more <= 16
    return bytes([2]) + u16(padding) + bytes([blocks_more, fill])


def get(count=1, visibility_s=60):
    return bytes([3, count - 1, visibility_s - 1])


def delete(index=0):
    return bytes([4]) + u16(index)


def update(index=0, visibility_s=30, text_bytes=None, fill=0x63):
    with_text = text_bytes is not None
    return (bytes([5]) + u16(index) + bytes([visibility_s - 1, int(with_text)])
            + u16(text_bytes or 0) + bytes([fill]))


def metadata(value_bytes, letter=0):
    return bytes([6]) + u16(value_bytes) + bytes([letter])


FLUSH = bytes([7])


def random_command(rng, allow_pad=True):
    """One command of a random session: texts from empty to the largest, most near a block."""
    kind = rng.randrange(12)
    fill = rng.choice([0x00, 0x61, 0xFF, rng.randrange(256)])
    if kind < 4:
        text_bytes = rng.choice([
            rng.randrange(64),
            rng.randrange(2 * 4096),
            4096 - rng.randrange(64),
            rng.randrange(TEXT_BYTES_MAX + 1),
            TEXT_BYTES_MAX,
        ])
        return put(text_bytes, fill)
    if kind < 6 and allow_pad:
        padding = rng.choice([1, 2, 3, 1, 2, 3, 0, rng.randrange(1, RECORD_HEADER_BYTES),
                              rng.randrange(4096)])
        return pad(padding, rng.choice([0, 0, 1, rng.randrange(17)]), fill)
    if kind < 8:
        return get(rng.randrange(1, 33), rng.randrange(1, 257))
    if kind == 8:
        return delete(rng.randrange(1 << 16))
    if kind == 9:
        text_bytes = rng.choice([None, rng.randrange(64), rng.randrange(8193)])
        return update(rng.randrange(1 << 16), rng.randrange(1, 257), text_bytes, fill)
    if kind == 10:
        return metadata(rng.randrange(4097), rng.randrange(26))
    return FLUSH


def padding_then_flushes(padding, rng):
    """Flushes that end `padding` bytes short of a boundary, each followed by a flush whose
    first record is another kind each time, in one segment of 64 blocks."""
    data = start(64, cut_segment=rng.randrange(256), cut_position=rng.randrange(1 << 32))
    data += FLUSH
    followers = [
        put(0), put(5), put(4096 - 40), put(4096), metadata(0), metadata(300),
        get(1), update(0, 30, None), update(0, 30, 100), delete(0), put(TEXT_BYTES_MAX),
    ]
    for follower in followers:
        data += put(rng.randrange(20)) + pad(padding, rng.choice([0, 1])) + FLUSH
        data += follower + FLUSH
    return data


def header_splits(rng):
    """A record whose header starts 1 to 16 bytes before a block boundary, inside a flush."""
    data = start(64, cut_segment=0, cut_position=rng.randrange(1 << 32)) + FLUSH
    for before in range(1, RECORD_HEADER_BYTES + 1):
        data += pad(before, rng.choice([0, 1])) + put(rng.randrange(300)) + FLUSH
    return data


def largest_text(rng):
    """64 KiB texts whose header is split, and that end flushes at padding 1 to 3."""
    data = start(64, cut_position=rng.randrange(1 << 32)) + FLUSH
    for before in (1, 8, 15):
        data += pad(before) + put(TEXT_BYTES_MAX) + FLUSH
    for padding in (1, 2, 3):
        data += pad(padding, 16) + FLUSH + put(10) + FLUSH
    return data


def random_session(rng):
    """Random commands and flushes over a segment of random size, either durability."""
    data = start(rng.choice([2, 3, 4, 8, 16, 64, rng.randrange(2, 65)]),
                 rng.random() < 0.3, rng.randrange(256), rng.randrange(1 << 32))
    for _ in range(rng.randrange(10, 60)):
        data += random_command(rng)
    return data


def seeds():
    rng = random.Random(39)
    yield from (padding_then_flushes(padding, rng) for padding in (1, 2, 3, 0, 4))
    yield header_splits(rng)
    yield largest_text(rng)
    # Every flush rotates to a new segment (two blocks), then flushes of a block and more.
    yield start(2, cut_segment=3, cut_position=5000) + (put(100) + FLUSH) * 6 + pad(2) + FLUSH
    yield start(3, True, cut_segment=1, cut_position=4096) + (pad(1) + FLUSH + put(0) + FLUSH) * 4
    for _ in range(30):
        yield random_session(rng)


def main():
    os.makedirs(DIRECTORY, exist_ok=True)
    count, total = 0, 0
    for data in seeds():
        name = hashlib.sha1(data).hexdigest()
        with open(os.path.join(DIRECTORY, name), "wb") as file:
            file.write(data)
        count += 1
        total += len(data)
    print(f"wrote {count} writer-mode seeds, {total} bytes, under {os.path.normpath(DIRECTORY)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
