//! `faultfs`: a FUSE file system that passes through to a directory and, on command, cuts the
//! power: what was not synced is lost, kept, or torn at sector granularity, and what a disk
//! would then hold is left in the directory. azq's power-loss test (`scripts/powerloss.sh`)
//! runs the real server on it; the model of what "synced" means is in `state.rs`.
//!
//! ```text
//! faultfs mount [--decline-fallocate] [--decline-direct] [--sync-delay-ms MS]
//!               [--capacity BYTES [--hide-capacity]] DIRECTORY MOUNTPOINT SOCKET
//! faultfs control SOCKET COMMAND…
//! ```
//!
//! Commands, one per connection to the control socket (a line in, the answer out):
//! - `status`: what reached the file system (writes with and without O_DIRECT, refusals,
//!   syncs), the open handles and the unsynced changes, as one JSON object.
//! - `pending`: the unsynced changes, one a line, oldest first: `write NUMBER FILE OFFSET
//!   LENGTH`, `resize FILE FROM TO`, `create PATH`, `remove PATH`, `rename FROM TO`.
//! - `cut drop`, `cut random SEED`, `cut tear WRITE SECTORS`: waits until no file is open (a
//!   killed process's last I/O has ended), cuts the power (everything unsynced lost; or kept,
//!   lost, torn as the seed decides; or lost except the first SECTORS sectors of unsynced write
//!   WRITE), answers what was kept and lost, unmounts, and ends.
//! - `power-off`: the power goes while programs still run: every later request fails with EIO,
//!   so nothing more becomes durable; a `cut` then decides about what came before (after the
//!   programs ended). Without it, a cut comes after the programs ended (a crash, then the power).
//! - `unmount`: unmounts keeping everything, as a clean shutdown would, and ends.
//!
//! `--sync-delay-ms` makes each fsync take that long before it makes anything durable (a
//! device's flush; a power-off meanwhile fails it), which widens the window a power cut can
//! land in. `--decline-fallocate` answers EOPNOTSUPP to fallocate; `--decline-direct` answers
//! EINVAL to O_DIRECT I/O. The kernel never asks a FUSE server about `fcntl(F_SETFL,
//! O_DIRECT)` (it allows it on every FUSE file, whose page cache has a direct-I/O path), so a
//! program that sets O_DIRECT after opening (glommio does) learns of the refusal at its first
//! read or write. `--capacity` makes the file system that small: a write or `fallocate` that
//! would allocate past it fails with ENOSPC (counted in `status` as `no_space`), and `statfs`
//! reports the room left, so a program's own limit can be seen to act before the disk fills;
//! with `--hide-capacity` it reports room enough, so the disk fills without warning (a
//! thin-provisioned volume, a quota), and the program's last resort can be seen. The capacity
//! counts the allocated blocks of the files as named: a file removed while still open or mapped
//! counts as free at once (a disk keeps its blocks until the last close), a write past a file's
//! end is taken to allocate everything before it (as files written from their start, or
//! preallocated, are), and no fsync fails with ENOSPC (delayed allocation is not modelled).

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod fs;
mod state;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use state::{Cut, Options, State};

/// How long a cut waits for the files still open to be closed (a killed process's io_uring
/// requests end, and its descriptors close, shortly after it is reaped).
const CUT_WAIT_FOR_CLOSE: Duration = Duration::from_secs(30);

/// Threads serving the kernel's requests.
const REQUEST_THREADS: usize = 4;

const USAGE: &str = "usage: faultfs mount [--decline-fallocate] [--decline-direct] \
                     [--sync-delay-ms MS] [--capacity BYTES [--hide-capacity]] DIRECTORY \
                     MOUNTPOINT SOCKET\n       \
                     faultfs control SOCKET COMMAND...";

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let result = match arguments.first().map(String::as_str) {
        Some("mount") => mount(&arguments[1..]),
        Some("control") if arguments.len() >= 3 => control(&arguments[1], &arguments[2..]),
        _ => Err(USAGE.to_string()),
    };
    if let Err(message) = result {
        eprintln!("faultfs: {message}");
        std::process::exit(2);
    }
}

/// `faultfs mount`: mounts, then serves the control socket until a cut or an unmount.
fn mount(arguments: &[String]) -> Result<(), String> {
    let mut options = Options::default();
    let mut sync_delay = Duration::ZERO;
    let mut paths = Vec::new();
    let mut arguments = arguments.iter();
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--decline-fallocate" => options.decline_fallocate = true,
            "--decline-direct" => options.decline_direct = true,
            "--sync-delay-ms" => {
                let milliseconds = arguments.next().and_then(|value| value.parse().ok());
                let milliseconds = milliseconds.ok_or(format!("--sync-delay-ms MS\n{USAGE}"))?;
                sync_delay = Duration::from_millis(milliseconds);
            }
            "--hide-capacity" => options.capacity_hidden = true,
            "--capacity" => {
                let bytes = arguments.next().and_then(|value| value.parse().ok());
                options.capacity_bytes = Some(bytes.ok_or(format!("--capacity BYTES\n{USAGE}"))?);
            }
            flag if flag.starts_with("--") => return Err(format!("unknown flag {flag}\n{USAGE}")),
            path => paths.push(PathBuf::from(path)),
        }
    }
    let [directory, mountpoint, socket] = paths.as_slice() else {
        return Err(USAGE.to_string());
    };
    let state = State::new(directory, options)
        .map_err(|error| format!("{}: {error}", directory.display()))?;
    let state = Arc::new(Mutex::new(state));
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).map_err(|error| format!("{}: {error}", socket.display()))?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("faultfs".into()),
        fuser::MountOption::Subtype("faultfs".into()),
        fuser::MountOption::DefaultPermissions,
    ];
    // Several threads, so that a sync waiting out its delay holds up no other request.
    config.n_threads = Some(REQUEST_THREADS);
    let filesystem = fs::FaultFs::new(state.clone(), sync_delay);
    let session = fuser::spawn_mount(filesystem, mountpoint, &config)
        .map_err(|error| format!("mounting at {}: {error}", mountpoint.display()))?;
    println!(
        "faultfs: {} mounted at {} (control: {})",
        directory.display(),
        mountpoint.display(),
        socket.display()
    );
    let _ = std::io::stdout().flush();
    for connection in listener.incoming() {
        let Ok(connection) = connection else { continue };
        match serve(&state, connection) {
            Ok(true) => break,
            Ok(false) => {}
            Err(error) => eprintln!("faultfs: control connection: {error}"),
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(socket);
    session
        .umount_and_join()
        .map_err(|error| format!("unmounting {}: {error}", mountpoint.display()))
}

/// Answers one control command; `Ok(true)` when the file system is to be unmounted.
fn serve(state: &Mutex<State>, mut connection: UnixStream) -> std::io::Result<bool> {
    let mut line = String::new();
    BufReader::new(&connection).read_line(&mut line)?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let lock = || {
        state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    let (answer, done) = match words.as_slice() {
        ["status"] => (status(&lock()), false),
        ["pending"] => (lock().pending_changes().join("\n"), false),
        ["cut", how @ ..] => match parse_cut(how) {
            Some(how) => match cut(state, how) {
                Ok(summary) => (summary, true),
                Err(error) => (format!("error: {error}"), false),
            },
            None => (
                "error: cut drop | cut random SEED | cut tear WRITE SECTORS".into(),
                false,
            ),
        },
        ["power-off"] => {
            lock().power_off();
            ("powered off".into(), false)
        }
        ["unmount"] => ("unmounting".into(), true),
        _ => (format!("error: unknown command {:?}", line.trim()), false),
    };
    connection.write_all(answer.as_bytes())?;
    connection.write_all(b"\n")?;
    Ok(done)
}

fn parse_cut(words: &[&str]) -> Option<Cut> {
    match words {
        ["drop"] => Some(Cut::Drop),
        ["random", seed] => seed.parse().ok().map(Cut::Random),
        ["tear", write, sectors] => Some(Cut::Tear {
            write: write.parse().ok()?,
            sectors: sectors.parse().ok()?,
        }),
        _ => None,
    }
}

/// The counts `status` answers, as one JSON object.
fn status(state: &State) -> String {
    let stats = state.stats();
    let (writes, resizes, names) = state.pending();
    format!(
        "{{\"open_handles\":{},\"pending_writes\":{writes},\"pending_resizes\":{resizes},\
         \"pending_names\":{names},\"writes_direct\":{},\"writes_buffered\":{},\
         \"direct_declined\":{},\"fallocates\":{},\"fallocates_declined\":{},\
         \"file_syncs\":{},\"directory_syncs\":{},\"no_space\":{}}}",
        state.open_handles(),
        stats.writes_direct,
        stats.writes_buffered,
        stats.direct_declined,
        stats.fallocates,
        stats.fallocates_declined,
        stats.file_syncs,
        stats.directory_syncs,
        stats.no_space
    )
}

/// Waits until no handle is open, then cuts: the answer is what was kept and lost, as JSON.
fn cut(state: &Mutex<State>, how: Cut) -> Result<String, String> {
    let started = Instant::now();
    loop {
        {
            let mut state = state
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let open = state.open_handles();
            if open == 0 {
                let summary = state
                    .cut(how)
                    .map_err(|error| format!("the cut failed: {error}"))?;
                return Ok(format!(
                    "{{\"writes_kept\":{},\"writes_lost\":{},\"writes_torn\":{},\
                     \"resizes_kept\":{},\"resizes_lost\":{},\"names_kept\":{},\
                     \"names_lost\":{}}}",
                    summary.writes_kept,
                    summary.writes_lost,
                    summary.writes_torn,
                    summary.resizes_kept,
                    summary.resizes_lost,
                    summary.names_kept,
                    summary.names_lost
                ));
            }
            if started.elapsed() > CUT_WAIT_FOR_CLOSE {
                return Err(format!(
                    "{open} files still open after {CUT_WAIT_FOR_CLOSE:?}: stop the program first"
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `faultfs control SOCKET COMMAND…`: sends the command, prints the answer; fails on an error.
fn control(socket: &str, command: &[String]) -> Result<(), String> {
    let mut connection =
        UnixStream::connect(Path::new(socket)).map_err(|error| format!("{socket}: {error}"))?;
    connection
        .write_all(format!("{}\n", command.join(" ")).as_bytes())
        .map_err(|error| format!("{socket}: {error}"))?;
    let mut answer = String::new();
    connection
        .read_to_string(&mut answer)
        .map_err(|error| format!("{socket}: {error}"))?;
    print!("{answer}");
    if answer.starts_with("error") {
        return Err("the command failed".into());
    }
    Ok(())
}
