//! The file system mounted for real (FUSE through the kernel): what reaches it, what it
//! refuses, and what a power cut leaves. Needs /dev/fuse and fusermount3 (scripts/test.sh
//! installs fuse3 where it can); without them each test says SKIPPED and passes.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A mounted faultfs over a fresh directory, unmounted (and its directories removed) when
/// dropped.
struct Mounted {
    process: Option<Child>,
    base: PathBuf,
}

impl Mounted {
    /// Mounts with `flags`; `None` (after printing why) where FUSE is unavailable.
    fn new(name: &str, flags: &[&str]) -> Option<Mounted> {
        let fusermount = std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|directory| directory.join("fusermount3").exists())
        });
        if !fusermount || !Path::new("/dev/fuse").exists() {
            eprintln!("SKIPPED {name}: needs /dev/fuse and fusermount3 (apt-get install fuse3)");
            return None;
        }
        let base = std::env::temp_dir().join(format!("faultfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("store")).unwrap();
        std::fs::create_dir_all(base.join("mount")).unwrap();
        let mut process = Command::new(env!("CARGO_BIN_EXE_faultfs"))
            .arg("mount")
            .args(flags)
            .arg(base.join("store"))
            .arg(base.join("mount"))
            .arg(base.join("control"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(process.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains("mounted at"),
            "faultfs did not mount: {line:?}"
        );
        Some(Mounted {
            process: Some(process),
            base,
        })
    }

    fn mount(&self) -> PathBuf {
        self.base.join("mount")
    }

    fn store(&self) -> PathBuf {
        self.base.join("store")
    }

    /// Sends a control command; the answer.
    fn control(&self, command: &str) -> String {
        let output = Command::new(env!("CARGO_BIN_EXE_faultfs"))
            .arg("control")
            .arg(self.base.join("control"))
            .args(command.split(' '))
            .output()
            .unwrap();
        let answer = String::from_utf8(output.stdout).unwrap();
        assert!(output.status.success(), "{command}: {answer}");
        answer
    }

    /// A counter of `status`.
    fn stat(&self, name: &str) -> u64 {
        let status = self.control("status");
        let at = status
            .find(&format!("\"{name}\":"))
            .expect("a known counter")
            + name.len()
            + 3;
        let digits: String = status[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    }

    /// Cuts the power (`how`: `drop`, `random SEED`, `tear WRITE SECTORS`) and waits for the
    /// unmount.
    fn cut(&mut self, how: &str) -> String {
        let answer = self.control(&format!("cut {how}"));
        let status = self.process.take().unwrap().wait().unwrap();
        assert!(status.success());
        answer
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(self.mount())
                .status();
            let _ = process.kill();
            let _ = process.wait();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn sync_directory(path: &Path) {
    std::fs::File::open(path).unwrap().sync_all().unwrap();
}

/// One 4 KiB block of `byte` in memory aligned for O_DIRECT.
fn aligned_block(byte: u8) -> (Vec<u8>, usize) {
    let buffer = vec![byte; 8192];
    let start = buffer.as_ptr().align_offset(4096);
    (buffer, start)
}

/// pwrite(2) of one aligned block: the OS error, if any.
fn write_block(file: &std::fs::File, byte: u8, offset: i64) -> Option<i32> {
    let (buffer, start) = aligned_block(byte);
    // SAFETY: the pointer and length stay inside `buffer`, alive for the call.
    let written = unsafe {
        libc::pwrite(
            file.as_raw_fd(),
            buffer[start..].as_ptr().cast(),
            4096,
            offset,
        )
    };
    (written != 4096).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
}

/// Sets O_DIRECT on an open file the way glommio does: fcntl(F_SETFL) after the open.
fn set_direct(file: &std::fs::File) -> i32 {
    // SAFETY: fcntl reads the descriptor and integers.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_DIRECT)
    }
}

/// The kernel accepts fcntl(O_DIRECT) on a FUSE file without asking the server; the writes
/// then reach the server with O_DIRECT in their flags, which is where it counts them and, when
/// told to, refuses them.
#[test]
fn direct_io_set_by_fcntl_reaches_the_server_and_can_be_refused() {
    let Some(plain) = Mounted::new("direct", &[]) else {
        return;
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(plain.mount().join("file"))
        .unwrap();
    assert_eq!(write_block(&file, b'b', 0), None);
    assert_eq!(set_direct(&file), 0);
    assert_eq!(write_block(&file, b'd', 4096), None);
    assert_eq!(plain.stat("writes_direct"), 1);
    assert!(plain.stat("writes_buffered") >= 1);
    drop(file);
    drop(plain);

    let Some(declining) = Mounted::new("direct-declined", &["--decline-direct"]) else {
        return;
    };
    let path = declining.mount().join("file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    assert_eq!(set_direct(&file), 0, "the kernel does not ask the server");
    assert_eq!(write_block(&file, b'd', 0), Some(libc::EINVAL));
    let opened = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path);
    assert_eq!(opened.unwrap_err().raw_os_error(), Some(libc::EINVAL));
    assert_eq!(declining.stat("direct_declined"), 2);
    assert_eq!(declining.stat("writes_direct"), 0);
}

/// fallocate is served, or refused with EOPNOTSUPP when told to.
#[test]
fn fallocate_is_served_or_declined() {
    for (flags, expected) in [
        (&[][..], 0),
        (&["--decline-fallocate"][..], libc::EOPNOTSUPP),
    ] {
        let Some(mounted) = Mounted::new("fallocate", flags) else {
            return;
        };
        let file = std::fs::File::create(mounted.mount().join("file")).unwrap();
        // SAFETY: fallocate reads the descriptor and integers.
        let result = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, 1 << 20) };
        let error = std::io::Error::last_os_error().raw_os_error().unwrap();
        assert_eq!(if result == 0 { 0 } else { error }, expected);
        let size = file.metadata().unwrap().len();
        assert_eq!(size, if expected == 0 { 1 << 20 } else { 0 });
    }
}

/// Free bytes of the file system holding `path`, as statvfs reports them to an unprivileged
/// program.
fn free_bytes(path: &Path) -> u64 {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs reads the NUL-terminated name and fills the zeroed struct it is given.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(name.as_ptr(), &mut stats) }, 0);
    stats.f_bavail * stats.f_frsize
}

/// With `--capacity`, statfs reports the room the files leave, and a write or `fallocate` past
/// it fails with ENOSPC and changes nothing; room comes back when a file goes.
#[test]
fn a_small_file_system_fills_and_refuses_with_enospc() {
    let capacity: u64 = 8 << 20;
    let Some(mounted) = Mounted::new("capacity", &["--capacity", &capacity.to_string()]) else {
        return;
    };
    assert_eq!(free_bytes(&mounted.mount()), capacity);
    let first = mounted.mount().join("first");
    std::fs::write(&first, vec![7u8; 5 << 20]).unwrap();
    assert_eq!(free_bytes(&mounted.mount()), capacity - (5 << 20));
    // Past the capacity: refused (after the writes that fitted, as on a disk).
    let second = mounted.mount().join("second");
    let error = std::fs::write(&second, vec![8u8; 4 << 20]).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    let file = OpenOptions::new().write(true).open(&first).unwrap();
    // SAFETY: fallocate reads the descriptor and integers.
    let result = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, 9 << 20) };
    assert_eq!(result, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOSPC)
    );
    assert_eq!(std::fs::read(&first).unwrap(), vec![7u8; 5 << 20]);
    assert!(mounted.stat("no_space") >= 2);
    assert!(free_bytes(&mounted.mount()) < 1 << 20);
    // Writing over blocks the file already has needs no room.
    file.write_all_at(&[9u8; 4096], 0).unwrap();
    drop(file);
    std::fs::remove_file(&first).unwrap();
    std::fs::remove_file(&second).unwrap();
    assert_eq!(free_bytes(&mounted.mount()), capacity);
    std::fs::write(mounted.mount().join("third"), vec![1u8; 6 << 20]).unwrap();
}

/// With `--hide-capacity`, statfs reports room enough while writes past the capacity fail: a
/// disk that fills without warning.
#[test]
fn a_hidden_capacity_fills_without_warning() {
    let flags = ["--capacity", "4194304", "--hide-capacity"];
    let Some(mounted) = Mounted::new("hidden-capacity", &flags) else {
        return;
    };
    let free = free_bytes(&mounted.mount());
    assert!(free > 1 << 30, "{free}");
    let error = std::fs::write(mounted.mount().join("big"), vec![1u8; 5 << 20]).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    assert_eq!(free_bytes(&mounted.mount()), free);
}

/// Through the kernel: reads see unsynced writes; a cut leaves exactly what fsync and the
/// directory syncs made durable, and what was not synced is gone (data and names).
#[test]
fn a_cut_leaves_what_was_synced() {
    let Some(mut mounted) = Mounted::new("cut", &[]) else {
        return;
    };
    let root = mounted.mount();
    std::fs::create_dir(root.join("directory")).unwrap();
    sync_directory(&root);
    let mut file = std::fs::File::create(root.join("directory/kept")).unwrap();
    file.write_all(b"synced\n").unwrap();
    file.sync_data().unwrap();
    sync_directory(&root.join("directory"));
    file.write_all(b"not synced\n").unwrap();
    drop(file);
    std::fs::write(root.join("directory/lost"), b"data").unwrap();
    let mut renamed = std::fs::File::create(root.join("directory/synced-file.tmp")).unwrap();
    renamed.write_all(b"renamed").unwrap();
    renamed.sync_all().unwrap();
    drop(renamed);
    std::fs::rename(
        root.join("directory/synced-file.tmp"),
        root.join("directory/kept"),
    )
    .unwrap();
    assert_eq!(
        std::fs::read(root.join("directory/kept")).unwrap(),
        b"renamed",
        "reads see what was not synced"
    );
    let answer = mounted.cut("drop");
    assert!(answer.contains("\"names_lost\":3"), "{answer}");
    let store = mounted.store();
    let mut names: Vec<String> = std::fs::read_dir(store.join("directory"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["kept"]);
    assert_eq!(
        std::fs::read(store.join("directory/kept")).unwrap(),
        b"synced\n"
    );
    assert!(!store.join(".faultfs-removed").exists());
    // The cut unmounted: the mount point is an empty directory again.
    assert_eq!(std::fs::read_dir(mounted.mount()).unwrap().count(), 0);
}
