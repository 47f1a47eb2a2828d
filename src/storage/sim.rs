//! A simulated file system for crash tests, behind both disk traits (`Files` for recovery,
//! `Disk` for a running shard's log): files are inodes, directories map names to them, and
//! nothing is durable until it is synced, as on a real disk with a volatile cache:
//!
//! - a file's writes and size changes reach the device only with a sync of that file; a sync
//!   covers what had completed when it was issued, not what completes while it runs;
//! - a directory's names (created, renamed, removed) are durable only once the directory is
//!   synced (a new directory's own name, in its parent);
//! - `Disk` operations stay in flight until the test completes them, in whatever order it picks
//!   (io_uring completes out of order), or they complete at once (`immediate`);
//! - a **power cut** (`crash`) keeps what was synced; of each unsynced (or in-flight) write,
//!   every sector or page (the granularity drawn per cut) is kept, dropped, torn within, or
//!   filled with garbage; unsynced size changes happen or not; each directory keeps a prefix of
//!   its unsynced changes (an ordered metadata journal), each directory on its own;
//! - **reads** (`Disk::open_read`, `Disk::read_many`) are operations like the others: in
//!   flight until completed, in any order with the writes, and they see the file as a read of
//!   the page cache would when they complete (`current`, synced or not). A power cut loses
//!   those in flight; an open of a name that does not exist is counted (`opens_missing`);
//! - **faults**: a chosen operation fails with EIO or ENOSPC (a failed sync leaves the data it
//!   covered in any state, and forgets it, as Linux marks such pages clean), and recovery can be
//!   cut off after a number of changes (`cut_files_after`).
//!
//! On request (`record_writes`) the disk keeps a copy of every `Disk` write it makes, with the
//! file's name and offset, so that a test can see what the log wrote without asking the code
//! that reads it back: the crash simulator walks them to count the block boundaries its flushes
//! reach (a reader once lost records after a flush that ended 1 to 3 bytes before a boundary,
//! a case the simulator's workload never produced and no count showed missing).

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use bytes::{Bytes, BytesMut};

use super::files::{Disk, Files};
use crate::random::SplitMix64;

/// The sector size of the simulated device; a power cut tears at this or at `PAGE_BYTES`.
const SECTOR_BYTES: usize = 512;
/// The page size: the unit the page cache writes back.
const PAGE_BYTES: usize = 4096;

/// A change to a file since its last sync.
#[derive(Clone, Debug)]
enum Change {
    Write { offset: u64, bytes: Vec<u8> },
    Resize(u64),
}

#[derive(Clone, Debug, Default)]
struct Inode {
    /// What the device holds.
    durable: Vec<u8>,
    /// What a read sees (the page cache).
    current: Vec<u8>,
    /// Changes completed since the last sync, in order, each with its number (`Inner::changes`).
    unsynced: Vec<(u64, Change)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(usize),
    Directory(usize),
}

/// A change to a directory since its last sync.
#[derive(Clone, Debug)]
enum Entry {
    Insert(String, Node),
    Remove(String),
    Rename(String, String),
}

#[derive(Clone, Debug, Default)]
struct Directory {
    durable: BTreeMap<String, Node>,
    current: BTreeMap<String, Node>,
    unsynced: Vec<Entry>,
}

fn apply_entry(entries: &mut BTreeMap<String, Node>, change: &Entry) {
    match change {
        Entry::Insert(name, node) => {
            entries.insert(name.clone(), *node);
        }
        Entry::Remove(name) => {
            entries.remove(name);
        }
        Entry::Rename(from, to) => {
            if let Some(node) = entries.remove(from) {
                entries.insert(to.clone(), node);
            }
        }
    }
}

fn apply_change(data: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, bytes } => write_into(data, *offset, bytes),
        Change::Resize(length) => resize_zeroed(data, *length as usize),
    }
}

fn write_into(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if data.len() < end {
        resize_zeroed(data, end);
    }
    data[offset as usize..end].copy_from_slice(bytes);
}

/// Makes `data` `length` bytes long, zeros after its old end. The zeros are copied from a
/// zeroed allocation: `Vec::resize` stores them a byte at a time in a debug build, where that
/// took a seventh of the crash simulator's time.
fn resize_zeroed(data: &mut Vec<u8>, length: usize) {
    if length <= data.len() {
        data.truncate(length);
    } else {
        data.extend_from_slice(&vec![0; length - data.len()]);
    }
}

/// A `Disk` operation in flight.
#[derive(Clone, Debug)]
enum Operation {
    Create {
        path: String,
        bytes: u64,
    },
    Write {
        inode: usize,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// A sync of `inode` covering its changes numbered below `before` (those completed when it
    /// was issued).
    Sync {
        inode: usize,
        before: u64,
    },
    Rename {
        from: String,
        to: String,
    },
    /// A shrink and a sync of the file at `path` (`Disk::shrink`).
    Shrink {
        path: String,
        bytes: u64,
    },
    Remove {
        path: String,
    },
    SyncDirectory {
        path: String,
    },
    /// An open of the file at `path` for reading (`Disk::open_read`).
    OpenRead {
        path: String,
    },
    /// A read of `ranges` of `inode`, from what a read sees when it completes (the page
    /// cache), not when it was issued (`Disk::read_many`).
    Read {
        inode: usize,
        ranges: Vec<(u64, u32)>,
    },
}

/// What the simulated disk did, for a test to see that its runs reach what they mean to.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimStats {
    /// Operations completed in another order than issued.
    pub reordered: u64,
    /// Sectors or pages of unsynced writes that a power cut filled with garbage.
    pub garbage: u64,
    /// Sectors or pages of unsynced writes that a power cut tore within.
    pub torn: u64,
    /// Faults injected.
    pub faults: u64,
    /// The most bytes of writes one file held unsynced at once.
    pub unsynced_write_bytes_max: u64,
    /// Read batches answered (`Disk::read_many`), and their bytes.
    pub reads: u64,
    /// Bytes those batches answered.
    pub read_bytes: u64,
    /// Opens for reading of a name that does not exist (`Disk::open_read`). A test of the log
    /// fails on any: it would mean a file was removed while something still read from it.
    pub opens_missing: u64,
}

/// A `Disk` write the disk made, as `record_writes` keeps it.
#[derive(Clone, Debug)]
pub struct Written {
    /// The file written, by inode: one file whatever it is renamed to.
    pub inode: usize,
    /// The file's name in its directory when the write was made (`None`: removed).
    pub name: Option<String>,
    /// Where the write starts, bytes from the start of the file.
    pub offset: u64,
    /// The bytes written.
    pub bytes: Vec<u8>,
}

struct Inner {
    random: SplitMix64,
    inodes: Vec<Inode>,
    /// Directory 0 is the root.
    directories: Vec<Directory>,
    /// Operations in flight: (number, operation, result once completed).
    in_flight: Vec<(u64, Operation)>,
    completed: BTreeMap<u64, io::Result<usize>>,
    /// The bytes of completed reads, by operation number, until their caller takes them.
    read_answers: BTreeMap<u64, Vec<Bytes>>,
    next_operation: u64,
    /// The number the next change to a file gets.
    changes: u64,
    immediate: bool,
    /// The operation (by number among `Disk` operations) that fails, and with what.
    fault: Option<(u64, i32)>,
    /// Changes recovery may still make before the power goes (`cut_files_after`).
    files_budget: Option<usize>,
    stats: SimStats,
    /// The `Disk` writes made, in order, once `record_writes` asked for them.
    written: Option<Vec<Written>>,
    /// The file system's size, bytes, for `Files::space` (free is what its files leave) and
    /// `Files` writes, which fail with ENOSPC past it (`None`: not measured, not bounded).
    capacity: Option<u64>,
}

/// The simulated file system; clones share it.
#[derive(Clone)]
pub struct SimDisk(Arc<Mutex<Inner>>);

impl SimDisk {
    /// An empty file system whose power cuts and faults draw from `seed`; with `immediate`,
    /// `Disk` operations complete as soon as they are polled.
    pub fn new(seed: u64, immediate: bool) -> SimDisk {
        SimDisk(Arc::new(Mutex::new(Inner {
            random: SplitMix64::new(seed),
            inodes: Vec::new(),
            directories: vec![Directory::default()],
            in_flight: Vec::new(),
            completed: BTreeMap::new(),
            read_answers: BTreeMap::new(),
            next_operation: 0,
            changes: 0,
            immediate,
            fault: None,
            files_budget: None,
            capacity: None,
            stats: SimStats::default(),
            written: None,
        })))
    }

    /// The file system, locked: recovery may read shards on threads of their own
    /// (`Files::parallel` says no here, so a seed replays its operations in one order), which
    /// needs a disk they can share.
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().expect("no test panicked holding the disk")
    }

    /// From now on `Disk` operations complete as soon as they are polled (`immediate`, those
    /// already in flight too), or stay in flight until the test completes them.
    pub fn set_immediate(&self, immediate: bool) {
        self.inner().immediate = immediate;
    }

    /// Keeps a copy of every `Disk` write made from now on (those that complete without a
    /// fault), for `take_writes`.
    pub fn record_writes(&self) {
        self.inner().written.get_or_insert_with(Vec::new);
    }

    /// The `Disk` writes made since `record_writes` or the last call, in the order they were
    /// made.
    pub fn take_writes(&self) -> Vec<Written> {
        self.inner()
            .written
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Gives the file system a size (`Files::space`), of which its files' bytes are taken; a
    /// `Files` write that would pass it fails with ENOSPC (its bytes written, as a full file
    /// system leaves them). `Disk` writes are not bounded.
    pub fn set_capacity(&self, bytes: u64) {
        self.inner().capacity = Some(bytes);
    }

    /// What the disk did so far.
    pub fn stats(&self) -> SimStats {
        self.inner().stats
    }

    /// Makes `Disk` operation number `operation` (counted from the disk's creation) fail with
    /// the OS error `code` (EIO, ENOSPC).
    pub fn fail_operation(&self, operation: u64, code: i32) {
        self.inner().fault = Some((operation, code));
    }

    /// The number the next `Disk` operation gets.
    pub fn operations_issued(&self) -> u64 {
        self.inner().next_operation
    }

    /// Lets `Files` make `changes` more changes, then fails every later one as if the power had
    /// gone (the test then calls `crash`).
    pub fn cut_files_after(&self, changes: usize) {
        self.inner().files_budget = Some(changes);
    }

    /// `Disk` operations in flight.
    pub fn in_flight(&self) -> usize {
        self.inner().in_flight.len()
    }

    /// Completes the in-flight operation at `index` (of `in_flight()`), out of order when it is
    /// not the oldest.
    pub fn complete(&self, index: usize) {
        let mut inner = self.inner();
        if index > 0 {
            inner.stats.reordered += 1;
        }
        let (number, operation) = inner.in_flight.remove(index);
        let result = inner.execute(number, operation);
        inner.completed.insert(number, result);
    }

    /// A power cut: see the module's comment.
    pub fn crash(&self) {
        let mut inner = self.inner();
        let inner = &mut *inner;
        // Writes in flight may have reached the device in part; nothing else did.
        for (_, operation) in std::mem::take(&mut inner.in_flight) {
            if let Operation::Write {
                inode,
                offset,
                bytes,
            } = operation
            {
                inner.inodes[inode]
                    .unsynced
                    .push((u64::MAX, Change::Write { offset, bytes }));
            }
        }
        inner.completed.clear();
        inner.read_answers.clear();
        inner.files_budget = None;
        let granularity = if inner.random.next_u64() % 2 == 0 {
            SECTOR_BYTES
        } else {
            PAGE_BYTES
        };
        for index in 0..inner.inodes.len() {
            let changes: Vec<Change> = std::mem::take(&mut inner.inodes[index].unsynced)
                .into_iter()
                .map(|(_, change)| change)
                .collect();
            let mut durable = std::mem::take(&mut inner.inodes[index].durable);
            inner.settle(&mut durable, &changes, granularity);
            inner.inodes[index].current = durable.clone();
            inner.inodes[index].durable = durable;
        }
        for directory in &mut inner.directories {
            let changes = std::mem::take(&mut directory.unsynced);
            let kept = (inner.random.next_u64() % (changes.len() as u64 + 1)) as usize;
            for change in &changes[..kept] {
                apply_entry(&mut directory.durable, change);
            }
            directory.current = directory.durable.clone();
        }
    }

    /// Creates the directory `path` (its parent exists) without syncing the parent: what a run
    /// killed between the two leaves behind.
    pub fn create_directory_unsynced(&self, path: &Path) {
        let mut inner = self.inner();
        let parent = path.parent().expect("a parent");
        let Some(Node::Directory(parent)) = inner.resolve(parent) else {
            panic!("{} is not a directory", parent.display());
        };
        inner.directories.push(Directory::default());
        let child = inner.directories.len() - 1;
        let name = path.file_name().expect("a name").to_str().expect("UTF-8");
        inner.change_directory(
            parent,
            Entry::Insert(name.to_string(), Node::Directory(child)),
        );
    }

    /// Flips bits of the durable bytes of `path` at `offset` (a bad sector).
    pub fn flip(&self, path: &Path, offset: usize) {
        let mut inner = self.inner();
        let Some(Node::File(inode)) = inner.resolve(path) else {
            panic!("{} is not a file", path.display());
        };
        let inode = &mut inner.inodes[inode];
        inode.durable[offset] ^= 0x10;
        inode.current = inode.durable.clone();
    }

    /// The paths of every file reachable now, sorted.
    pub fn file_paths(&self) -> Vec<std::path::PathBuf> {
        let inner = self.inner();
        let mut paths = Vec::new();
        let mut stack = vec![(0usize, std::path::PathBuf::from("/"))];
        while let Some((directory, path)) = stack.pop() {
            for (name, node) in &inner.directories[directory].current {
                match node {
                    Node::File(_) => paths.push(path.join(name)),
                    Node::Directory(child) => stack.push((*child, path.join(name))),
                }
            }
        }
        paths.sort();
        paths
    }

    /// The first snapshot file (`.snap`) reachable now, by path; panics when there is none.
    pub fn snapshot_path(&self) -> std::path::PathBuf {
        self.file_paths()
            .into_iter()
            .find(|path| {
                path.extension()
                    .is_some_and(|extension| extension == "snap")
            })
            .expect("a snapshot")
    }

    /// Issues `operation` and waits for it to complete.
    fn submit(&self, operation: Operation) -> impl Future<Output = io::Result<usize>> + '_ {
        self.submit_numbered(operation).0
    }

    /// Issues `operation`; answers the wait for it to complete, and its number.
    fn submit_numbered(
        &self,
        operation: Operation,
    ) -> (impl Future<Output = io::Result<usize>> + '_, u64) {
        let number = {
            let mut inner = self.inner();
            let number = inner.next_operation;
            inner.next_operation += 1;
            inner.in_flight.push((number, operation));
            number
        };
        let wait = std::future::poll_fn(move |_| {
            let mut inner = self.inner();
            if inner.immediate {
                if let Some(index) = inner.in_flight.iter().position(|(n, _)| *n == number) {
                    let (_, operation) = inner.in_flight.remove(index);
                    let result = inner.execute(number, operation);
                    inner.completed.insert(number, result);
                }
            }
            match inner.completed.remove(&number) {
                Some(result) => Poll::Ready(result),
                // Still in flight, or lost in a power cut (never completes).
                None => Poll::Pending,
            }
        });
        (wait, number)
    }
}

impl Inner {
    /// Applies unsynced `changes` to `durable` as a power cut leaves them.
    fn settle(&mut self, durable: &mut Vec<u8>, changes: &[Change], granularity: usize) {
        for change in changes {
            match change {
                Change::Resize(_) => {
                    if self.random.next_u64() % 2 == 0 {
                        apply_change(durable, change);
                    }
                }
                Change::Write { offset, bytes } => {
                    let mut at = 0;
                    while at < bytes.len() {
                        // Chunks follow the device's boundaries, not the write's.
                        let position = *offset as usize + at;
                        let end = ((position / granularity + 1) * granularity - *offset as usize)
                            .min(bytes.len());
                        let chunk = &bytes[at..end];
                        match self.random.next_u64() % 10 {
                            0..=3 => write_into(durable, position as u64, chunk),
                            4..=7 => {}
                            8 => {
                                self.stats.torn += 1;
                                let part = (self.random.next_u64() % chunk.len() as u64) as usize;
                                write_into(durable, position as u64, &chunk[..part]);
                            }
                            _ => {
                                self.stats.garbage += 1;
                                let garbage: Vec<u8> =
                                    chunk.iter().map(|_| self.random.next_u64() as u8).collect();
                                write_into(durable, position as u64, &garbage);
                            }
                        }
                        at = end;
                    }
                }
            }
        }
    }

    /// The node at `path` now.
    fn resolve(&self, path: &Path) -> Option<Node> {
        let mut node = Node::Directory(0);
        for component in path.components() {
            match component {
                Component::RootDir => {}
                Component::Normal(name) => {
                    let Node::Directory(directory) = node else {
                        return None;
                    };
                    node = *self.directories[directory]
                        .current
                        .get(name.to_str().expect("UTF-8 paths"))?;
                }
                other => panic!("unexpected path component {other:?}"),
            }
        }
        Some(node)
    }

    /// The name `inode` has now in a directory, if any.
    fn name_of(&self, inode: usize) -> Option<String> {
        self.directories.iter().find_map(|directory| {
            directory
                .current
                .iter()
                .find(|(_, node)| **node == Node::File(inode))
                .map(|(name, _)| name.clone())
        })
    }

    /// The directory holding `path` and `path`'s name in it.
    fn parent(&self, path: &Path) -> io::Result<(usize, String)> {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .ok_or(io::ErrorKind::InvalidInput)?
            .to_string();
        match path.parent().and_then(|parent| self.resolve(parent)) {
            Some(Node::Directory(directory)) => Ok((directory, name)),
            _ => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn file(&self, path: &Path) -> io::Result<usize> {
        match self.resolve(path) {
            Some(Node::File(inode)) => Ok(inode),
            _ => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn change_directory(&mut self, directory: usize, change: Entry) {
        let directory = &mut self.directories[directory];
        apply_entry(&mut directory.current, &change);
        directory.unsynced.push(change);
    }

    fn sync_directory(&mut self, directory: usize) {
        let directory = &mut self.directories[directory];
        directory.durable = directory.current.clone();
        directory.unsynced.clear();
    }

    fn change_file(&mut self, inode: usize, change: Change) {
        let number = self.changes;
        self.changes += 1;
        let inode = &mut self.inodes[inode];
        apply_change(&mut inode.current, &change);
        inode.unsynced.push((number, change));
        let unsynced: usize = inode
            .unsynced
            .iter()
            .map(|(_, change)| match change {
                Change::Write { bytes, .. } => bytes.len(),
                _ => 0,
            })
            .sum();
        let most = &mut self.stats.unsynced_write_bytes_max;
        *most = (*most).max(unsynced as u64);
    }

    /// How many of `inode`'s unsynced changes are numbered below `before`.
    fn covered(&self, inode: usize, before: u64) -> usize {
        self.inodes[inode]
            .unsynced
            .iter()
            .take_while(|(number, _)| *number < before)
            .count()
    }

    /// Makes `inode`'s unsynced changes numbered below `before` durable.
    fn sync_file(&mut self, inode: usize, before: u64) {
        let covered = self.covered(inode, before);
        let inode = &mut self.inodes[inode];
        for (_, change) in inode.unsynced.drain(..covered) {
            apply_change(&mut inode.durable, &change);
        }
    }

    /// Creates or empties the file at `path`, sized to `bytes`.
    fn create_file(&mut self, path: &Path, bytes: u64) -> io::Result<usize> {
        let (directory, name) = self.parent(path)?;
        let inode = match self.directories[directory].current.get(&name) {
            Some(Node::File(inode)) => *inode,
            Some(Node::Directory(_)) => return Err(io::ErrorKind::IsADirectory.into()),
            None => {
                self.inodes.push(Inode::default());
                let inode = self.inodes.len() - 1;
                self.change_directory(directory, Entry::Insert(name, Node::File(inode)));
                inode
            }
        };
        self.change_file(inode, Change::Resize(0));
        if bytes > 0 {
            self.change_file(inode, Change::Resize(bytes));
        }
        Ok(inode)
    }

    /// Runs `operation` now: its effect, or the fault it was chosen for.
    fn execute(&mut self, number: u64, operation: Operation) -> io::Result<usize> {
        if let Some((_, code)) = self.fault.filter(|(at, _)| *at == number) {
            self.stats.faults += 1;
            // A failed sync leaves what it covered in any state, and forgets it.
            if let Operation::Sync { inode, before } = operation {
                let covered = self.covered(inode, before);
                let changes: Vec<Change> = self.inodes[inode]
                    .unsynced
                    .drain(..covered)
                    .map(|(_, change)| change)
                    .collect();
                let mut durable = std::mem::take(&mut self.inodes[inode].durable);
                self.settle(&mut durable, &changes, SECTOR_BYTES);
                self.inodes[inode].durable = durable;
            }
            return Err(io::Error::from_raw_os_error(code));
        }
        match operation {
            Operation::Create { path, bytes } => self.create_file(Path::new(&path), bytes),
            Operation::Write {
                inode,
                offset,
                bytes,
            } => {
                let name = self.written.as_ref().and_then(|_| self.name_of(inode));
                if let Some(written) = &mut self.written {
                    written.push(Written {
                        inode,
                        name,
                        offset,
                        bytes: bytes.clone(),
                    });
                }
                self.change_file(inode, Change::Write { offset, bytes });
                Ok(0)
            }
            Operation::Sync { inode, before } => {
                self.sync_file(inode, before);
                Ok(0)
            }
            Operation::Rename { from, to } => {
                let (directory, from_name) = self.parent(Path::new(&from))?;
                let (to_directory, to_name) = self.parent(Path::new(&to))?;
                assert_eq!(directory, to_directory, "renames stay in their directory");
                self.file(Path::new(&from))?;
                self.change_directory(directory, Entry::Rename(from_name, to_name));
                self.sync_directory(directory);
                Ok(0)
            }
            Operation::Shrink { path, bytes } => {
                let inode = self.file(Path::new(&path))?;
                let length = (self.inodes[inode].current.len() as u64).saturating_sub(bytes);
                self.change_file(inode, Change::Resize(length));
                self.sync_file(inode, u64::MAX);
                Ok(length as usize)
            }
            Operation::Remove { path } => {
                let (directory, name) = self.parent(Path::new(&path))?;
                self.file(Path::new(&path))?;
                self.change_directory(directory, Entry::Remove(name));
                Ok(0)
            }
            Operation::SyncDirectory { path } => match self.resolve(Path::new(&path)) {
                Some(Node::Directory(directory)) => {
                    self.sync_directory(directory);
                    Ok(0)
                }
                _ => Err(io::ErrorKind::NotFound.into()),
            },
            Operation::OpenRead { path } => {
                let inode = self.file(Path::new(&path));
                if inode.is_err() {
                    self.stats.opens_missing += 1;
                }
                inode
            }
            Operation::Read { inode, ranges } => {
                let data = &self.inodes[inode].current;
                let mut read = Vec::with_capacity(ranges.len());
                for (offset, length) in ranges {
                    let end = offset.saturating_add(u64::from(length));
                    if end > data.len() as u64 {
                        return Err(super::files::read_past_end(
                            offset,
                            length,
                            data.len() as u64,
                        ));
                    }
                    read.push(Bytes::copy_from_slice(&data[offset as usize..end as usize]));
                }
                self.stats.reads += 1;
                self.stats.read_bytes += read.iter().map(|bytes| bytes.len() as u64).sum::<u64>();
                self.read_answers.insert(number, read);
                Ok(0)
            }
        }
    }

    /// Counts one change `Files` makes; an error once the power is to go.
    /// The bytes of every file reachable now.
    fn used_bytes(&self) -> u64 {
        let mut used = 0;
        let mut stack = vec![0usize];
        while let Some(directory) = stack.pop() {
            for node in self.directories[directory].current.values() {
                match node {
                    Node::File(inode) => used += self.inodes[*inode].current.len() as u64,
                    Node::Directory(child) => stack.push(*child),
                }
            }
        }
        used
    }

    /// ENOSPC where the files take more than the capacity set (`SimDisk::set_capacity`).
    fn check_capacity(&self) -> io::Result<()> {
        match self.capacity {
            Some(capacity) if self.used_bytes() > capacity => {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            _ => Ok(()),
        }
    }

    fn spend(&mut self) -> io::Result<()> {
        match &mut self.files_budget {
            Some(0) => Err(io::Error::other("simulated power cut")),
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

fn text(path: &Path) -> String {
    path.to_str().expect("UTF-8 paths").to_string()
}

impl Files for SimDisk {
    fn list(&self, directory: &Path) -> io::Result<Vec<String>> {
        let inner = self.inner();
        match inner.resolve(directory) {
            Some(Node::Directory(directory)) => Ok(inner.directories[directory]
                .current
                .keys()
                .cloned()
                .collect()),
            _ => Ok(Vec::new()),
        }
    }

    fn read(&self, path: &Path) -> io::Result<Bytes> {
        let inner = self.inner();
        let inode = inner.file(path)?;
        Ok(Bytes::from(inner.inodes[inode].current.clone()))
    }

    fn size(&self, path: &Path) -> io::Result<u64> {
        let inner = self.inner();
        let inode = inner.file(path)?;
        Ok(inner.inodes[inode].current.len() as u64)
    }

    fn space(&self, _path: &Path) -> io::Result<super::space::Space> {
        let inner = self.inner();
        let Some(total_bytes) = inner.capacity else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no capacity set",
            ));
        };
        Ok(super::space::Space {
            free_bytes: total_bytes.saturating_sub(inner.used_bytes()),
            total_bytes,
        })
    }

    fn write_synced_in_pieces(
        &self,
        path: &Path,
        next: &mut dyn FnMut(&mut BytesMut) -> bool,
    ) -> io::Result<()> {
        let mut inner = self.inner();
        inner.spend()?;
        let inode = inner.create_file(path, 0)?;
        let (mut piece, mut offset) = (BytesMut::new(), 0);
        loop {
            piece.clear();
            let more = next(&mut piece);
            inner.change_file(
                inode,
                Change::Write {
                    offset,
                    bytes: piece.to_vec(),
                },
            );
            offset += piece.len() as u64;
            inner.check_capacity()?;
            if !more {
                break;
            }
            // Each further piece a write of its own, which a power cut may come before.
            inner.spend()?;
        }
        inner.sync_file(inode, u64::MAX);
        Ok(())
    }

    fn truncate(&self, path: &Path, length: u64) -> io::Result<()> {
        let mut inner = self.inner();
        inner.spend()?;
        let inode = inner.file(path)?;
        inner.change_file(inode, Change::Resize(length));
        inner.sync_file(inode, u64::MAX);
        Ok(())
    }

    fn create_directories(&self, directory: &Path) -> io::Result<()> {
        let mut inner = self.inner();
        let mut at = std::path::PathBuf::from("/");
        for component in directory.components().skip(1) {
            let parent = at.clone();
            at.push(component);
            let Some(Node::Directory(parent)) = inner.resolve(&parent) else {
                return Err(io::ErrorKind::NotFound.into());
            };
            if inner.resolve(&at).is_none() {
                inner.spend()?;
                inner.directories.push(Directory::default());
                let child = inner.directories.len() - 1;
                let name = component.as_os_str().to_str().expect("UTF-8").to_string();
                inner.change_directory(parent, Entry::Insert(name, Node::Directory(child)));
                inner.sync_directory(parent);
            } else if at == directory {
                // Made by an earlier run that may have died before syncing its parent.
                inner.sync_directory(parent);
            }
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut inner = self.inner();
        inner.spend()?;
        let (directory, from_name) = inner.parent(from)?;
        let (_, to_name) = inner.parent(to)?;
        inner.file(from)?;
        inner.change_directory(directory, Entry::Rename(from_name, to_name));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut inner = self.inner();
        inner.spend()?;
        let (directory, name) = inner.parent(path)?;
        inner.file(path)?;
        inner.change_directory(directory, Entry::Remove(name));
        Ok(())
    }

    fn remove_directory(&self, path: &Path) -> io::Result<()> {
        let mut inner = self.inner();
        inner.spend()?;
        let (directory, name) = inner.parent(path)?;
        inner.change_directory(directory, Entry::Remove(name));
        Ok(())
    }

    fn sync_directory(&self, path: &Path) -> io::Result<()> {
        let mut inner = self.inner();
        inner.spend()?;
        match inner.resolve(path) {
            Some(Node::Directory(directory)) => {
                inner.sync_directory(directory);
                Ok(())
            }
            _ => Err(io::ErrorKind::NotFound.into()),
        }
    }
}

/// An open file of the simulated disk: its inode.
#[derive(Clone, Copy, Debug)]
pub struct SimFile(usize);

impl Disk for SimDisk {
    type File = SimFile;

    async fn create(&self, path: &Path, bytes: u64) -> io::Result<SimFile> {
        let inode = self
            .submit(Operation::Create {
                path: text(path),
                bytes,
            })
            .await?;
        Ok(SimFile(inode))
    }

    async fn write_at(&self, file: &SimFile, offset: u64, blocks: &[u8]) -> io::Result<()> {
        self.submit(Operation::Write {
            inode: file.0,
            offset,
            bytes: blocks.to_vec(),
        })
        .await
        .map(drop)
    }

    async fn sync(&self, file: &SimFile) -> io::Result<()> {
        let before = self.inner().changes;
        self.submit(Operation::Sync {
            inode: file.0,
            before,
        })
        .await
        .map(drop)
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.submit(Operation::Rename {
            from: text(from),
            to: text(to),
        })
        .await
        .map(drop)
    }

    async fn shrink(&self, path: &Path, bytes: u64) -> io::Result<u64> {
        let length = self
            .submit(Operation::Shrink {
                path: text(path),
                bytes,
            })
            .await?;
        Ok(length as u64)
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        self.submit(Operation::Remove { path: text(path) })
            .await
            .map(drop)
    }

    async fn sync_directory(&self, path: &Path) -> io::Result<()> {
        self.submit(Operation::SyncDirectory { path: text(path) })
            .await
            .map(drop)
    }

    type ReadFile = SimFile;

    async fn open_read(&self, path: &Path) -> io::Result<SimFile> {
        let inode = self
            .submit(Operation::OpenRead { path: text(path) })
            .await?;
        Ok(SimFile(inode))
    }

    async fn read_many(&self, file: &SimFile, ranges: &[(u64, u32)]) -> io::Result<Vec<Bytes>> {
        super::files::read_batch_bytes(ranges);
        let (wait, number) = self.submit_numbered(Operation::Read {
            inode: file.0,
            ranges: ranges.to_vec(),
        });
        wait.await?;
        let answer = self.inner().read_answers.remove(&number);
        Ok(answer.expect("a completed read's bytes"))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};

    use super::*;
    use crate::storage::read_checks;

    /// Polls `future` once with a waker that does nothing.
    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// A disk holding `read_checks::content()` at /file, durable.
    fn disk_with_content(immediate: bool) -> SimDisk {
        let disk = SimDisk::new(7, immediate);
        Files::write_synced(&disk, Path::new("/file"), &read_checks::content()).expect("written");
        Files::sync_directory(&disk, Path::new("/")).expect("synced");
        disk
    }

    /// The simulated disk's reads pass the checks every backend's do.
    #[test]
    fn reads_pass_the_read_checks() {
        let disk = disk_with_content(true);
        futures_lite::future::block_on(async {
            let file = disk.open_read(Path::new("/file")).await.expect("opened");
            read_checks::check_boundaries(&disk, &file).await;
            read_checks::check_random_batches(&disk, &file).await;
        });
        assert!(disk.stats().reads > 0 && disk.stats().read_bytes > 0);
        assert_eq!(disk.stats().opens_missing, 0);
    }

    /// A read sees the file as it is when the read completes: a write that completes first is
    /// seen even if issued after the read (io_uring completes out of order), and so is data not
    /// synced yet (the page cache).
    #[test]
    fn a_read_sees_the_writes_completed_before_it_completes() {
        let disk = disk_with_content(false);
        let content = read_checks::content();
        let path = Path::new("/file");
        let mut open = pin!(disk.open_read(path));
        assert!(poll_once(open.as_mut()).is_pending());
        disk.complete(0);
        let Poll::Ready(Ok(file)) = poll_once(open.as_mut()) else {
            panic!("opened");
        };
        let mut read = pin!(disk.read_many(&file, &[(4090, 12)]));
        assert!(poll_once(read.as_mut()).is_pending());
        let block = vec![0xA5; crate::limits::STORAGE_BLOCK_BYTES];
        let mut write = pin!(Disk::write_at(&disk, &file, 4096, &block));
        assert!(poll_once(write.as_mut()).is_pending());
        assert_eq!(disk.in_flight(), 2);
        // The write, issued second, completes first.
        disk.complete(1);
        assert!(matches!(poll_once(write.as_mut()), Poll::Ready(Ok(()))));
        disk.complete(0);
        let Poll::Ready(Ok(bytes)) = poll_once(read.as_mut()) else {
            panic!("read");
        };
        assert_eq!(bytes[0][..6], content[4090..4096]);
        assert_eq!(bytes[0][6..], [0xA5; 6]);
        assert_eq!(disk.stats().reordered, 1);
    }

    /// A read chosen to fail answers the error and nothing else; the next read works. An open
    /// of a missing name fails and is counted. A power cut loses the reads in flight and leaves
    /// the files as they were.
    #[test]
    fn read_faults_missing_names_and_power_cuts() {
        let disk = disk_with_content(true);
        let content = read_checks::content();
        futures_lite::future::block_on(async {
            let file = disk.open_read(Path::new("/file")).await.expect("opened");
            disk.fail_operation(disk.operations_issued(), libc::EIO);
            let error = disk
                .read_many(&file, &[(0, 10)])
                .await
                .expect_err("a fault");
            assert_eq!(error.raw_os_error(), Some(libc::EIO));
            let read = disk.read_many(&file, &[(0, 10)]).await.expect("read");
            assert_eq!(read[0], content[..10]);
            disk.fail_operation(disk.operations_issued(), libc::EIO);
            let error = disk
                .open_read(Path::new("/file"))
                .await
                .expect_err("a fault");
            assert_eq!(error.raw_os_error(), Some(libc::EIO));
            let error = disk
                .open_read(Path::new("/gone"))
                .await
                .expect_err("missing");
            assert_eq!(error.kind(), io::ErrorKind::NotFound);
        });
        assert_eq!(disk.stats().faults, 2);
        assert_eq!(disk.stats().opens_missing, 1);

        let disk = disk_with_content(false);
        let file = SimFile(0);
        let mut read = pin!(disk.read_many(&file, &[(1, 100)]));
        assert!(poll_once(read.as_mut()).is_pending());
        disk.crash();
        assert_eq!(disk.in_flight(), 0);
        assert!(
            poll_once(read.as_mut()).is_pending(),
            "lost in the power cut"
        );
        assert_eq!(
            Files::read(&disk, Path::new("/file")).expect("read"),
            content
        );
    }
}
