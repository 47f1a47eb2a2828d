//! The user a server started as root becomes: `AZQ_RUN_AS=UID:GID`, which the container image
//! sets. Azurite's image runs as root, and the Testcontainers libraries copy the certificate
//! files they are given into the container so that only root may read them (Node's
//! `@testcontainers/azurite` writes the key as uid 0, mode 0600; Java's keeps the host file's
//! owner and mode). So the image starts azq as root; azq reads those files first, then gives
//! root up for good before it opens its data directory, its request log or a socket, and
//! everything it writes belongs to that user.
//!
//! `parse` is pure; `leave_root` makes the system calls, once, before any other thread exists.

/// A user and group to run as, by number (the image has no user database to look names up in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id; of the supplementary groups it started with, only root's is dropped.
    pub gid: u32,
}

/// Reads `AZQ_RUN_AS`: `UID:GID` in numbers; `None` when unset or empty (stay as started).
pub fn parse(value: Option<&str>) -> Result<Option<RunAs>, String> {
    let Some(value) = value.map(str::trim).filter(|value| !value.is_empty()) else {
        return Ok(None);
    };
    let wrong =
        || format!("AZQ_RUN_AS must be UID:GID in numbers, e.g. 65532:65532, not {value:?}");
    let (uid, gid) = value.split_once(':').ok_or_else(wrong)?;
    // -1 (u32::MAX) means "leave unchanged" to the set*id calls: never a user to become.
    let id = |text: &str| {
        text.parse::<u32>()
            .ok()
            .filter(|&id| id != u32::MAX)
            .ok_or_else(wrong)
    };
    Ok(Some(RunAs {
        uid: id(uid)?,
        gid: id(gid)?,
    }))
}

/// When this process runs as root (effective uid 0) and `run_as` names another user: drops gid
/// 0 from the supplementary groups (keeping the others), sets the real, effective and saved
/// group and user ids, checks that root cannot be had back, and makes the process
/// non-dumpable. Returns the user it became; `None` when nothing was to be done (not root,
/// nothing asked, or root asked). Must run before any other thread is started.
pub fn leave_root(run_as: Option<RunAs>) -> Result<Option<RunAs>, String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let Some(run_as) = run_as.filter(|run_as| root && run_as.uid != 0) else {
        return Ok(None);
    };
    let RunAs { uid, gid } = run_as;
    let failed = |call: &str| {
        format!(
            "started as root, azq could not become uid {uid} gid {gid} (AZQ_RUN_AS): {call}: {}. \
             Keep the capabilities SETUID and SETGID, start it as that user (`--user \
             {uid}:{gid}`), or set AZQ_RUN_AS empty to stay root",
            std::io::Error::last_os_error()
        )
    };
    // The supplementary groups it was started with stay, but root's group: a Kubernetes
    // `fsGroup` or Docker's `--group-add` is how a volume is made writable.
    let kept = supplementary_groups_but_root().ok_or_else(|| failed("getgroups"))?;
    // SAFETY: `kept` holds `kept.len()` group ids for the call to read.
    if unsafe { libc::setgroups(kept.len(), kept.as_ptr()) } != 0 {
        return Err(failed("setgroups"));
    }
    // Group first: once the user is not root, it may no longer change its group. Called by
    // root, setgid and setuid set the real, effective and saved ids alike (POSIX).
    // SAFETY: setgid and setuid take plain ids and touch no memory.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(failed("setgid"));
    }
    // SAFETY: as above.
    if unsafe { libc::setuid(uid) } != 0 {
        return Err(failed("setuid"));
    }
    // SAFETY: as above; a success here would mean root was kept, which is checked below.
    let regained = unsafe { libc::setuid(0) } == 0;
    // SAFETY: these getters cannot fail and touch no memory.
    let (real, effective) = unsafe { (libc::getuid(), libc::geteuid()) };
    // SAFETY: as above.
    let (group, effective_group) = unsafe { (libc::getgid(), libc::getegid()) };
    if regained || (real, effective, group, effective_group) != (uid, uid, gid, gid) {
        return Err(format!(
            "started as root, azq asked to become uid {uid} gid {gid} (AZQ_RUN_AS) but runs as \
             uid {real}/{effective} gid {group}/{effective_group}{}",
            if regained {
                ", and could become root again"
            } else {
                ""
            }
        ));
    }
    // Not dumpable whatever the host's `fs.suid_dumpable` (which a container shares): no other
    // process of the same user may trace it for the private key it read as root.
    // SAFETY: prctl with PR_SET_DUMPABLE and PR_GET_DUMPABLE takes plain integers.
    let dumpable = unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0)
    };
    if dumpable != 0 {
        return Err(failed("prctl(PR_SET_DUMPABLE, 0)"));
    }
    Ok(Some(run_as))
}

/// The process's supplementary groups without gid 0, or `None` when they cannot be read.
fn supplementary_groups_but_root() -> Option<Vec<libc::gid_t>> {
    // SAFETY: a count of 0 asks only how many there are; nothing is written.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0 as libc::gid_t; usize::try_from(count).ok()?];
    // SAFETY: `groups` has room for `count` ids.
    let read = unsafe { libc::getgroups(count, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(read).ok()?);
    groups.retain(|&group| group != 0);
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_table() {
        let run_as = |uid, gid| Some(RunAs { uid, gid });
        let cases: [(Option<&str>, Option<RunAs>); 6] = [
            (None, None),
            (Some(""), None),
            (Some("  "), None),
            (Some("65532:65532"), run_as(65532, 65532)),
            (Some(" 1000650000:0 "), run_as(1_000_650_000, 0)),
            (Some("0:0"), run_as(0, 0)),
        ];
        for (value, expected) in cases {
            assert_eq!(parse(value).unwrap(), expected, "{value:?}");
        }
        for refused in [
            "65532",
            "nonroot:nonroot",
            "65532:",
            ":0",
            "1:2:3",
            "-1:0",
            "4294967295:0",
            "0:4294967295",
            "65532 :0",
        ] {
            let error = parse(Some(refused)).unwrap_err();
            assert!(error.contains("UID:GID"), "{refused}: {error}");
        }
    }

    #[test]
    fn nothing_to_leave_changes_nothing() {
        // Whoever runs the tests (root in CI) stays who they are: nothing asked, or root asked.
        // SAFETY: getuid cannot fail.
        let before = unsafe { libc::getuid() };
        assert_eq!(leave_root(None), Ok(None));
        assert_eq!(leave_root(Some(RunAs { uid: 0, gid: 0 })), Ok(None));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getuid() }, before);
    }
}
