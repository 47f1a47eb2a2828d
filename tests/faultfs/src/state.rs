//! The file system without FUSE: the directory it passes through to, its names and open files,
//! and the journal of every change not yet synced, each with what it takes to undo it. A power
//! cut ([`State::cut`]) decides what of each change reached the disk, undoes the rest newest
//! first, and leaves in the directory what the disk would hold after the cut.
//!
//! **The model.** What "synced" means here, and what a cut may keep of what was not:
//! - A write or a size change of a file (truncate, fallocate, a write past its end) is durable
//!   once the file is fsynced or fdatasynced (both make the data readable, its size included).
//!   Until then a cut keeps or loses each 512-byte sector of a write on its own (a torn write,
//!   as a disk without power-loss protection may leave it), and a prefix of the file's size
//!   changes.
//! - A name (create, mkdir, unlink, rmdir, rename) is durable once its directory is fsynced (both
//!   directories for a rename between two). Syncing the file does not make its name durable
//!   (POSIX and XFS say so; ext4 happens to do more). Until then a cut keeps a prefix of each
//!   directory's unsynced changes: a journaling file system applies them in order.
//! - Reads see every write, synced or not, as through a page cache.
//!
//! **How.** Every change is made in the directory at once, so reads and listings are plain
//! reads, and the journal keeps what each change destroyed: the bytes a write overwrote, the tail
//! a truncation cut off, and a removed file or directory, which is moved aside into a hidden
//! directory ([`GRAVEYARD_NAME`]) instead of deleted. A sync drops the entries it makes durable
//! and deletes what they moved aside.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file or directory of the mounted tree, as numbered for the kernel.
pub type NodeId = u64;
/// The root of the tree (FUSE's root inode number).
pub const ROOT: NodeId = 1;
/// The hidden directory removed files wait in until their removal is durable.
const GRAVEYARD: NodeId = 2;
/// The graveyard's name in the root of the directory; the mount never shows it.
pub const GRAVEYARD_NAME: &str = ".faultfs-removed";
/// The unit a cut keeps or loses of a write: a disk's logical sector.
pub const SECTOR_BYTES: u64 = 512;
/// The size `statfs` reports without `--capacity` (half of it free): room enough.
const ROOMY_DISK_BYTES: u64 = 64 << 30;
/// The unit of a cut that tears by pages (a page cache's writeback).
const PAGE_BYTES: u64 = 4096;

/// What the file system refuses, to exercise its users' fallbacks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// `fallocate` fails with EOPNOTSUPP (as on many FUSE and network file systems).
    pub decline_fallocate: bool,
    /// O_DIRECT I/O fails with EINVAL: an open with O_DIRECT, and every read or write of a file
    /// that O_DIRECT was set on later with fcntl (the kernel does not ask a FUSE server about
    /// fcntl, so the write is the first place it can refuse).
    pub decline_direct: bool,
    /// The file system holds this many bytes (`--capacity`): a write or `fallocate` that would
    /// allocate past it fails with ENOSPC, and `statfs` reports the room left. `None`: room
    /// enough, as a large disk would report it.
    pub capacity_bytes: Option<u64>,
    /// `statfs` reports room enough whatever the capacity (`--hide-capacity`), as a
    /// thin-provisioned volume or a quota the file system does not report can: the disk fills
    /// without warning.
    pub capacity_hidden: bool,
}

/// Counts of what reached the file system, for tests to check which paths their programs took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Writes that arrived with O_DIRECT in the file's flags (bypassing the kernel's page cache).
    pub writes_direct: u64,
    /// Writes without O_DIRECT.
    pub writes_buffered: u64,
    /// Opens, reads and writes refused because of O_DIRECT (`decline_direct`).
    pub direct_declined: u64,
    /// `fallocate` calls served.
    pub fallocates: u64,
    /// `fallocate` calls refused (`decline_fallocate`, or a mode this file system lacks).
    pub fallocates_declined: u64,
    /// fsync and fdatasync of files.
    pub file_syncs: u64,
    /// fsync of directories.
    pub directory_syncs: u64,
    /// Writes and `fallocate` calls refused with ENOSPC (`capacity_bytes`).
    pub no_space: u64,
}

/// How a power cut treats what was not synced.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// Everything unsynced is lost.
    Drop,
    /// Each unsynced write is kept, lost, or torn (by sector or by page), a prefix of each file's
    /// size changes and of each directory's name changes is kept, all chosen by the seed.
    Random(u64),
    /// Everything unsynced is lost except the first `sectors` sectors of the `write`-th unsynced
    /// write (numbered as [`State::pending_changes`] lists them) and its file's earlier size
    /// changes.
    Tear {
        /// Which write, counting from 0.
        write: usize,
        /// How many of its sectors reach the disk.
        sectors: u64,
    },
}

/// What a cut kept and lost.
#[derive(Clone, Copy, Debug, Default)]
pub struct CutSummary {
    /// Unsynced writes kept whole.
    pub writes_kept: u64,
    /// Unsynced writes lost whole.
    pub writes_lost: u64,
    /// Unsynced writes of which some sectors were kept and others lost.
    pub writes_torn: u64,
    /// Size changes kept and lost.
    pub resizes_kept: u64,
    /// Size changes undone.
    pub resizes_lost: u64,
    /// Name changes kept.
    pub names_kept: u64,
    /// Name changes undone.
    pub names_lost: u64,
}

/// A name in the tree: its directory and its name there.
struct Node {
    parent: NodeId,
    name: OsString,
}

/// One change not yet durable, and what undoing it takes.
enum Change {
    /// Bytes written into a file.
    Write {
        node: NodeId,
        file: Arc<File>,
        offset: u64,
        length: u64,
        /// The bytes the write replaced, up to the file's size then.
        before: Vec<u8>,
        /// The file's size before the write (beyond it a lost sector reads as zeros).
        size_before: u64,
    },
    /// A file's size changed.
    Resize {
        node: NodeId,
        file: Arc<File>,
        size_before: u64,
        size_after: u64,
        /// What a shrink cut off: the bytes from `size_after` to `size_before`.
        tail_before: Vec<u8>,
    },
    /// The file or directory `node` was created (in the directory its entry waits for).
    Create { node: NodeId, directory: bool },
    /// `name` was removed from `parent`; `node` waits in the graveyard.
    Remove {
        parent: NodeId,
        name: OsString,
        node: NodeId,
    },
    /// `node` was renamed from `from` to `to`; what `to` named before waits in the graveyard.
    Rename {
        from: (NodeId, OsString),
        to: (NodeId, OsString),
        node: NodeId,
        replaced: Option<NodeId>,
    },
}

/// A journal entry: a change and the nodes whose sync it waits for (the file, or the
/// directories of a name).
struct Entry {
    change: Change,
    waiting: Vec<NodeId>,
}

/// The file system's state.
pub struct State {
    root: PathBuf,
    options: Options,
    nodes: HashMap<NodeId, Node>,
    children: HashMap<(NodeId, OsString), NodeId>,
    next_node: NodeId,
    /// Each file's descriptor (read and write), shared by its handles and by the journal
    /// entries that may have to undo a write into it, even after it was removed.
    files: HashMap<NodeId, Arc<File>>,
    /// Open handles (files and directories) and their nodes.
    handles: HashMap<u64, NodeId>,
    next_handle: u64,
    journal: Vec<Entry>,
    next_grave: u64,
    stats: Stats,
    /// Set by [`State::power_off`]: every request fails, the journal stays as it was.
    powered_off: bool,
    /// Set by a cut: every request fails until the next mount.
    cut_done: bool,
}

/// An error with an errno, as the kernel will pass it on.
fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl State {
    /// The state of a file system passing through to `root`. A graveyard left by a faultfs that
    /// ended without a cut is emptied: the removals it held count as durable.
    pub fn new(root: &Path, options: Options) -> io::Result<State> {
        let graveyard = root.join(GRAVEYARD_NAME);
        if graveyard.exists() {
            std::fs::remove_dir_all(&graveyard)?;
        }
        std::fs::create_dir(&graveyard)?;
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: OsString::new(),
            },
        );
        nodes.insert(
            GRAVEYARD,
            Node {
                parent: ROOT,
                name: GRAVEYARD_NAME.into(),
            },
        );
        Ok(State {
            root: root.to_path_buf(),
            options,
            nodes,
            children: HashMap::new(),
            next_node: GRAVEYARD + 1,
            files: HashMap::new(),
            handles: HashMap::new(),
            next_handle: 1,
            journal: Vec::new(),
            next_grave: 0,
            stats: Stats::default(),
            powered_off: false,
            cut_done: false,
        })
    }

    /// What reached the file system so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Open file and directory handles.
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// Unsynced writes, size changes and name changes.
    pub fn pending(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for entry in &self.journal {
            match entry.change {
                Change::Write { .. } => counts.0 += 1,
                Change::Resize { .. } => counts.1 += 1,
                _ => counts.2 += 1,
            }
        }
        counts
    }

    /// One line per unsynced change, oldest first: `write NUMBER FILE OFFSET LENGTH` (numbered
    /// as [`Cut::Tear`] counts), `resize FILE FROM TO`, `create PATH`, `remove PATH`, `rename
    /// FROM TO`.
    pub fn pending_changes(&self) -> Vec<String> {
        let show = |node: NodeId| {
            self.relative_path(node)
                .map(|path| path.display().to_string())
                .unwrap_or_else(|| "(removed)".into())
        };
        let name = |parent: NodeId, name: &OsStr| {
            self.relative_path(parent)
                .map(|path| path.join(name).display().to_string())
                .unwrap_or_else(|| "(removed)".into())
        };
        let mut writes = 0;
        let mut lines = Vec::new();
        for entry in &self.journal {
            lines.push(match &entry.change {
                Change::Write {
                    node,
                    offset,
                    length,
                    ..
                } => {
                    writes += 1;
                    format!("write {} {} {offset} {length}", writes - 1, show(*node))
                }
                Change::Resize {
                    node,
                    size_before,
                    size_after,
                    ..
                } => format!("resize {} {size_before} {size_after}", show(*node)),
                Change::Create { node, .. } => format!("create {}", show(*node)),
                Change::Remove {
                    parent,
                    name: removed,
                    ..
                } => {
                    format!("remove {}", name(*parent, removed))
                }
                Change::Rename { from, to, .. } => {
                    format!("rename {} {}", name(from.0, &from.1), name(to.0, &to.1))
                }
            });
        }
        lines
    }

    /// The power goes now, while programs still run: every later request fails with EIO (a
    /// disk that is gone), so nothing more becomes durable, and a later [`State::cut`] decides
    /// what of the changes before this instant reached the disk.
    pub fn power_off(&mut self) {
        self.powered_off = true;
    }

    fn check_power(&self) -> io::Result<()> {
        if self.cut_done || self.powered_off {
            Err(errno(libc::EIO))
        } else {
            Ok(())
        }
    }

    /// `node`'s path from the root, when it has one.
    fn relative_path(&self, mut node: NodeId) -> Option<PathBuf> {
        let mut names = Vec::new();
        while node != ROOT {
            let entry = self.nodes.get(&node)?;
            names.push(entry.name.as_os_str());
            node = entry.parent;
        }
        Some(names.iter().rev().collect())
    }

    /// `node`'s path in the directory passed through to.
    fn path(&self, node: NodeId) -> io::Result<PathBuf> {
        self.relative_path(node)
            .map(|relative| self.root.join(relative))
            .ok_or_else(|| errno(libc::ESTALE))
    }

    /// The graveyard is reachable by no name of the mount.
    fn hidden(parent: NodeId, name: &OsStr) -> bool {
        parent == ROOT && name == GRAVEYARD_NAME
    }

    /// The node of `name` in `parent`, numbered on first sight.
    fn child(&mut self, parent: NodeId, name: &OsStr) -> NodeId {
        if let Some(node) = self.children.get(&(parent, name.to_os_string())) {
            return *node;
        }
        let node = self.next_node;
        self.next_node += 1;
        self.nodes.insert(
            node,
            Node {
                parent,
                name: name.to_os_string(),
            },
        );
        self.children.insert((parent, name.to_os_string()), node);
        node
    }

    /// Gives `node` the name `name` in `parent` (and takes its old one away).
    fn place(&mut self, node: NodeId, parent: NodeId, name: &OsStr) {
        if let Some(old) = self.nodes.get(&node) {
            let key = (old.parent, old.name.clone());
            if self.children.get(&key) == Some(&node) {
                self.children.remove(&key);
            }
        }
        self.nodes.insert(
            node,
            Node {
                parent,
                name: name.to_os_string(),
            },
        );
        if parent != GRAVEYARD {
            self.children.insert((parent, name.to_os_string()), node);
        }
    }

    /// The descriptor of the file `node`, opened on first use.
    fn file(&mut self, node: NodeId) -> io::Result<Arc<File>> {
        if let Some(file) = self.files.get(&node) {
            return Ok(file.clone());
        }
        let file = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path(node)?)?,
        );
        self.files.insert(node, file.clone());
        Ok(file)
    }

    /// Looks `name` up in `parent`.
    pub fn lookup(&mut self, parent: NodeId, name: &OsStr) -> io::Result<(NodeId, Metadata)> {
        self.check_power()?;
        if Self::hidden(parent, name) {
            return Err(errno(libc::ENOENT));
        }
        let metadata = std::fs::symlink_metadata(self.path(parent)?.join(name))?;
        Ok((self.child(parent, name), metadata))
    }

    /// The attributes of `node` (through its descriptor when it has one: a removed file that is
    /// still open has no path).
    pub fn attributes(&mut self, node: NodeId) -> io::Result<Metadata> {
        self.check_power()?;
        match self.files.get(&node) {
            Some(file) => file.metadata(),
            None => std::fs::symlink_metadata(self.path(node)?),
        }
    }

    /// Changes the permission bits of `node`.
    pub fn set_mode(&mut self, node: NodeId, mode: u32) -> io::Result<()> {
        self.check_power()?;
        let path = self.path(node)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
    }

    /// Creates (or, without O_EXCL, opens) the file `name` in `parent` and opens a handle on it.
    pub fn create(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> io::Result<(NodeId, Metadata, u64)> {
        self.check_power()?;
        if Self::hidden(parent, name) {
            return Err(errno(libc::EACCES));
        }
        self.check_direct(flags)?;
        let path = self.path(parent)?.join(name);
        let existed = std::fs::symlink_metadata(&path).is_ok();
        if existed && flags & libc::O_EXCL != 0 {
            return Err(errno(libc::EEXIST));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(mode)
            .open(&path)?;
        let node = self.child(parent, name);
        if !existed {
            self.record(
                Change::Create {
                    node,
                    directory: false,
                },
                vec![parent],
            );
        }
        self.files.insert(node, Arc::new(file));
        if existed && flags & libc::O_TRUNC != 0 {
            self.set_size(node, 0)?;
        }
        let handle = self.open_handle(node);
        Ok((node, self.attributes(node)?, handle))
    }

    /// Creates the directory `name` in `parent`.
    pub fn mkdir(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        mode: u32,
    ) -> io::Result<(NodeId, Metadata)> {
        self.check_power()?;
        if Self::hidden(parent, name) {
            return Err(errno(libc::EACCES));
        }
        let path = self.path(parent)?.join(name);
        std::fs::create_dir(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))?;
        let node = self.child(parent, name);
        self.record(
            Change::Create {
                node,
                directory: true,
            },
            vec![parent],
        );
        Ok((node, std::fs::symlink_metadata(&path)?))
    }

    /// Moves `node` into the graveyard.
    fn bury(&mut self, node: NodeId) -> io::Result<()> {
        let grave: OsString = format!("{}", self.next_grave).into();
        self.next_grave += 1;
        std::fs::rename(self.path(node)?, self.path(GRAVEYARD)?.join(&grave))?;
        self.place(node, GRAVEYARD, &grave);
        Ok(())
    }

    /// Removes the file (or, with `directory`, the empty directory) `name` from `parent`.
    pub fn remove(&mut self, parent: NodeId, name: &OsStr, directory: bool) -> io::Result<()> {
        self.check_power()?;
        if Self::hidden(parent, name) {
            return Err(errno(libc::EACCES));
        }
        let (node, metadata) = self.lookup(parent, name)?;
        if directory {
            if !metadata.is_dir() {
                return Err(errno(libc::ENOTDIR));
            }
            if std::fs::read_dir(self.path(node)?)?.next().is_some() {
                return Err(errno(libc::ENOTEMPTY));
            }
        } else if metadata.is_dir() {
            return Err(errno(libc::EISDIR));
        }
        self.bury(node)?;
        self.record(
            Change::Remove {
                parent,
                name: name.to_os_string(),
                node,
            },
            vec![parent],
        );
        Ok(())
    }

    /// Renames `name` in `parent` to `new_name` in `new_parent`, replacing what was there unless
    /// `no_replace`.
    pub fn rename(
        &mut self,
        parent: NodeId,
        name: &OsStr,
        new_parent: NodeId,
        new_name: &OsStr,
        no_replace: bool,
    ) -> io::Result<()> {
        self.check_power()?;
        if Self::hidden(parent, name) || Self::hidden(new_parent, new_name) {
            return Err(errno(libc::EACCES));
        }
        let (node, metadata) = self.lookup(parent, name)?;
        let target = match self.lookup(new_parent, new_name) {
            Ok(found) => Some(found),
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => None,
            Err(error) => return Err(error),
        };
        let mut replaced = None;
        if let Some((target, target_metadata)) = target {
            if target == node {
                return Ok(());
            }
            if no_replace {
                return Err(errno(libc::EEXIST));
            }
            match (metadata.is_dir(), target_metadata.is_dir()) {
                (true, false) => return Err(errno(libc::ENOTDIR)),
                (false, true) => return Err(errno(libc::EISDIR)),
                (true, true) if std::fs::read_dir(self.path(target)?)?.next().is_some() => {
                    return Err(errno(libc::ENOTEMPTY))
                }
                _ => {}
            }
            self.bury(target)?;
            replaced = Some(target);
        }
        let destination = self.path(new_parent)?.join(new_name);
        if let Err(error) = std::fs::rename(self.path(node)?, &destination) {
            if let Some(target) = replaced {
                std::fs::rename(self.path(target)?, &destination)?;
                self.place(target, new_parent, new_name);
            }
            return Err(error);
        }
        self.place(node, new_parent, new_name);
        let waiting = if parent == new_parent {
            vec![parent]
        } else {
            vec![parent, new_parent]
        };
        self.record(
            Change::Rename {
                from: (parent, name.to_os_string()),
                to: (new_parent, new_name.to_os_string()),
                node,
                replaced,
            },
            waiting,
        );
        Ok(())
    }

    /// Refuses O_DIRECT when told to.
    fn check_direct(&mut self, flags: i32) -> io::Result<()> {
        if self.options.decline_direct && flags & libc::O_DIRECT != 0 {
            self.stats.direct_declined += 1;
            return Err(errno(libc::EINVAL));
        }
        Ok(())
    }

    fn open_handle(&mut self, node: NodeId) -> u64 {
        let handle = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(handle, node);
        handle
    }

    /// Opens a handle on the file `node`.
    pub fn open(&mut self, node: NodeId, flags: i32) -> io::Result<u64> {
        self.check_power()?;
        self.check_direct(flags)?;
        self.file(node)?;
        Ok(self.open_handle(node))
    }

    /// Opens a handle on the directory `node`.
    pub fn open_directory(&mut self, node: NodeId) -> io::Result<u64> {
        self.check_power()?;
        if !std::fs::symlink_metadata(self.path(node)?)?.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(self.open_handle(node))
    }

    /// Closes `handle`. A removed file's descriptor is closed with its last handle once no
    /// journal entry may need to bring it back.
    pub fn release(&mut self, handle: u64) {
        if let Some(node) = self.handles.remove(&handle) {
            self.forget_file_if_gone(node);
        }
    }

    fn forget_file_if_gone(&mut self, node: NodeId) {
        let removed = self
            .nodes
            .get(&node)
            .is_none_or(|entry| entry.parent == GRAVEYARD);
        let buried = self.journal.iter().any(|entry| match &entry.change {
            Change::Remove { node: buried, .. } => *buried == node,
            Change::Rename { replaced, .. } => *replaced == Some(node),
            _ => false,
        });
        if removed && !buried && !self.handles.values().any(|open| *open == node) {
            self.files.remove(&node);
        }
    }

    /// Reads up to `size` bytes of `node` at `offset`.
    pub fn read(
        &mut self,
        node: NodeId,
        offset: u64,
        size: u32,
        flags: i32,
    ) -> io::Result<Vec<u8>> {
        self.check_power()?;
        self.check_direct(flags)?;
        let file = self.file(node)?;
        let mut buffer = vec![0; size as usize];
        let mut filled = 0;
        while filled < buffer.len() {
            match file.read_at(&mut buffer[filled..], offset + filled as u64)? {
                0 => break,
                read => filled += read,
            }
        }
        buffer.truncate(filled);
        Ok(buffer)
    }

    /// Writes `data` into `node` at `offset`; `flags` are the file's (O_DIRECT among them).
    pub fn write(&mut self, node: NodeId, offset: u64, data: &[u8], flags: i32) -> io::Result<()> {
        self.check_power()?;
        self.check_direct(flags)?;
        if flags & libc::O_DIRECT != 0 {
            self.stats.writes_direct += 1;
        } else {
            self.stats.writes_buffered += 1;
        }
        let file = self.file(node)?;
        let size_before = file.metadata()?.len();
        let end = offset + data.len() as u64;
        self.check_room(&file, end)?;
        if end > size_before {
            self.record(
                Change::Resize {
                    node,
                    file: file.clone(),
                    size_before,
                    size_after: end,
                    tail_before: Vec::new(),
                },
                vec![node],
            );
        }
        let before = read_range(&file, offset, end.min(size_before))?;
        self.record(
            Change::Write {
                node,
                file: file.clone(),
                offset,
                length: data.len() as u64,
                before,
                size_before,
            },
            vec![node],
        );
        file.write_all_at(data, offset)
    }

    /// Truncates or extends `node` to `size`.
    pub fn set_size(&mut self, node: NodeId, size: u64) -> io::Result<()> {
        self.check_power()?;
        let file = self.file(node)?;
        let size_before = file.metadata()?.len();
        if size == size_before {
            return Ok(());
        }
        let tail_before = read_range(&file, size, size_before)?;
        self.record(
            Change::Resize {
                node,
                file: file.clone(),
                size_before,
                size_after: size,
                tail_before,
            },
            vec![node],
        );
        file.set_len(size)
    }

    /// Allocates `length` bytes of `node` from `offset` (mode 0: extending the file; or
    /// FALLOC_FL_KEEP_SIZE).
    pub fn fallocate(
        &mut self,
        node: NodeId,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> io::Result<()> {
        self.check_power()?;
        if self.options.decline_fallocate || mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            self.stats.fallocates_declined += 1;
            return Err(errno(libc::EOPNOTSUPP));
        }
        let file = self.file(node)?;
        self.check_room(&file, offset + length)?;
        self.stats.fallocates += 1;
        let size_before = file.metadata()?.len();
        if mode == 0 && offset + length > size_before {
            self.record(
                Change::Resize {
                    node,
                    file: file.clone(),
                    size_before,
                    size_after: offset + length,
                    tail_before: Vec::new(),
                },
                vec![node],
            );
        }
        // SAFETY: fallocate reads the descriptor, which `file` keeps open, and three integers.
        let result = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                length as libc::off_t,
            )
        };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Refuses with ENOSPC a write or allocation of `file` up to `end` that would take the
    /// file system past its capacity. What it would allocate is counted as the range past the
    /// blocks the file already has (a write into preallocated blocks needs none).
    fn check_room(&mut self, file: &File, end: u64) -> io::Result<()> {
        let Some(capacity_bytes) = self.options.capacity_bytes else {
            return Ok(());
        };
        let allocated = file.metadata()?.blocks() * SECTOR_BYTES;
        let more = end.saturating_sub(allocated);
        if more > 0 && self.used_bytes()? + more > capacity_bytes {
            self.stats.no_space += 1;
            return Err(errno(libc::ENOSPC));
        }
        Ok(())
    }

    /// Bytes the files hold (their allocated blocks, as a disk counts them), the graveyard's
    /// excepted: a removed file's blocks are free on a disk once it is unlinked.
    pub fn used_bytes(&self) -> io::Result<u64> {
        fn walk(directory: &Path, skip: &Path) -> io::Result<u64> {
            let mut bytes = 0;
            for entry in std::fs::read_dir(directory)? {
                let entry = entry?;
                let path = entry.path();
                let metadata = entry.metadata()?;
                if metadata.is_dir() {
                    if path != skip {
                        bytes += walk(&path, skip)?;
                    }
                } else {
                    bytes += metadata.blocks() * SECTOR_BYTES;
                }
            }
            Ok(bytes)
        }
        walk(&self.root, &self.root.join(GRAVEYARD_NAME))
    }

    /// The file system's size and the bytes free in it, for `statfs`: the capacity and what the
    /// files leave of it, or, without one, room enough.
    pub fn space(&self) -> io::Result<(u64, u64)> {
        match self
            .options
            .capacity_bytes
            .filter(|_| !self.options.capacity_hidden)
        {
            Some(capacity_bytes) => Ok((
                capacity_bytes,
                capacity_bytes.saturating_sub(self.used_bytes()?),
            )),
            None => Ok((ROOMY_DISK_BYTES, ROOMY_DISK_BYTES / 2)),
        }
    }

    /// The entries of the directory `node`: node, name, and whether each is a directory.
    pub fn list(&mut self, node: NodeId) -> io::Result<Vec<(NodeId, OsString, bool)>> {
        self.check_power()?;
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(self.path(node)?)? {
            let entry = entry?;
            let name = entry.file_name();
            if Self::hidden(node, &name) {
                continue;
            }
            let directory = entry.file_type()?.is_dir();
            entries.push((self.child(node, &name), name, directory));
        }
        entries.sort_by(|left, right| left.1.cmp(&right.1));
        Ok(entries)
    }

    /// fsync or fdatasync of the file `node`, or fsync of the directory `node`: what waited for
    /// it is durable.
    pub fn sync(&mut self, node: NodeId, directory: bool) -> io::Result<()> {
        self.check_power()?;
        if directory {
            self.stats.directory_syncs += 1;
        } else {
            self.stats.file_syncs += 1;
        }
        let mut durable = Vec::new();
        let mut index = 0;
        while index < self.journal.len() {
            let entry = &mut self.journal[index];
            entry.waiting.retain(|waiting| *waiting != node);
            if entry.waiting.is_empty() {
                durable.push(self.journal.remove(index));
            } else {
                index += 1;
            }
        }
        for entry in durable {
            self.settle(entry.change)?;
        }
        Ok(())
    }

    fn record(&mut self, change: Change, waiting: Vec<NodeId>) {
        self.journal.push(Entry { change, waiting });
    }

    /// A change became durable: delete what it moved aside.
    fn settle(&mut self, change: Change) -> io::Result<()> {
        let buried = match change {
            Change::Remove { node, .. } => Some(node),
            Change::Rename { replaced, .. } => replaced,
            _ => None,
        };
        if let Some(node) = buried {
            let path = self.path(node)?;
            if std::fs::symlink_metadata(&path)?.is_dir() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
            self.nodes.remove(&node);
            self.forget_file_if_gone(node);
        }
        Ok(())
    }

    /// Cuts the power: decides what of each unsynced change reached the disk, undoes the rest
    /// newest first, and refuses every later request. The directory then holds what a disk
    /// would after the cut (and no graveyard).
    pub fn cut(&mut self, how: Cut) -> io::Result<CutSummary> {
        if self.cut_done {
            return Err(errno(libc::EIO));
        }
        let decisions = self.decide(how);
        let mut summary = CutSummary::default();
        // Per file, the smallest size a kept size change left after the entry being undone: a
        // lost write's old bytes beyond it were cut off by a change that stays.
        let mut size_floor: HashMap<NodeId, u64> = HashMap::new();
        let journal = std::mem::take(&mut self.journal);
        for (entry, decision) in journal.into_iter().zip(decisions).rev() {
            match (entry.change, decision) {
                (
                    Change::Write {
                        node,
                        file,
                        offset,
                        length,
                        before,
                        size_before,
                    },
                    Decision::Sectors(kept),
                ) => {
                    match (kept.iter().all(|kept| *kept), kept.iter().any(|kept| *kept)) {
                        (true, _) => summary.writes_kept += 1,
                        (false, false) => summary.writes_lost += 1,
                        (false, true) => summary.writes_torn += 1,
                    }
                    let floor = size_floor.get(&node).copied().unwrap_or(u64::MAX);
                    restore_sectors(&file, offset, length, &before, size_before, &kept, floor)?;
                }
                (
                    Change::Resize {
                        node,
                        file,
                        size_before,
                        size_after,
                        tail_before,
                    },
                    Decision::Keep(kept),
                ) => {
                    if kept {
                        summary.resizes_kept += 1;
                        let floor = size_floor.entry(node).or_insert(u64::MAX);
                        *floor = (*floor).min(size_after);
                    } else {
                        summary.resizes_lost += 1;
                        file.set_len(size_before)?;
                        file.write_all_at(&tail_before, size_after)?;
                    }
                }
                (change, Decision::Keep(true)) => {
                    summary.names_kept += 1;
                    self.settle(change)?;
                }
                (change, Decision::Keep(false)) => {
                    summary.names_lost += 1;
                    self.undo_name(change)?;
                }
                (_, Decision::Sectors(_)) => unreachable!("only writes are decided by sector"),
            }
        }
        std::fs::remove_dir_all(self.path(GRAVEYARD)?)?;
        self.cut_done = true;
        self.files.clear();
        Ok(summary)
    }

    /// Undoes a name change that did not reach the disk.
    fn undo_name(&mut self, change: Change) -> io::Result<()> {
        match change {
            Change::Create {
                node, directory, ..
            } => {
                let path = self.path(node)?;
                if directory {
                    std::fs::remove_dir_all(&path)?;
                } else {
                    std::fs::remove_file(&path)?;
                }
                self.place(node, GRAVEYARD, OsStr::new(""));
                self.nodes.remove(&node);
            }
            Change::Remove { parent, name, node } => self.unbury(node, parent, &name)?,
            Change::Rename {
                from,
                to,
                node,
                replaced,
            } => {
                let source = self.path(node)?;
                let destination = self.path(from.0)?.join(&from.1);
                std::fs::rename(source, destination)?;
                self.place(node, from.0, &from.1);
                if let Some(replaced) = replaced {
                    self.unbury(replaced, to.0, &to.1)?;
                }
            }
            Change::Write { .. } | Change::Resize { .. } => unreachable!("not a name change"),
        }
        Ok(())
    }

    /// Brings `node` back from the graveyard as `name` in `parent`; when that directory is gone
    /// for good (its removal was kept), the node goes with it.
    fn unbury(&mut self, node: NodeId, parent: NodeId, name: &OsStr) -> io::Result<()> {
        let grave = self.path(node)?;
        match self.path(parent) {
            Ok(directory) if directory.is_dir() => {
                std::fs::rename(grave, directory.join(name))?;
                self.place(node, parent, name);
            }
            _ => {
                if std::fs::symlink_metadata(&grave)?.is_dir() {
                    std::fs::remove_dir_all(&grave)?;
                } else {
                    std::fs::remove_file(&grave)?;
                }
            }
        }
        Ok(())
    }

    /// What of each journal entry a cut keeps.
    fn decide(&self, how: Cut) -> Vec<Decision> {
        let mut random = match how {
            Cut::Random(seed) => Some(fastrand::Rng::with_seed(seed)),
            _ => None,
        };
        // Name changes: a prefix of each directory's list. Size changes: a prefix of each
        // file's. Both as positions in per-node lists of journal indexes.
        let mut names: HashMap<NodeId, Vec<usize>> = HashMap::new();
        let mut sizes: HashMap<NodeId, Vec<usize>> = HashMap::new();
        let mut write_number = 0;
        let mut torn: Option<(usize, NodeId)> = None;
        for (index, entry) in self.journal.iter().enumerate() {
            match &entry.change {
                Change::Resize { node, .. } => sizes.entry(*node).or_default().push(index),
                Change::Write { node, .. } => {
                    if matches!(how, Cut::Tear { write, .. } if write == write_number) {
                        torn = Some((index, *node));
                    }
                    write_number += 1;
                }
                _ => {
                    for directory in &entry.waiting {
                        names.entry(*directory).or_default().push(index);
                    }
                }
            }
        }
        let mut prefix = |list: &Vec<usize>, node: NodeId| -> usize {
            match (&mut random, torn) {
                (Some(random), _) => random.usize(0..=list.len()),
                (None, Some((index, torn_node))) if torn_node == node => {
                    list.iter().take_while(|entry| **entry < index).count()
                }
                _ => 0,
            }
        };
        let mut name_cuts: HashMap<NodeId, usize> = HashMap::new();
        let mut directories: Vec<&NodeId> = names.keys().collect();
        directories.sort();
        for directory in directories {
            name_cuts.insert(*directory, prefix(&names[directory], u64::MAX));
        }
        let mut size_cuts: HashMap<NodeId, usize> = HashMap::new();
        let mut files: Vec<&NodeId> = sizes.keys().collect();
        files.sort();
        for file in files {
            size_cuts.insert(*file, prefix(&sizes[file], *file));
        }
        // A rename between two directories is kept only if both keep it; one that loses it
        // shortens the other's prefix to before it, until nothing changes.
        let position = |list: &Vec<usize>, index: usize| list.iter().position(|i| *i == index);
        loop {
            let mut changed = false;
            for (index, entry) in self.journal.iter().enumerate() {
                if entry.waiting.len() < 2 {
                    continue;
                }
                let kept = entry.waiting.iter().all(|directory| {
                    position(&names[directory], index).is_some_and(|at| at < name_cuts[directory])
                });
                if !kept {
                    for directory in &entry.waiting {
                        let at = position(&names[directory], index).expect("listed");
                        let cut = name_cuts.get_mut(directory).expect("listed");
                        if *cut > at {
                            *cut = at;
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut decisions = Vec::with_capacity(self.journal.len());
        for (index, entry) in self.journal.iter().enumerate() {
            decisions.push(match &entry.change {
                Change::Write { offset, length, .. } => {
                    let sectors = sector_count(*offset, *length);
                    Decision::Sectors(match (&mut random, torn) {
                        (Some(random), _) => random_sectors(random, *offset, sectors),
                        (None, Some((torn_index, _))) if torn_index == index => {
                            let Cut::Tear { sectors: kept, .. } = how else {
                                unreachable!()
                            };
                            (0..sectors).map(|sector| sector < kept).collect()
                        }
                        _ => vec![false; sectors as usize],
                    })
                }
                Change::Resize { node, .. } => {
                    let list = &sizes[node];
                    Decision::Keep(position(list, index).expect("listed") < size_cuts[node])
                }
                _ => Decision::Keep(entry.waiting.iter().all(|directory| {
                    position(&names[directory], index).expect("listed") < name_cuts[directory]
                })),
            });
        }
        decisions
    }
}

/// What a cut keeps of one journal entry.
enum Decision {
    /// A write: for each sector it touches, whether the new bytes reached the disk.
    Sectors(Vec<bool>),
    /// A size or name change: kept whole or lost.
    Keep(bool),
}

/// How many sectors the bytes `offset..offset + length` touch.
fn sector_count(offset: u64, length: u64) -> u64 {
    if length == 0 {
        return 0;
    }
    (offset + length).div_ceil(SECTOR_BYTES) - offset / SECTOR_BYTES
}

/// A random outcome for a write of `sectors` sectors from `offset`: kept whole, lost whole, or
/// torn by sector or by page.
fn random_sectors(random: &mut fastrand::Rng, offset: u64, sectors: u64) -> Vec<bool> {
    match random.u8(0..4) {
        0 => vec![true; sectors as usize],
        1 => vec![false; sectors as usize],
        2 => (0..sectors).map(|_| random.bool()).collect(),
        _ => {
            let first_sector = offset / SECTOR_BYTES;
            let mut page_kept = HashMap::new();
            (0..sectors)
                .map(|sector| {
                    let page = (first_sector + sector) * SECTOR_BYTES / PAGE_BYTES;
                    *page_kept.entry(page).or_insert_with(|| random.bool())
                })
                .collect()
        }
    }
}

/// Puts back the old bytes of every lost sector of a write, up to `floor` (beyond it a kept
/// truncation removed them anyway). Old bytes past the file's size then read as zeros.
fn restore_sectors(
    file: &File,
    offset: u64,
    length: u64,
    before: &[u8],
    size_before: u64,
    kept: &[bool],
    floor: u64,
) -> io::Result<()> {
    let first_sector = offset / SECTOR_BYTES;
    let end = (offset + length).min(floor);
    let mut sector = 0;
    while sector < kept.len() {
        if kept[sector] {
            sector += 1;
            continue;
        }
        let run_start = sector;
        while sector < kept.len() && !kept[sector] {
            sector += 1;
        }
        let from = ((first_sector + run_start as u64) * SECTOR_BYTES).max(offset);
        let until = ((first_sector + sector as u64) * SECTOR_BYTES).min(end);
        if from >= until {
            continue;
        }
        let old: Vec<u8> = (from..until)
            .map(|position| {
                if position < size_before {
                    before[(position - offset) as usize]
                } else {
                    0
                }
            })
            .collect();
        file.write_all_at(&old, from)?;
    }
    Ok(())
}

/// The bytes of `file` from `from` to `until` (none when `until <= from`).
fn read_range(file: &File, from: u64, until: u64) -> io::Result<Vec<u8>> {
    if until <= from {
        return Ok(Vec::new());
    }
    let mut bytes = vec![0; (until - from) as usize];
    file.read_exact_at(&mut bytes, from)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path = std::env::temp_dir().join(format!(
                "faultfs-{name}-{}-{}",
                std::process::id(),
                fastrand::u64(..)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn content(root: &Path, name: &str) -> Option<Vec<u8>> {
        std::fs::read(root.join(name)).ok()
    }

    fn new_file(state: &mut State, parent: NodeId, name: &str) -> NodeId {
        let (node, _, handle) = state
            .create(parent, OsStr::new(name), 0o644, libc::O_RDWR)
            .unwrap();
        state.release(handle);
        node
    }

    /// Synced data and names survive a cut that drops everything; the rest is gone, and what a
    /// write overwrote is back.
    #[test]
    fn a_dropping_cut_keeps_exactly_what_was_synced() {
        let scratch = Scratch::new("drop");
        let mut state = State::new(&scratch.0, Options::default()).unwrap();
        let synced = new_file(&mut state, ROOT, "synced");
        state.write(synced, 0, b"durable", 0).unwrap();
        state.sync(synced, false).unwrap();
        state.sync(ROOT, true).unwrap();
        state.write(synced, 0, b"DUR", 0).unwrap();
        state.write(synced, 7, b"+tail", 0).unwrap();
        let unsynced_name = new_file(&mut state, ROOT, "file-synced-name-not");
        state.write(unsynced_name, 0, b"data", 0).unwrap();
        state.sync(unsynced_name, false).unwrap();
        // Reads see what was not synced.
        assert_eq!(state.read(synced, 0, 100, 0).unwrap(), b"DURable+tail");
        assert_eq!(state.pending(), (2, 1, 1));
        let summary = state.cut(Cut::Drop).unwrap();
        assert_eq!(
            (
                summary.writes_lost,
                summary.resizes_lost,
                summary.names_lost
            ),
            (2, 1, 1)
        );
        assert_eq!(content(&scratch.0, "synced").unwrap(), b"durable");
        assert_eq!(content(&scratch.0, "file-synced-name-not"), None);
        assert!(!scratch.0.join(GRAVEYARD_NAME).exists());
        assert_eq!(
            state
                .lookup(ROOT, OsStr::new("synced"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EIO)
        );
    }

    /// Unlinks, renames over a file and removed directories come back whole when their
    /// directory was not synced, and are gone when it was.
    #[test]
    fn removals_and_renames_are_undone_until_their_directory_is_synced() {
        for sync_directory in [false, true] {
            let scratch = Scratch::new("names");
            let mut state = State::new(&scratch.0, Options::default()).unwrap();
            let old = new_file(&mut state, ROOT, "old");
            state.write(old, 0, b"old content", 0).unwrap();
            let doomed = new_file(&mut state, ROOT, "doomed");
            state.write(doomed, 0, b"doomed content", 0).unwrap();
            let (directory, _) = state.mkdir(ROOT, OsStr::new("empty"), 0o755).unwrap();
            state.sync(old, false).unwrap();
            state.sync(doomed, false).unwrap();
            state.sync(ROOT, true).unwrap();
            let new = new_file(&mut state, ROOT, "new.tmp");
            state.write(new, 0, b"new content", 0).unwrap();
            state.sync(new, false).unwrap();
            state
                .rename(ROOT, OsStr::new("new.tmp"), ROOT, OsStr::new("old"), false)
                .unwrap();
            state.remove(ROOT, OsStr::new("doomed"), false).unwrap();
            state.remove(ROOT, OsStr::new("empty"), true).unwrap();
            assert!(state.lookup(ROOT, OsStr::new("doomed")).is_err());
            assert!(state.lookup(ROOT, OsStr::new(GRAVEYARD_NAME)).is_err());
            let listed: Vec<OsString> =
                state.list(ROOT).unwrap().into_iter().map(|e| e.1).collect();
            assert_eq!(listed, vec![OsString::from("old")]);
            if sync_directory {
                state.sync(ROOT, true).unwrap();
            }
            let _ = directory;
            state.cut(Cut::Drop).unwrap();
            let mut names: Vec<String> = std::fs::read_dir(&scratch.0)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            if sync_directory {
                assert_eq!(names, vec!["old"]);
                assert_eq!(content(&scratch.0, "old").unwrap(), b"new content");
            } else {
                assert_eq!(names, vec!["doomed", "empty", "old"]);
                assert_eq!(content(&scratch.0, "old").unwrap(), b"old content");
                assert_eq!(content(&scratch.0, "doomed").unwrap(), b"doomed content");
            }
        }
    }

    /// A torn write keeps the sectors asked for and nothing after them.
    #[test]
    fn a_tear_keeps_a_prefix_of_the_chosen_write() {
        let scratch = Scratch::new("tear");
        let mut state = State::new(&scratch.0, Options::default()).unwrap();
        let file = new_file(&mut state, ROOT, "log");
        state.set_size(file, 8 * SECTOR_BYTES).unwrap();
        state.sync(file, false).unwrap();
        state.sync(ROOT, true).unwrap();
        state
            .write(file, 0, &[1; 4 * SECTOR_BYTES as usize], 0)
            .unwrap();
        state
            .write(file, 4 * SECTOR_BYTES, &[2; 4 * SECTOR_BYTES as usize], 0)
            .unwrap();
        let pending = state.pending_changes();
        assert_eq!(pending, vec!["write 0 log 0 2048", "write 1 log 2048 2048"]);
        state
            .cut(Cut::Tear {
                write: 1,
                sectors: 3,
            })
            .unwrap();
        let bytes = content(&scratch.0, "log").unwrap();
        assert_eq!(bytes.len(), 8 * SECTOR_BYTES as usize);
        assert!(bytes[..4 * SECTOR_BYTES as usize]
            .iter()
            .all(|byte| *byte == 0));
        assert!(bytes[4 * 512..7 * 512].iter().all(|byte| *byte == 2));
        assert!(bytes[7 * 512..].iter().all(|byte| *byte == 0));
    }

    /// A shrink that is lost brings its tail back; a write into the region a kept shrink cut
    /// off stays cut off.
    #[test]
    fn lost_truncations_bring_their_tail_back() {
        let scratch = Scratch::new("truncate");
        let mut state = State::new(&scratch.0, Options::default()).unwrap();
        let file = new_file(&mut state, ROOT, "file");
        state.write(file, 0, b"0123456789", 0).unwrap();
        state.sync(file, false).unwrap();
        state.sync(ROOT, true).unwrap();
        state.set_size(file, 4).unwrap();
        assert_eq!(state.read(file, 0, 100, 0).unwrap(), b"0123");
        state.cut(Cut::Drop).unwrap();
        assert_eq!(content(&scratch.0, "file").unwrap(), b"0123456789");
    }

    /// Under random cuts every sector of an unsynced write holds either its old or its new
    /// bytes (never a mix within the sector, never anything else), synced data is untouched,
    /// and the same seed cuts the same way.
    #[test]
    fn random_cuts_keep_whole_sectors_old_or_new() {
        let run = |seed: u64| -> (Vec<u8>, Vec<u8>) {
            let scratch = Scratch::new("random");
            let mut state = State::new(&scratch.0, Options::default()).unwrap();
            let file = new_file(&mut state, ROOT, "file");
            let size = 64 * SECTOR_BYTES;
            state.write(file, 0, &vec![0xAA; size as usize], 0).unwrap();
            state.sync(file, false).unwrap();
            state.sync(ROOT, true).unwrap();
            let mut writes = fastrand::Rng::with_seed(seed ^ 0x5eed);
            for round in 0..20u8 {
                let offset = writes.u64(0..size - 1);
                let length = writes.u64(1..=(size - offset).min(3000));
                state
                    .write(file, offset, &vec![round; length as usize], 0)
                    .unwrap();
            }
            let other = new_file(&mut state, ROOT, "other");
            state.write(other, 0, b"x", 0).unwrap();
            state.cut(Cut::Random(seed)).unwrap();
            let bytes = content(&scratch.0, "file").unwrap();
            (bytes, content(&scratch.0, "other").unwrap_or_default())
        };
        for seed in 0..200 {
            let (bytes, other) = run(seed);
            assert!(bytes.len() >= 64 * SECTOR_BYTES as usize, "seed {seed}");
            for sector in bytes.chunks(SECTOR_BYTES as usize) {
                // Each sector's bytes come from the synced content or from writes, never
                // from beyond them: values 0xAA or a round number.
                assert!(
                    sector.iter().all(|byte| *byte == 0xAA || *byte < 20),
                    "seed {seed}"
                );
            }
            // Its size may have reached the disk without its byte: then it reads as a zero.
            assert!(
                matches!(&other[..], b"" | b"x" | b"\0"),
                "seed {seed}: {other:?}"
            );
            assert_eq!(run(seed), (bytes, other), "seed {seed} reproduces");
        }
    }

    /// A rename between two directories survives only if both directories keep it, and
    /// directories created by a lost mkdir vanish with what is in them.
    #[test]
    fn names_between_directories_follow_both() {
        for seed in 0..100 {
            let scratch = Scratch::new("between");
            let mut state = State::new(&scratch.0, Options::default()).unwrap();
            let (left, _) = state.mkdir(ROOT, OsStr::new("left"), 0o755).unwrap();
            let (right, _) = state.mkdir(ROOT, OsStr::new("right"), 0o755).unwrap();
            state.sync(ROOT, true).unwrap();
            let file = new_file(&mut state, left, "file");
            state.write(file, 0, b"content", 0).unwrap();
            state.sync(file, false).unwrap();
            state.sync(left, true).unwrap();
            state
                .rename(left, OsStr::new("file"), right, OsStr::new("moved"), false)
                .unwrap();
            let (inner, _) = state.mkdir(right, OsStr::new("inner"), 0o755).unwrap();
            new_file(&mut state, inner, "deep");
            state.sync(inner, true).unwrap();
            state.cut(Cut::Random(seed)).unwrap();
            let in_left = scratch.0.join("left/file").exists();
            let in_right = scratch.0.join("right/moved").exists();
            assert!(in_left != in_right, "seed {seed}: exactly one name");
            if !scratch.0.join("right/inner").exists() {
                assert!(!scratch.0.join("right/inner/deep").exists());
            }
        }
    }

    /// After a power-off every request fails and nothing more becomes durable; the cut then
    /// decides about what came before.
    #[test]
    fn after_a_power_off_nothing_more_is_durable() {
        let scratch = Scratch::new("power-off");
        let mut state = State::new(&scratch.0, Options::default()).unwrap();
        let file = new_file(&mut state, ROOT, "file");
        state.write(file, 0, b"synced", 0).unwrap();
        state.sync(file, false).unwrap();
        state.sync(ROOT, true).unwrap();
        state.write(file, 0, b"SYNCED", 0).unwrap();
        state.power_off();
        let eio = Some(libc::EIO);
        assert_eq!(state.sync(file, false).unwrap_err().raw_os_error(), eio);
        assert_eq!(
            state.write(file, 0, b"x", 0).unwrap_err().raw_os_error(),
            eio
        );
        assert_eq!(state.read(file, 0, 10, 0).unwrap_err().raw_os_error(), eio);
        state.cut(Cut::Drop).unwrap();
        assert_eq!(content(&scratch.0, "file").unwrap(), b"synced");
    }

    /// The refusals: fallocate and O_DIRECT.
    #[test]
    fn declines_fallocate_and_direct_io_when_told() {
        let scratch = Scratch::new("decline");
        let options = Options {
            decline_fallocate: true,
            decline_direct: true,
            capacity_bytes: None,
            capacity_hidden: false,
        };
        let mut state = State::new(&scratch.0, options).unwrap();
        let file = new_file(&mut state, ROOT, "file");
        assert_eq!(
            state
                .fallocate(file, 0, 4096, 0)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EOPNOTSUPP)
        );
        assert_eq!(
            state
                .open(file, libc::O_RDWR | libc::O_DIRECT)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL)
        );
        assert_eq!(
            state
                .write(file, 0, b"x", libc::O_DIRECT)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL)
        );
        state.write(file, 0, b"x", 0).unwrap();
        let stats = state.stats();
        assert_eq!((stats.fallocates_declined, stats.direct_declined), (1, 2));
        assert_eq!((stats.writes_direct, stats.writes_buffered), (0, 1));
    }
}
