//! The FUSE side: each kernel request becomes one call on the shared [`State`], its
//! `io::Error` the errno the caller sees. Nothing here decides anything about durability.
//!
//! The kernel's writeback cache is not asked for (fuser's defaults), so a program's write
//! reaches this file system before its write(2) returns: the kernel holds nothing the power cut
//! would have to know about. An O_DIRECT write (O_DIRECT given at open, or set later by fcntl,
//! which the kernel allows on any FUSE file since FUSE's page cache has a direct-I/O path) comes
//! as a write request with O_DIRECT in the file's flags.

use std::ffi::OsStr;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::state::{NodeId, State};

/// How long the kernel may keep names and attributes without asking again. Every change goes
/// through this file system, so the kernel's copies stay true; a cut ends the mount.
const TTL: Duration = Duration::from_secs(1);

/// The mounted file system: the state, shared with the control socket.
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    /// How long an fsync takes before it makes anything durable, as a device's flush does.
    sync_delay: Duration,
}

impl FaultFs {
    /// The file system over `state`, whose syncs take `sync_delay`.
    pub fn new(state: Arc<Mutex<State>>, sync_delay: Duration) -> FaultFs {
        FaultFs { state, sync_delay }
    }

    /// An fsync of a file or directory: durable after the delay, unless the power went
    /// meanwhile (then it fails, as a sync in flight at a power cut never completes).
    fn sync(&self, node: INodeNo, directory: bool, reply: ReplyEmpty) {
        // Outside the lock: other requests (other files, the control socket) go on meanwhile.
        std::thread::sleep(self.sync_delay);
        reply_empty(reply, self.state().sync(node.0, directory));
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock ends the process (the control thread then fails too),
        // so a poisoned lock still holds a consistent state to report from.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The attributes the kernel wants, from the file's metadata in the directory passed through to.
fn attributes(node: NodeId, metadata: &Metadata) -> FileAttr {
    let time = |seconds: i64, nanoseconds: i64| {
        if seconds >= 0 {
            UNIX_EPOCH + Duration::new(seconds as u64, nanoseconds as u32)
        } else {
            UNIX_EPOCH
        }
    };
    FileAttr {
        ino: INodeNo(node),
        size: metadata.size(),
        blocks: metadata.blocks(),
        atime: time(metadata.atime(), metadata.atime_nsec()),
        mtime: time(metadata.mtime(), metadata.mtime_nsec()),
        ctime: time(metadata.ctime(), metadata.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: if metadata.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: (metadata.mode() & 0o7777) as u16,
        nlink: metadata.nlink() as u32,
        uid: metadata.uid(),
        gid: metadata.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Only regular files and directories exist here: a symbolic link or device in the directory
/// passed through to reads as a regular file (azq makes neither).
fn entry_kind(directory: bool) -> FileType {
    if directory {
        FileType::Directory
    } else {
        FileType::RegularFile
    }
}

fn reply_entry(reply: ReplyEntry, result: io::Result<(NodeId, Metadata)>) {
    match result {
        Ok((node, metadata)) => reply.entry(&TTL, &attributes(node, &metadata), Generation(0)),
        Err(error) => reply.error(Errno::from(error)),
    }
}

fn reply_attributes(reply: ReplyAttr, node: INodeNo, result: io::Result<Metadata>) {
    match result {
        Ok(metadata) => reply.attr(&TTL, &attributes(node.0, &metadata)),
        Err(error) => reply.error(Errno::from(error)),
    }
}

fn reply_empty(reply: ReplyEmpty, result: io::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(error) => reply.error(Errno::from(error)),
    }
}

/// No FOPEN_KEEP_CACHE: the kernel drops its cached pages of a file at each open.
fn reply_opened(reply: ReplyOpen, result: io::Result<u64>) {
    match result {
        Ok(handle) => reply.opened(FileHandle(handle), FopenFlags::empty()),
        Err(error) => reply.error(Errno::from(error)),
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply_entry(reply, self.state().lookup(parent.0, name));
    }

    fn getattr(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        reply_attributes(reply, node, self.state().attributes(node.0));
    }

    fn setattr(
        &self,
        _request: &Request,
        node: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _handle: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Owners and times pass unchanged (azq sets neither); sizes are journaled.
        let mut state = self.state();
        let result = (|| {
            if let Some(mode) = mode {
                state.set_mode(node.0, mode)?;
            }
            if let Some(size) = size {
                state.set_size(node.0, size)?;
            }
            state.attributes(node.0)
        })();
        reply_attributes(reply, node, result);
    }

    fn mkdir(
        &self,
        _request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        reply_entry(reply, self.state().mkdir(parent.0, name, mode & !umask));
    }

    fn unlink(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.state().remove(parent.0, name, false));
    }

    fn rmdir(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.state().remove(parent.0, name, true));
    }

    fn rename(
        &self,
        _request: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not modelled.
            reply.error(Errno::EINVAL);
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let renamed = self
            .state()
            .rename(parent.0, name, new_parent.0, new_name, no_replace);
        reply_empty(reply, renamed);
    }

    fn open(&self, _request: &Request, node: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply_opened(reply, self.state().open(node.0, flags.0));
    }

    fn read(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.state().read(node.0, offset, size, flags.0) {
            Ok(bytes) => reply.data(&bytes),
            Err(error) => reply.error(Errno::from(error)),
        }
    }

    fn write(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.state().write(node.0, offset, data, flags.0) {
            Ok(()) => reply.written(data.len() as u32),
            Err(error) => reply.error(Errno::from(error)),
        }
    }

    fn flush(
        &self,
        _request: &Request,
        _node: INodeNo,
        _handle: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): makes nothing durable.
        reply.ok();
    }

    fn release(
        &self,
        _request: &Request,
        _node: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state().release(handle.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(node, false, reply);
    }

    fn opendir(&self, _request: &Request, node: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply_opened(reply, self.state().open_directory(node.0));
    }

    fn readdir(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.state().list(node.0) {
            Ok(entries) => entries,
            Err(error) => {
                reply.error(Errno::from(error));
                return;
            }
        };
        // Offsets: 1 is after ".", 2 after "..", 3 + i after entry i.
        let dots = [(node.0, ".".into(), true), (node.0, "..".into(), true)];
        for (index, (child, name, directory)) in dots
            .into_iter()
            .chain(entries)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(
                INodeNo(child),
                index as u64 + 1,
                entry_kind(directory),
                &name,
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _request: &Request,
        _node: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.state().release(handle.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(node, true, reply);
    }

    fn statfs(&self, _request: &Request, _node: INodeNo, reply: ReplyStatfs) {
        // In 4 KiB blocks; azq reads the free ones (`--min-free-disk`), `df` all of them.
        const BLOCK_BYTES: u64 = 4096;
        match self.state().space() {
            Ok((size_bytes, free_bytes)) => reply.statfs(
                size_bytes / BLOCK_BYTES,
                free_bytes / BLOCK_BYTES,
                free_bytes / BLOCK_BYTES,
                1 << 20,
                1 << 19,
                BLOCK_BYTES as u32,
                255,
                BLOCK_BYTES as u32,
            ),
            Err(error) => reply.error(Errno::from(error)),
        }
    }

    fn create(
        &self,
        _request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.state().create(parent.0, name, mode & !umask, flags) {
            Ok((node, metadata, handle)) => reply.created(
                &TTL,
                &attributes(node, &metadata),
                Generation(0),
                FileHandle(handle),
                FopenFlags::empty(),
            ),
            Err(error) => reply.error(Errno::from(error)),
        }
    }

    fn fallocate(
        &self,
        _request: &Request,
        node: INodeNo,
        _handle: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.state().fallocate(node.0, offset, length, mode));
    }
}
