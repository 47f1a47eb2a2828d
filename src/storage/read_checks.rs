//! The checks every `Disk` backend's reads must pass (`Disk::open_read`, `Disk::read_many`),
//! written once and run on each: the portable backend's pread, io_uring's direct and buffered
//! reads, and the crash simulator's `SimDisk`. Two kinds: an exhaustive walk over the
//! boundaries (every offset within a block and across the next, lengths that end just before,
//! on and just after a block boundary, the empty range, the largest batch, past the end) and a
//! round trip of random batches against the file's bytes, the naive oracle, with fixed seeds.

use std::io;

use bytes::Bytes;

use super::files::Disk;
use crate::limits::{DISK_READ_BYTES_MAX, DISK_READ_RANGES_MAX, STORAGE_BLOCK_BYTES};
use crate::random::SplitMix64;

/// The length of the file the checks read: past the largest batch by two blocks and a few
/// bytes, so that the largest range fits at an unaligned offset and the end falls mid-block.
pub const CONTENT_BYTES: usize = DISK_READ_BYTES_MAX + 2 * STORAGE_BLOCK_BYTES + 123;

/// The bytes of the file the checks read: no two blocks alike, and no byte equal to its
/// neighbours' pattern, so a read from the wrong offset shows.
pub fn content() -> Vec<u8> {
    let mut random = SplitMix64::new(0x005E_ED0F_D15C);
    (0..CONTENT_BYTES)
        .map(|_| random.next_u64() as u8)
        .collect()
}

/// A fresh directory under the system's temporary one, named for `backend`, holding `file`
/// with `content()`: (the directory, the file, a name in it that does not exist).
pub fn scratch_file(backend: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let directory =
        std::env::temp_dir().join(format!("azq-{backend}-reads-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("a temporary directory");
    let path = directory.join("file");
    std::fs::write(&path, content()).expect("written");
    let missing = directory.join("missing");
    (directory, path, missing)
}

/// Reads `ranges` of `file` and checks each answer against `content`, in the batches
/// `read_many` takes.
async fn read_and_compare<D: Disk>(
    disk: &D,
    file: &D::ReadFile,
    content: &[u8],
    ranges: &[(u64, u32)],
) {
    let mut start = 0;
    while start < ranges.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < ranges.len()
            && end - start < DISK_READ_RANGES_MAX
            && bytes + ranges[end].1 as usize <= DISK_READ_BYTES_MAX
        {
            bytes += ranges[end].1 as usize;
            end += 1;
        }
        let batch = &ranges[start..end];
        let read = disk
            .read_many(file, batch)
            .await
            .unwrap_or_else(|error| panic!("{error}: {:?}..", &batch[..batch.len().min(4)]));
        assert_eq!(read.len(), batch.len());
        for (&(offset, length), bytes) in batch.iter().zip(&read) {
            let expected = &content[offset as usize..][..length as usize];
            assert!(bytes[..] == expected[..], "{length} bytes at {offset}");
        }
        start = end;
    }
}

/// The ranges the boundary walk reads at `offset` of a file of `file_bytes`: lengths 0, 1, up
/// to one before, on and one past the next block boundary and the one after it, a whole
/// block and one more, and to the end of the file; those that fit, up to four blocks (the
/// largest ranges are read on their own).
fn boundary_ranges(offset: u64, file_bytes: u64) -> impl Iterator<Item = (u64, u32)> {
    let block = STORAGE_BLOCK_BYTES as u64;
    let to_boundary = block - offset % block;
    [
        0,
        1,
        to_boundary - 1,
        to_boundary,
        to_boundary + 1,
        to_boundary + block - 1,
        to_boundary + block,
        to_boundary + block + 1,
        block,
        block + 1,
        file_bytes.saturating_sub(offset),
    ]
    .into_iter()
    .filter(move |&length| offset + length <= file_bytes && length <= 4 * block)
    .map(move |length| (offset, length as u32))
}

/// The boundary walk over `file`, whose bytes are `content()`: every offset of
/// the first two blocks and of the last two and a bit, with `boundary_ranges`; the smallest
/// ranges in the largest batch; the largest range at every alignment that matters; a batch
/// with duplicates and out of order; and reads that pass the end, which fail whole.
pub async fn check_boundaries<D: Disk>(disk: &D, file: &D::ReadFile) {
    let content = content();
    let file_bytes = content.len() as u64;
    let block = STORAGE_BLOCK_BYTES as u64;
    let mut ranges = Vec::new();
    let tail = file_bytes - 2 * block - 7;
    for offset in (0..=2 * block + 1).chain(tail..=file_bytes) {
        ranges.extend(boundary_ranges(offset, file_bytes));
    }
    read_and_compare(disk, file, &content, &ranges).await;
    // The most ranges a batch takes, each one byte, across block boundaries.
    let smallest: Vec<(u64, u32)> = (0..DISK_READ_RANGES_MAX as u64)
        .map(|index| (block - 1 + index * 3, 1))
        .collect();
    let read = disk.read_many(file, &smallest).await.expect("read");
    assert_eq!(read.len(), DISK_READ_RANGES_MAX);
    // The largest range, aligned or not, alone and ending on the file's last byte.
    let largest = DISK_READ_BYTES_MAX as u64;
    for offset in [0, 1, block - 1, block, block + 1, file_bytes - largest] {
        read_and_compare(disk, file, &content, &[(offset, largest as u32)]).await;
    }
    // Duplicates, overlaps and any order, answered in the order asked.
    let mixed = [
        (9000, 10),
        (5, 4091),
        (9000, 10),
        (4090, 20),
        (0, 0),
        (4100, 1),
    ];
    read_and_compare(disk, file, &content, &mixed).await;
    assert!(disk.read_many(file, &[]).await.expect("read").is_empty());
    // Past the end: the whole batch fails, even with good ranges in it.
    for bad in [
        (file_bytes, 1),
        (file_bytes - 1, 2),
        (file_bytes + block, 0),
        (u64::MAX - 1, 5),
    ] {
        let error = disk
            .read_many(file, &[(0, 10), bad])
            .await
            .expect_err("a read past the end");
        assert_eq!(
            error.kind(),
            io::ErrorKind::UnexpectedEof,
            "{bad:?}: {error}"
        );
    }
    let read = disk
        .read_many(file, &[(file_bytes, 0)])
        .await
        .expect("read");
    assert_eq!(read, [Bytes::new()]);
}

/// The round trip over `file`, whose bytes are `content()`: random batches (1 to
/// 64 ranges, any offset, lengths from 0 to a few blocks and now and then up to the largest,
/// duplicates and disorder) answer exactly the file's bytes, for each of a few fixed seeds.
pub async fn check_random_batches<D: Disk>(disk: &D, file: &D::ReadFile) {
    let content = content();
    for seed in 0..4 {
        let mut random = SplitMix64::new(seed);
        for _ in 0..100 {
            let ranges_count = 1 + random.next_u64() % 64;
            let mut ranges = Vec::new();
            let mut bytes = 0;
            for _ in 0..ranges_count {
                let length_max = match random.next_u64() % 16 {
                    0 => DISK_READ_BYTES_MAX / 8,
                    1 => 0,
                    _ => 3 * STORAGE_BLOCK_BYTES,
                } as u64;
                let length = random.next_u64() % (length_max + 1);
                if bytes + length > DISK_READ_BYTES_MAX as u64 {
                    break;
                }
                let offset = random.next_u64() % (content.len() as u64 - length + 1);
                ranges.push((offset, length as u32));
                bytes += length;
                if random.next_u64() % 8 == 0 {
                    ranges.push((offset, length as u32));
                    bytes += length;
                }
            }
            read_and_compare(disk, file, &content, &ranges).await;
        }
    }
}
