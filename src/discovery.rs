//! Finds the azq server running beside `azq healthcheck`, so that a container's health check
//! asks the port the server was started with (`docker run IMAGE azurite-queue --queuePort 10010`)
//! rather than always 10001: the first process, in pid order, whose program is azq (by any of
//! its names) and which is not itself a health check, with its command line and environment
//! from `/proc`. In a container that is the entrypoint (pid 1, or the child of an init such as
//! `docker run --init`'s).
//!
//! Read under a root directory (`/` in production), so the tests run on fixture trees.

use std::path::Path;

/// Program names azq answers to.
const PROGRAM_NAMES: [&str; 3] = ["azq", "azurite", "azurite-queue"];

/// A server process: how it was started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerProcess {
    /// Its process ID.
    pub pid: u32,
    /// Its program (argv\[0\]).
    pub program: String,
    /// Its arguments (argv\[1..\]).
    pub arguments: Vec<String>,
    /// Its environment, when readable (`None`: another user's process, or no /proc).
    pub environment: Option<Vec<(String, String)>>,
}

impl ServerProcess {
    /// The value of `variable` in its environment.
    pub fn variable(&self, variable: &str) -> Option<String> {
        self.environment
            .as_ref()?
            .iter()
            .find(|(name, _)| name == variable)
            .map(|(_, value)| value.clone())
    }
}

/// The azq server among the processes under `root/proc`, other than `own_pid`.
pub fn server_process(root: &Path, own_pid: u32) -> Option<ServerProcess> {
    let mut pids: Vec<u32> = std::fs::read_dir(root.join("proc"))
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| pid != own_pid)
        .collect();
    pids.sort_unstable();
    pids.into_iter().find_map(|pid| {
        let directory = root.join("proc").join(pid.to_string());
        let command_line = std::fs::read(directory.join("cmdline")).ok()?;
        let mut words = split_nul(&command_line).into_iter();
        let program = words.next()?;
        let base = program.rsplit('/').next().unwrap_or(&program);
        if !PROGRAM_NAMES.contains(&base) {
            return None;
        }
        let arguments: Vec<String> = words.collect();
        if matches!(
            arguments.first().map(String::as_str),
            Some("healthcheck" | "help" | "version" | "--help" | "-h" | "--version")
        ) {
            return None;
        }
        let environment = std::fs::read(directory.join("environ")).ok().map(|bytes| {
            split_nul(&bytes)
                .into_iter()
                .filter_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    Some((name.to_string(), value.to_string()))
                })
                .collect()
        });
        Some(ServerProcess {
            pid,
            program,
            arguments,
            environment,
        })
    })
}

/// The NUL-terminated strings of a /proc file.
fn split_nul(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&byte| byte == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Fixture(PathBuf);

    impl Fixture {
        fn new() -> Fixture {
            let root = std::env::temp_dir().join(format!(
                "azq-discovery-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(root.join("proc/self")).unwrap();
            Fixture(root)
        }

        fn process(&self, pid: u32, command_line: &[&str], environment: Option<&[&str]>) {
            let directory = self.0.join("proc").join(pid.to_string());
            std::fs::create_dir_all(&directory).unwrap();
            let joined = |words: &[&str]| {
                words
                    .iter()
                    .flat_map(|word| word.bytes().chain([0]))
                    .collect::<Vec<u8>>()
            };
            std::fs::write(directory.join("cmdline"), joined(command_line)).unwrap();
            if let Some(environment) = environment {
                std::fs::write(directory.join("environ"), joined(environment)).unwrap();
            }
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn finds_the_server_not_the_health_check() {
        let fixture = Fixture::new();
        // An init (docker run --init), the server, and the health check asking.
        fixture.process(
            1,
            &["/sbin/docker-init", "--", "/usr/local/bin/azq"],
            Some(&[]),
        );
        fixture.process(
            7,
            &[
                "/usr/local/bin/azq",
                "azurite-queue",
                "--queuePort",
                "10010",
            ],
            Some(&["AZQ_QUEUE_HOST=0.0.0.0", "PATH=/usr/bin"]),
        );
        fixture.process(12, &["/usr/local/bin/azq", "healthcheck"], Some(&[]));
        let server = server_process(&fixture.0, 12).expect("the server");
        assert_eq!(server.pid, 7);
        assert_eq!(server.program, "/usr/local/bin/azq");
        assert_eq!(server.arguments, ["azurite-queue", "--queuePort", "10010"]);
        assert_eq!(
            server.variable("AZQ_QUEUE_HOST").as_deref(),
            Some("0.0.0.0")
        );
        assert_eq!(server.variable("HOME"), None);
        // By its other names, with an unreadable environment.
        let fixture = Fixture::new();
        fixture.process(1, &["azurite", "--blobHost", "0.0.0.0"], None);
        let server = server_process(&fixture.0, 99).unwrap();
        assert_eq!(
            (server.program.as_str(), server.environment),
            ("azurite", None)
        );
    }

    #[test]
    fn nothing_when_no_server_runs() {
        let fixture = Fixture::new();
        fixture.process(1, &["/bin/sh", "-c", "azq"], Some(&[]));
        fixture.process(2, &["azq", "healthcheck", "--queuePort", "1"], Some(&[]));
        fixture.process(3, &["azq", "version"], Some(&[]));
        assert_eq!(server_process(&fixture.0, 4), None);
        assert_eq!(server_process(Path::new("/nonexistent"), 1), None);
    }
}
