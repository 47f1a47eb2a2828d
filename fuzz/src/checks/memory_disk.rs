//! `MemoryDisk`: the log writer's `azq::storage::files::Disk` over a map of paths to byte
//! vectors, for checks that run the real `azq::storage::log::Log` and then read what it wrote.
//! Every operation completes at once (`futures_lite::future::block_on` drives a flush to its
//! end in one poll) and is durable at once: these checks are about the bytes the writer lays
//! out, not about what a power cut keeps, which the crash simulator in `src/storage/` covers.
//!
//! Besides the files it remembers where the last write went, so a check knows where each flush
//! landed from the writer's own calls, without reading the file back; and it holds the writer
//! to the `Disk` contract: whole blocks at block boundaries, and never a block written before
//! (the log's "nothing acknowledged is written twice").

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use azq::limits::STORAGE_BLOCK_BYTES;
use azq::storage::files::Disk;
use bytes::Bytes;

/// One write: which file, where, how many bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    /// The file's number (`MemoryDisk::file`).
    pub file: usize,
    /// Its offset in the file, bytes.
    pub offset: usize,
    /// Its length, bytes.
    pub bytes: usize,
}

/// The disk's files and its record of writes.
#[derive(Default)]
struct Memory {
    /// The file each name points to, by file number.
    names: BTreeMap<PathBuf, usize>,
    /// Every file ever created, by number (renamed or removed ones too: a number stays valid).
    contents: Vec<Vec<u8>>,
    /// Per file, where the writes so far end: a write before it would rewrite a block.
    written_ends: Vec<usize>,
    /// The last write.
    last_write: Option<Write>,
}

/// A disk in memory; clones share the same files.
#[derive(Clone, Default)]
pub struct MemoryDisk(Rc<RefCell<Memory>>);

impl MemoryDisk {
    /// An empty disk.
    pub fn new() -> MemoryDisk {
        MemoryDisk::default()
    }

    /// The names of the files in `directory` whose names end with `suffix`, sorted, with their
    /// file numbers.
    pub fn files_in(&self, directory: &Path, suffix: &str) -> Vec<(String, usize)> {
        let memory = self.0.borrow();
        memory
            .names
            .iter()
            .filter(|(path, _)| path.parent() == Some(directory))
            .filter_map(|(path, &file)| {
                let name = path.file_name()?.to_str()?;
                name.ends_with(suffix).then(|| (name.to_string(), file))
            })
            .collect()
    }

    /// The content of file number `file`.
    pub fn content(&self, file: usize) -> Vec<u8> {
        self.0.borrow().contents[file].clone()
    }

    /// The last write, if any.
    pub fn last_write(&self) -> Option<Write> {
        self.0.borrow().last_write
    }
}

impl Disk for MemoryDisk {
    type File = usize;

    async fn create(&self, path: &Path, bytes: u64) -> io::Result<usize> {
        let mut memory = self.0.borrow_mut();
        let file = memory.contents.len();
        // Preallocated as a file system does without `FALLOC_FL_KEEP_SIZE`: zeros to `bytes`.
        memory.contents.push(vec![0; bytes as usize]);
        memory.written_ends.push(0);
        memory.names.insert(path.to_path_buf(), file);
        Ok(file)
    }

    async fn write_at(&self, file: &usize, offset: u64, blocks: &[u8]) -> io::Result<()> {
        let offset = offset as usize;
        assert_eq!(
            offset % STORAGE_BLOCK_BYTES,
            0,
            "a write off a block boundary"
        );
        assert_eq!(
            blocks.len() % STORAGE_BLOCK_BYTES,
            0,
            "a write of part of a block"
        );
        let mut memory = self.0.borrow_mut();
        assert!(
            offset >= memory.written_ends[*file],
            "a write at {offset} into blocks written before (up to {})",
            memory.written_ends[*file]
        );
        memory.written_ends[*file] = offset + blocks.len();
        let content = &mut memory.contents[*file];
        if content.len() < offset + blocks.len() {
            content.resize(offset + blocks.len(), 0);
        }
        content[offset..offset + blocks.len()].copy_from_slice(blocks);
        memory.last_write = Some(Write {
            file: *file,
            offset,
            bytes: blocks.len(),
        });
        Ok(())
    }

    async fn sync(&self, _file: &usize) -> io::Result<()> {
        Ok(())
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut memory = self.0.borrow_mut();
        let file = memory
            .names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        memory.names.insert(to.to_path_buf(), file);
        Ok(())
    }

    async fn shrink(&self, path: &Path, bytes: u64) -> io::Result<u64> {
        let mut memory = self.0.borrow_mut();
        let file = *memory
            .names
            .get(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let content = &mut memory.contents[file];
        let length = content.len().saturating_sub(bytes as usize);
        content.truncate(length);
        Ok(length as u64)
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        self.0
            .borrow_mut()
            .names
            .remove(path)
            .map(drop)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    async fn sync_directory(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    type ReadFile = usize;

    async fn open_read(&self, path: &Path) -> io::Result<usize> {
        self.0
            .borrow()
            .names
            .get(path)
            .copied()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    async fn read_many(&self, file: &usize, ranges: &[(u64, u32)]) -> io::Result<Vec<Bytes>> {
        azq::storage::files::read_batch_bytes(ranges);
        let memory = self.0.borrow();
        let content = &memory.contents[*file];
        ranges
            .iter()
            .map(|&(offset, length)| {
                let start = offset as usize;
                content
                    .get(start..start + length as usize)
                    .map(Bytes::copy_from_slice)
                    .ok_or_else(|| {
                        azq::storage::files::read_past_end(offset, length, content.len() as u64)
                    })
            })
            .collect()
    }
}
