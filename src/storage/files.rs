//! The data directory and the file operations on it, as seen before the shards start (recovery,
//! a new layout) and while they run (the log writer and snapshots, `Disk`).
//!
//! Layout under `--location DIR` (default: the current directory):
//!
//! ```text
//! DIR/__azq__/CURRENT               names the current generation, e.g. "gen-000001"
//! DIR/__azq__/gen-000001/shard-000/ one directory per shard: log segments and snapshots
//! ```
//!
//! A generation is one shard count's files. Restarting with the same shard count continues it;
//! another count writes the re-homed state as a new generation, then switches `CURRENT` by an
//! atomic rename, then removes the old one.
//!
//! **Order of durability.** A name is durable only once its directory is synced, and a power
//! cut may keep any of the unsynced changes to a directory. So every file is written and synced
//! before the name that makes it count is created (a temporary name renamed, then the
//! directory synced), every new directory's entry is synced in its parent, and removals are
//! followed by a sync of their directory. What a power cut can leave is then only a temporary
//! file or a file no name points to, never a name without its data.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};

use crate::limits::MAPPED_READ_BYTES_MIN;

/// The directory azq keeps its files in, inside `--location`: its own, so Azurite's files in the
/// same location never mix with azq's.
pub const DATA_DIRECTORY_NAME: &str = "__azq__";
/// The directory, inside the data directory, where recovery keeps a copy of every log segment
/// it cuts or removes (`storage::recovery`).
pub const KEPT_DIRECTORY_NAME: &str = "kept";
/// The file naming the current generation.
pub const CURRENT_FILE_NAME: &str = "CURRENT";
/// The name `CURRENT` is written under before it is renamed into place.
pub const CURRENT_TEMPORARY_NAME: &str = "CURRENT.tmp";

/// The directory of generation `generation`.
pub fn generation_name(generation: u64) -> String {
    format!("gen-{generation:06}")
}

/// The directory of shard `shard` inside a generation.
pub fn shard_directory_name(shard: usize) -> String {
    format!("shard-{shard:03}")
}

/// Reads `gen-000001` back.
pub fn parse_generation(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("gen-")?;
    (digits.len() == 6 && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())?
}

/// The data format `CURRENT` says its generation's files hold: 3 since puts are packed
/// (segments of format 3, snapshots of format 4: `storage::format`). `CURRENT` names it beside
/// the generation (`gen-000001 format 3`), which a build from before refuses as "not a
/// generation name" before it reads or removes anything. Without it, such a build took a last
/// segment of packed puts alone, none of whose records it can decode, for one whose header
/// never reached the disk: it removed the segment, served without its messages and handed
/// their IDs out again (helper-85's review). A `CURRENT` of the generation alone is of format 2
/// or before, and the first start of a build that writes 3 says 3 there before anything else.
pub const DATA_FORMAT: u32 = 3;

/// The data format of a `CURRENT` that names none (`parse_current`).
const DATA_FORMAT_UNNAMED: u32 = 2;

/// `CURRENT`'s text for `generation`, of `DATA_FORMAT`.
pub fn current_text(generation: u64) -> String {
    format!("{} format {DATA_FORMAT}\n", generation_name(generation))
}

/// Reads `CURRENT`'s text back: the generation it names and the data format it says (2 where
/// it says none); `None` for anything else.
pub fn parse_current(text: &str) -> Option<(u64, u32)> {
    let mut words = text.split_whitespace();
    let generation = parse_generation(words.next()?)?;
    let format = match (words.next(), words.next()) {
        (None, _) => DATA_FORMAT_UNNAMED,
        (Some("format"), Some(digits)) if digits.bytes().all(|byte| byte.is_ascii_digit()) => {
            digits.parse().ok()?
        }
        _ => return None,
    };
    words.next().is_none().then_some((generation, format))
}

/// Synchronous file operations, for work done before the shards serve. `std::fs` in the server;
/// a simulated disk in tests. Shared by the threads recovery reads shards on.
pub trait Files: Sync {
    /// Whether recovery may read each shard on a thread of its own: the real file system, not
    /// the simulated disk, whose seeds replay their operations in one order.
    fn parallel(&self) -> bool {
        false
    }
    /// The names of the entries of `directory`, sorted; none when it does not exist.
    fn list(&self, directory: &Path) -> io::Result<Vec<String>>;
    /// The whole content of `path`.
    fn read(&self, path: &Path) -> io::Result<Bytes>;
    /// The whole content of `path`, as `read`, for a reader that lets go of what it has read
    /// (`unload_range`) as it goes: a mapping's pages are brought in as they are touched, not
    /// all at once, so no more of it is resident at a time than the reader keeps; `in_order`
    /// when the reader passes through it once from start to end (the kernel reads ahead).
    fn read_lazily(&self, path: &Path, _in_order: bool) -> io::Result<Bytes> {
        self.read(path)
    }
    /// Lets go of the memory `range` of `data` (what `read` or `read_lazily` answered,
    /// whole) holds while it stays readable: a mapping's resident pages wholly inside it go,
    /// and come back from the file if read again. Nothing for bytes in memory.
    fn unload_range(&self, _data: &Bytes, _range: std::ops::Range<usize>) {}
    /// `unload_range` over the whole of `data`.
    fn unload(&self, data: &Bytes) {
        self.unload_range(data, 0..data.len());
    }
    /// The size of the file `path`, bytes; an error for anything but a file (a directory).
    fn size(&self, path: &Path) -> io::Result<u64>;
    /// The size and free space of the file system holding `path` (an error where it cannot be
    /// measured).
    fn space(&self, path: &Path) -> io::Result<super::space::Space>;
    /// Writes `bytes` as the whole content of `path` and syncs it (not its directory entry:
    /// the caller syncs the directory).
    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut whole = Some(bytes);
        self.write_synced_in_pieces(path, &mut |out| {
            out.extend_from_slice(whole.take().unwrap_or_default());
            false
        })
    }
    /// `write_synced` of what `next` makes a piece at a time: each call puts the next piece
    /// into its (empty) buffer and answers whether another follows. Each piece is written
    /// before the next is made, so no more than one is in memory (a change of shard count
    /// writes a snapshot of every message: `recovery.rs`).
    fn write_synced_in_pieces(
        &self,
        path: &Path,
        next: &mut dyn FnMut(&mut BytesMut) -> bool,
    ) -> io::Result<()>;
    /// Cuts `path` to `length` bytes and syncs it.
    fn truncate(&self, path: &Path, length: u64) -> io::Result<()>;
    /// Creates `directory` and its missing parents, and makes each one created durable in its
    /// parent (the parent synced); `directory` itself too when it existed already, since a run
    /// killed between creating it and syncing its parent left a name (and everything under it)
    /// that a power cut can still take away.
    fn create_directories(&self, directory: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` (not durable until the directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path` (not durable until the directory is synced).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes the directory `path` and everything in it (not durable until its parent is
    /// synced).
    fn remove_directory(&self, path: &Path) -> io::Result<()>;
    /// Syncs the directory `path`, so the names created, renamed or removed in it last.
    fn sync_directory(&self, path: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFiles;

/// The mappings `StdFiles::read` made that are still mapped, by address and length.
static MAPPED: std::sync::Mutex<std::collections::BTreeSet<(usize, usize)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A file `StdFiles::read` mapped, listed in `MAPPED` while it lives.
struct Mapped(memmap2::Mmap);

impl Mapped {
    fn new(mapping: memmap2::Mmap) -> Mapped {
        let listed = (mapping.as_ptr() as usize, mapping.len());
        MAPPED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(listed);
        Mapped(mapping)
    }
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        let listed = (self.0.as_ptr() as usize, self.0.len());
        MAPPED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&listed);
    }
}

/// `path` read into memory, or on Unix mapped when it holds `MAPPED_READ_BYTES_MIN` or more:
/// its pages read in at once when `populate`, else as they are touched (in order when
/// `in_order`: the kernel is told).
fn map_or_read(path: &Path, populate: bool, in_order: bool) -> io::Result<Bytes> {
    let mut file = std::fs::File::open(path)?;
    // Elsewhere a mapped file cannot be shortened or removed (Windows), and the data
    // directory is not locked: there, files are read.
    if cfg!(not(unix)) || file.metadata()?.len() < MAPPED_READ_BYTES_MIN {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)?;
        return Ok(Bytes::from(bytes));
    }
    let mut options = memmap2::MmapOptions::new();
    if populate {
        options.populate();
    }
    // SAFETY: the mapping is read-only, and nothing writes these files while it lives: the
    // data directory is locked to this process (`lock_data_directory`); a shard never writes
    // into a segment or snapshot recovery read (it starts a new segment, and replaces a
    // snapshot by renaming a new file over it); and recovery only truncates a file past its
    // last record, where no message text points.
    let mapped = unsafe { options.map(&file)? };
    #[cfg(unix)]
    if in_order {
        // Advice only: a kernel that refuses it reads the pages as they are touched anyway.
        let _ = mapped.advise(memmap2::Advice::Sequential);
    }
    Ok(Bytes::from_owner(Mapped::new(mapped)))
}

/// The size of a page of memory (what `madvise` acts on), asked once.
#[cfg(unix)]
fn page_bytes() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf only reads a value.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        bytes if bytes > 0 => bytes as usize,
        _ => 4096,
    })
}

impl Files for StdFiles {
    fn parallel(&self) -> bool {
        true
    }

    fn list(&self, directory: &Path) -> io::Result<Vec<String>> {
        let entries = match std::fs::read_dir(directory) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut names = Vec::new();
        for entry in entries {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Reads `path`, or on Unix maps it when it holds `MAPPED_READ_BYTES_MIN` or more (no copy
    /// into fresh heap pages, and pages the kernel may drop while recovery reads on), its pages
    /// read in at once. Only recovery reads files, and before the shards start it copies out
    /// the live message texts it does not leave on disk only (`Image::restore`), or on a change
    /// of shard count writes them into the new generation and leaves them on disk there
    /// (`ShardState::leave_recovered_text`), so no mapping outlives it.
    fn read(&self, path: &Path) -> io::Result<Bytes> {
        map_or_read(path, true, false)
    }

    /// As `read`, a mapping's pages read in as they are touched; with `in_order`, the kernel
    /// told they will be read in order (`MADV_SEQUENTIAL`: it reads ahead further, and drops
    /// the pages behind from the page cache sooner).
    fn read_lazily(&self, path: &Path, in_order: bool) -> io::Result<Bytes> {
        map_or_read(path, false, in_order)
    }

    /// The pages wholly inside `range` of a mapping `read` or `read_lazily` made (known by
    /// its address and length, so never bytes in memory, whose contents `MADV_DONTNEED` would
    /// zero) stop being resident; the file's pages stay in the page cache, and a later read of
    /// them maps them again. The last page counts as whole when `range` reaches the end.
    #[cfg(unix)]
    fn unload_range(&self, data: &Bytes, range: std::ops::Range<usize>) {
        let mapping = (data.as_ptr() as usize, data.len());
        let page = page_bytes();
        let start = range.start.div_ceil(page) * page;
        let end = if range.end >= data.len() {
            data.len()
        } else {
            range.end / page * page
        };
        if start >= end {
            return;
        }
        let mapped = MAPPED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if mapped.contains(&mapping) {
            // SAFETY: the range is inside a read-only mapping of a file this process made and
            // still holds (`data` keeps it alive), and starts on a page (as the mapping does):
            // dropping its pages loses nothing, since a read brings them back from the file.
            unsafe {
                libc::madvise(
                    (mapping.0 + start) as *mut libc::c_void,
                    end - start,
                    libc::MADV_DONTNEED,
                )
            };
        }
    }

    fn space(&self, path: &Path) -> io::Result<super::space::Space> {
        super::space::filesystem_space(path)
    }

    fn size(&self, path: &Path) -> io::Result<u64> {
        let metadata = std::fs::metadata(path)?;
        if !metadata.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(metadata.len())
    }

    fn write_synced_in_pieces(
        &self,
        path: &Path,
        next: &mut dyn FnMut(&mut BytesMut) -> bool,
    ) -> io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::File::create(path)?;
        let mut piece = BytesMut::new();
        loop {
            piece.clear();
            let more = next(&mut piece);
            file.write_all(&piece)?;
            if !more {
                return file.sync_all();
            }
        }
    }

    fn truncate(&self, path: &Path, length: u64) -> io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_len(length)?;
        file.sync_all()
    }

    fn create_directories(&self, directory: &Path) -> io::Result<()> {
        let missing: Vec<&Path> = directory
            .ancestors()
            .take_while(|ancestor| !ancestor.as_os_str().is_empty() && !ancestor.is_dir())
            .collect();
        let parent_of = |path: &'_ Path| {
            path.parent()
                .filter(|parent| !parent.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        };
        if missing.is_empty() {
            return self.sync_directory(&parent_of(directory));
        }
        for created in missing.into_iter().rev() {
            match std::fs::create_dir(created) {
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
                Ok(()) => {}
            }
            self.sync_directory(&parent_of(created))?;
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_directory(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn sync_directory(&self, path: &Path) -> io::Result<()> {
        sync_directory(path)
    }
}

/// Syncs the directory `path` with `std::fs` (fsync on its descriptor). Elsewhere than Unix a
/// directory cannot be opened for that, and its file system journals names itself: nothing.
pub fn sync_directory(path: &Path) -> io::Result<()> {
    if cfg!(unix) {
        std::fs::File::open(path)?.sync_all()?;
    }
    Ok(())
}

/// Asynchronous file operations, for the log writer and snapshots of a running shard. Writes
/// are whole `STORAGE_BLOCK_BYTES` blocks at block-aligned offsets (O_DIRECT on io_uring).
pub trait Disk: 'static {
    /// An open file.
    type File;

    /// Creates (or empties) `path` for writing, preallocated to `bytes` where the file system can
    /// (its name is not durable until the directory is synced, or it is renamed).
    fn create(&self, path: &Path, bytes: u64) -> impl Future<Output = io::Result<Self::File>>;

    /// Writes `blocks` (a whole number of blocks) at `offset` (a block boundary).
    fn write_at(
        &self,
        file: &Self::File,
        offset: u64,
        blocks: &[u8],
    ) -> impl Future<Output = io::Result<()>>;

    /// Makes what was written to `file` durable (fdatasync).
    fn sync(&self, file: &Self::File) -> impl Future<Output = io::Result<()>>;

    /// Writes `blocks` (a whole number of blocks) at `offset` (a block boundary) and makes
    /// them durable, as `write_at` then `sync`: completes only once they are. A backend does both
    /// in one step where that costs less (the portable one: one trip to a worker thread).
    fn write_synced(
        &self,
        file: &Self::File,
        offset: u64,
        blocks: &[u8],
    ) -> impl Future<Output = io::Result<()>> {
        async move {
            self.write_at(file, offset, blocks).await?;
            self.sync(file).await
        }
    }

    /// Renames `from` to `to` and syncs their directory.
    fn rename(&self, from: &Path, to: &Path) -> impl Future<Output = io::Result<()>>;

    /// Shortens the file at `path` by `bytes` (to empty at most) and syncs it; returns its new
    /// length. A file about to be removed gives its blocks back a little at a time
    /// (`SNAPSHOT_REMOVAL_STEP_BYTES`).
    fn shrink(&self, path: &Path, bytes: u64) -> impl Future<Output = io::Result<u64>>;

    /// Removes `path` (not durable until the directory is synced).
    fn remove(&self, path: &Path) -> impl Future<Output = io::Result<()>>;

    /// Syncs the directory `path`: the names created, renamed or removed in it are durable.
    fn sync_directory(&self, path: &Path) -> impl Future<Output = io::Result<()>>;

    /// A file open for `read_many` (texts read back from the log: `--text-memory`,
    /// docs/TIERED-STORAGE.md).
    type ReadFile;

    /// Opens the file at `path` for reading. Only blocks whose writes have completed are ever
    /// read (a text is evicted only once its record counts as written: synced, or with
    /// `--durability write` written), so a read never meets a block a write is still changing.
    fn open_read(&self, path: &Path) -> impl Future<Output = io::Result<Self::ReadFile>>;

    /// Reads each `(offset, length)` of `ranges` from `file`, at any alignment, and answers
    /// their bytes in the same order: one batch, which a backend may merge into fewer reads.
    /// A range that reaches past the end of the file fails the whole batch (UnexpectedEof):
    /// nothing is answered in part. At most `DISK_READ_RANGES_MAX` ranges and
    /// `DISK_READ_BYTES_MAX` bytes a batch (asserted: the caller splits larger work).
    fn read_many(
        &self,
        file: &Self::ReadFile,
        ranges: &[(u64, u32)],
    ) -> impl Future<Output = io::Result<Vec<Bytes>>>;

    /// Whether reads go through the kernel's page cache, which then keeps the log's pages near
    /// a text read for the next reads (the portable backend): the log's read cache then reads
    /// each text alone (`Log::read_texts`). Measured over 1,000 queues of 1 KiB texts, where
    /// one pass over the queues' heads does not fit the read cache, reading chunks there
    /// drained 15% slower: each chunk's pages were dropped from the page cache after the read,
    /// and the chunk went before the next queue needed it.
    fn page_cached(&self) -> bool {
        false
    }
}

/// Asserts that `ranges` is a batch `Disk::read_many` takes (`DISK_READ_RANGES_MAX`,
/// `DISK_READ_BYTES_MAX`); answers its bytes.
pub fn read_batch_bytes(ranges: &[(u64, u32)]) -> usize {
    use crate::limits::{DISK_READ_BYTES_MAX, DISK_READ_RANGES_MAX};
    assert!(
        ranges.len() <= DISK_READ_RANGES_MAX,
        "{} ranges",
        ranges.len()
    );
    let bytes: usize = ranges.iter().map(|&(_, length)| length as usize).sum();
    assert!(
        bytes <= DISK_READ_BYTES_MAX,
        "{bytes} bytes in one read batch"
    );
    bytes
}

/// Fails (UnexpectedEof, `read_past_end`) when a range of `ranges` reaches past a file of
/// `file_bytes` (`Disk::read_many` answers nothing in part).
pub fn ranges_within(ranges: &[(u64, u32)], file_bytes: u64) -> io::Result<()> {
    for &(offset, length) in ranges {
        if offset
            .checked_add(u64::from(length))
            .is_none_or(|end| end > file_bytes)
        {
            return Err(read_past_end(offset, length, file_bytes));
        }
    }
    Ok(())
}

/// The error of a read that reaches past the end of its file (`Disk::read_many`).
pub fn read_past_end(offset: u64, length: u32, file_bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("a read of {length} bytes at {offset} passes the end of a file of {file_bytes}"),
    )
}

/// `Disk::shrink` with `std::fs`, for both backends (each runs it off the shard's thread):
/// shortens the file at `path` by `bytes` (to empty at most), syncs it (fdatasync persists a new
/// size) and returns its new length.
pub fn shrink_file(path: &Path, bytes: u64) -> io::Result<u64> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let length = file.metadata()?.len().saturating_sub(bytes);
    file.set_len(length)?;
    file.sync_data()?;
    Ok(length)
}

/// Where a server's files are: `DIR/__azq__`.
pub fn data_directory(location: &Path) -> PathBuf {
    location.join(DATA_DIRECTORY_NAME)
}

/// The file a running server holds locked, so that a second server never writes the same data.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Creates the data directory `root` and locks it for this process (an advisory `flock`, freed
/// when the process ends however it ends); an error when another process holds it.
pub fn lock_data_directory(root: &Path) -> Result<std::fs::File, String> {
    // Durably: the first start must not leave a name a power cut can take away with all the
    // data synced under it.
    StdFiles
        .create_directories(root)
        .map_err(|error| unwritable(root, &error))?;
    let path = root.join(LOCK_FILE_NAME);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| unwritable(&path, &error))?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: flock only reads the descriptor, which `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(format!(
                "{} is in use by another azq ({}); give each server its own --location",
                root.display(),
                io::Error::last_os_error()
            ));
        }
    }
    Ok(file)
}

/// Why `path` could not be made or opened, and, where this process may not write there, who it
/// runs as, who owns the nearest existing directory, and the ways out: the usual failure of a
/// container whose bind mount belongs to root while azq runs as uid 65532.
fn unwritable(path: &Path, error: &io::Error) -> String {
    let first = format!("{}: {error}", path.display());
    match error.raw_os_error() {
        #[cfg(unix)]
        Some(libc::EACCES) | Some(libc::EPERM) => {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: getuid and getgid cannot fail and touch no memory.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            let owner = path
                .ancestors()
                .skip(1)
                .find_map(|directory| Some((directory, std::fs::metadata(directory).ok()?)))
                .map(|(directory, metadata)| {
                    format!(
                        ", and {} belongs to uid {} gid {} (mode {:o})",
                        directory.display(),
                        metadata.uid(),
                        metadata.gid(),
                        metadata.mode() & 0o7777
                    )
                })
                .unwrap_or_default();
            format!(
                "{first}. azq runs as uid {uid} gid {gid}{owner}. Let it write there: on the \
                 host, `chown {uid} DIR` (or `chgrp {gid} DIR && chmod g+w DIR`); or mount the \
                 directory with podman's `:U` option and this user (`-v DIR:/data:U --user \
                 {uid}:{gid}`), which gives it to the container's user; or run the container as \
                 the directory's owner (`--user`)"
            )
        }
        #[cfg(unix)]
        Some(libc::EROFS) => format!(
            "{first}. The directory is on a read-only file system: mount a writable volume \
             there (the image's /data is one), or keep nothing with --inMemoryPersistence"
        ),
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CURRENT` reads back as written, a generation alone as format 2, and nothing else as
    /// one; what this build writes is refused by a build from before, which read the whole
    /// text, trimmed, as a generation's name (`parse_generation`).
    #[test]
    fn current_names_its_generation_and_data_format() {
        for generation in [0, 1, 7, 999_999] {
            let text = current_text(generation);
            assert_eq!(parse_current(&text), Some((generation, DATA_FORMAT)));
            assert_eq!(parse_generation(text.trim()), None, "{text}");
            let alone = format!("{}\n", generation_name(generation));
            assert_eq!(parse_current(&alone), Some((generation, 2)));
            assert_eq!(parse_generation(alone.trim()), Some(generation));
        }
        assert_eq!(parse_current("gen-000003 format 4"), Some((3, 4)));
        assert_eq!(parse_current("  gen-000003\tformat  3 \n"), Some((3, 3)));
        for refused in [
            "",
            "\n",
            "gen-3",
            "gen-000003 format",
            "gen-000003 format x",
            "gen-000003 format +3",
            "gen-000003 format -3",
            "gen-000003 format 4294967296",
            "gen-000003 format 3 more",
            "gen-000003 fmt 3",
            "gen-000003 3",
            "format 3",
        ] {
            assert_eq!(parse_current(refused), None, "{refused:?}");
        }
    }

    #[test]
    #[cfg(unix)]
    fn unwritable_directories_are_explained() {
        let denied = unwritable(
            Path::new("/data/__azq__"),
            &io::Error::from_raw_os_error(libc::EACCES),
        );
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        assert!(
            denied.starts_with("/data/__azq__: Permission denied"),
            "{denied}"
        );
        for words in [
            format!("runs as uid {uid} gid "),
            format!("chown {uid} DIR"),
            ":U".into(),
        ] {
            assert!(denied.contains(&words), "{words}: {denied}");
        }
        let read_only = unwritable(Path::new("/x"), &io::Error::from_raw_os_error(libc::EROFS));
        assert!(read_only.contains("read-only file system"), "{read_only}");
        let other = unwritable(Path::new("/x"), &io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(
            other,
            format!("/x: {}", io::Error::from_raw_os_error(libc::ENOSPC))
        );
    }

    /// A small file is read, a large one mapped; either way the bytes are the file's, and a
    /// mapped file's bytes outlive a truncation past them and the file's removal.
    #[test]
    fn reads_small_files_and_maps_large_ones() {
        let directory = std::env::temp_dir().join(format!("azq-files-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        for length in [0, 1000, MAPPED_READ_BYTES_MIN as usize + 4096] {
            let path = directory.join(format!("file-{length}"));
            let content: Vec<u8> = (0..length).map(|index| (index % 251) as u8).collect();
            std::fs::write(&path, &content).unwrap();
            let read = StdFiles.read(&path).unwrap();
            assert_eq!(read.len(), length);
            assert!(read[..] == content[..], "{length}");
            let head = read.slice(..length.min(100));
            drop(read);
            StdFiles.truncate(&path, head.len() as u64).unwrap();
            StdFiles.remove_file(&path).unwrap();
            assert!(head[..] == content[..head.len()]);
        }
        std::fs::remove_dir_all(&directory).unwrap();
        assert_eq!(
            StdFiles.read(&directory).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    /// Pages of the mapping that starts at `data` resident in this process (its `Rss` in
    /// `/proc/self/smaps`).
    fn resident_pages(data: &[u8]) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", data.as_ptr() as usize);
        let mapping = &smaps[smaps.find(&start).expect("the mapping is listed")..];
        let rss = mapping
            .lines()
            .find_map(|line| line.strip_prefix("Rss:"))
            .expect("its Rss line");
        let kib: usize = rss.trim().trim_end_matches("kB").trim().parse().unwrap();
        kib * 1024 / page_bytes()
    }

    /// A file read is resident whole at once, one read lazily only where touched; unloading
    /// a range drops exactly the pages wholly inside it (the last one too when the range
    /// reaches the end), at every alignment of its ends around a page's edges, and the bytes
    /// stay the file's.
    #[test]
    fn unloading_a_range_drops_the_pages_wholly_inside_it() {
        let directory =
            std::env::temp_dir().join(format!("azq-unload-range-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let page = page_bytes();
        let length = MAPPED_READ_BYTES_MIN as usize + 5 * page + 100;
        let pages = length.div_ceil(page);
        let content: Vec<u8> = (0..length).map(|index| (index % 249) as u8 + 1).collect();
        let path = directory.join("large");
        std::fs::write(&path, &content).unwrap();
        let read = StdFiles.read(&path).unwrap();
        assert_eq!(resident_pages(&read), pages, "read: resident at once");
        let streamed = StdFiles.read_lazily(&path, true).unwrap();
        let lazily = StdFiles.read_lazily(&path, false).unwrap();
        for data in [&streamed, &lazily] {
            assert_eq!(
                resident_pages(data),
                0,
                "read lazily: nothing until touched"
            );
            assert!(data[..] == content[..]);
            assert_eq!(resident_pages(data), pages);
        }
        let edges = |at: usize| [at.saturating_sub(1), at, at + 1];
        let mut starts = vec![0];
        let mut ends = vec![length - 1, length, length + page];
        for at in [page, 2 * page, length - length % page] {
            starts.extend(edges(at));
            ends.extend(edges(at));
        }
        for data in [&read, &streamed, &lazily] {
            for &start in &starts {
                for &end in &ends {
                    // Every page resident again, then the range let go.
                    assert!(data[..] == content[..]);
                    assert_eq!(resident_pages(data), pages);
                    StdFiles.unload_range(data, start..end);
                    let first = start.div_ceil(page);
                    let last = if end >= length { pages } else { end / page };
                    let dropped = last.saturating_sub(first);
                    assert_eq!(resident_pages(data), pages - dropped, "{start}..{end}");
                    assert!(data[..] == content[..], "{start}..{end}");
                }
            }
        }
        // Bytes in memory, page-aligned and as long, are left alone.
        let mut padded = vec![7u8; page];
        padded.extend_from_slice(&content);
        let padded = Bytes::from(padded);
        let skip = (page - padded.as_ptr() as usize % page) % page;
        let in_memory = padded.slice(skip..skip + length);
        let expected = in_memory.to_vec();
        StdFiles.unload_range(&in_memory, 0..length);
        assert!(in_memory[..] == expected[..]);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    /// Unloading a mapped file leaves its bytes readable and the same (its pages come back
    /// from the file); bytes in memory, a slice of a mapping, and a mapping gone are left
    /// alone (`MADV_DONTNEED` on memory of the heap would zero it).
    #[test]
    fn unloading_drops_only_whole_mappings_and_keeps_their_bytes() {
        let directory = std::env::temp_dir().join(format!("azq-unload-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let length = MAPPED_READ_BYTES_MIN as usize * 2 + 100;
        let content: Vec<u8> = (0..length).map(|index| (index % 253) as u8 + 1).collect();
        let path = directory.join("large");
        std::fs::write(&path, &content).unwrap();
        let mapped = StdFiles.read(&path).unwrap();
        let listed = (mapped.as_ptr() as usize, mapped.len());
        assert!(
            MAPPED.lock().unwrap().contains(&listed),
            "listed while mapped"
        );
        for _ in 0..2 {
            StdFiles.unload(&mapped);
            assert!(mapped[..] == content[..]);
        }
        // A slice is not the mapping: nothing happens to it (nor to the rest).
        StdFiles.unload(&mapped.slice(4096..8192));
        assert!(mapped[..] == content[..]);
        // Bytes in memory as long, starting on a page as a mapping does (where `madvise`
        // would act), and a small file read into memory.
        let page = 4096;
        let mut padded = vec![7u8; page];
        padded.extend_from_slice(&content);
        let padded = Bytes::from(padded);
        let skip = (page - padded.as_ptr() as usize % page) % page;
        let in_memory = padded.slice(skip..skip + length);
        assert_eq!(in_memory.as_ptr() as usize % page, 0);
        let expected = padded.slice(skip..skip + length).to_vec();
        StdFiles.unload(&in_memory);
        assert!(in_memory[..] == expected[..]);
        std::fs::write(directory.join("small"), &content[..1000]).unwrap();
        let small = StdFiles.read(&directory.join("small")).unwrap();
        StdFiles.unload(&small);
        assert!(small[..] == content[..1000]);
        drop(mapped);
        assert!(
            !MAPPED.lock().unwrap().contains(&listed),
            "forgotten once unmapped"
        );
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
