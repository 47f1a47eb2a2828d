//! `no-io-uring COMMAND [ARGUMENTS…]`: runs COMMAND the way Docker ≥ 25 and containerd 2 run a
//! container under their default seccomp profiles as far as io_uring goes: `io_uring_setup`,
//! `io_uring_enter` and `io_uring_register` fail with EPERM, every other system call is allowed.
//! The filter is installed in this process (with `no_new_privs`) and then COMMAND is executed in
//! its place, so it and its children inherit the filter. The tests use it to prove that azq and
//! azq-loadgen fall back to the portable backend where io_uring is blocked.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

fn main() {
    let mut arguments = std::env::args_os().skip(1);
    let Some(command) = arguments.next() else {
        eprintln!("usage: no-io-uring COMMAND [ARGUMENTS...]");
        std::process::exit(2);
    };
    let filter = match denying_io_uring() {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("no-io-uring: cannot build the seccomp filter: {error}");
            std::process::exit(2);
        }
    };
    if let Err(error) = seccompiler::apply_filter(&filter) {
        eprintln!("no-io-uring: cannot install the seccomp filter: {error}");
        std::process::exit(2);
    }
    let error = std::process::Command::new(&command).args(arguments).exec();
    eprintln!(
        "no-io-uring: cannot run {}: {error}",
        command.to_string_lossy()
    );
    std::process::exit(127);
}

/// The filter: EPERM for the three io_uring calls, allow for the rest.
fn denying_io_uring() -> Result<BpfProgram, String> {
    let denied = [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        denied.iter().map(|&call| (call, Vec::new())).collect();
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|error| error.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|error| error.to_string())?;
    filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| error.to_string())
}
