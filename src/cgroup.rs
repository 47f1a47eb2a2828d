//! The memory and CPU limits a container runtime puts on this process through its cgroup, read
//! as Go's runtime and the JVM read them, so that azq's defaults fit the container rather than
//! the host: `--max-memory` defaults to half the smaller of the RAM and the memory limit, the
//! shard count to the CPU quota rounded up.
//!
//! Both cgroup versions: v2 (`memory.max`, `cpu.max` in the unified hierarchy) and v1
//! (`memory.limit_in_bytes` with `memory.stat`'s `hierarchical_memory_limit`,
//! `cpu.cfs_quota_us` / `cpu.cfs_period_us`), found the way the kernel describes them: the
//! cgroup mounts in `/proc/self/mountinfo` and this process's place in each hierarchy in
//! `/proc/self/cgroup`. A limit set on any ancestor up to the mount applies too, so the lowest
//! is taken. On a hybrid host the v1 controller, where one is mounted, is the one in force.
//!
//! Everything is read under a root directory (`/` in production), so the tests run the same
//! code on fixture trees of both versions.

use std::fmt;
use std::path::{Path, PathBuf};

/// A v1 limit at or above this means "no limit" (the kernel reports `PAGE_COUNTER_MAX` pages,
/// 0x7FFFFFFFFFFFF000 bytes on 4 KiB pages).
const UNLIMITED_BYTES_MIN: u64 = 1 << 62;

/// The cgroup version a limit was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The legacy per-controller hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Version::V1 => "cgroup v1",
            Version::V2 => "cgroup v2",
        })
    }
}

/// The memory this process's cgroup may use, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// The lowest limit on the cgroup and its ancestors.
    pub bytes: u64,
    /// Where it was read.
    pub version: Version,
}

/// The CPU time this process's cgroup may use: `quota_us` in every `period_us`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuQuota {
    /// Microseconds of CPU time per period (the lowest ratio on the cgroup and its ancestors).
    pub quota_us: u64,
    /// The period, microseconds.
    pub period_us: u64,
    /// Where it was read.
    pub version: Version,
}

impl CpuQuota {
    /// The CPUs' worth of time the quota allows, rounded up (at least one): `--cpus 1.5` gives 2.
    pub fn cpus(&self) -> usize {
        (self.quota_us.div_ceil(self.period_us.max(1))).max(1) as usize
    }

    /// The quota as a decimal number of CPUs, e.g. `1.5`.
    pub fn cpus_exact(&self) -> f64 {
        self.quota_us as f64 / self.period_us.max(1) as f64
    }
}

/// The limits found; `None` where there is none (or no cgroup could be read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// The memory limit.
    pub memory: Option<MemoryLimit>,
    /// The CPU quota.
    pub cpu: Option<CpuQuota>,
}

/// Reads this process's cgroup limits from the real `/proc` and `/sys`.
pub fn read() -> Limits {
    read_under(Path::new("/"))
}

/// Reads the cgroup limits of the process whose `/proc/self` and cgroup mounts lie under `root`.
pub fn read_under(root: &Path) -> Limits {
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap_or_default();
    let mounts = parse_mountinfo(&read("proc/self/mountinfo"));
    let memberships = parse_proc_cgroup(&read("proc/self/cgroup"));
    let hierarchy = Hierarchy {
        root,
        mounts: &mounts,
        memberships: &memberships,
    };
    Limits {
        memory: hierarchy.memory_limit(),
        cpu: hierarchy.cpu_quota(),
    }
}

/// A cgroup file system mounted in this process's mount namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    /// The cgroup path at the root of the mount (a container sees its own cgroup as `/` with a
    /// cgroup namespace, or its full path bind-mounted without one).
    root: String,
    /// Where it is mounted.
    mount_point: String,
    /// v1: the controllers of the hierarchy (`memory`, `cpu`, …); v2: empty.
    controllers: Vec<String>,
    /// Which version the file system is.
    version: Version,
}

/// The cgroup mounts listed in `/proc/self/mountinfo`.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        // `id parent major:minor root mount-point options [optional…] - fstype source super`
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = before.split(' ').collect();
        let mut after = after.split(' ');
        let (Some(file_system), Some(_source), Some(super_options)) =
            (after.next(), after.next(), after.next())
        else {
            continue;
        };
        if fields.len() < 5 {
            continue;
        }
        let (root, mount_point) = (unescape(fields[3]), unescape(fields[4]));
        match file_system {
            "cgroup2" => mounts.push(Mount {
                root,
                mount_point,
                controllers: Vec::new(),
                version: Version::V2,
            }),
            "cgroup" => mounts.push(Mount {
                root,
                mount_point,
                controllers: super_options.split(',').map(str::to_string).collect(),
                version: Version::V1,
            }),
            _ => {}
        }
    }
    mounts
}

/// Undoes mountinfo's octal escapes of space, tab, newline and backslash (`\040`, …).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).filter(|digits| {
            bytes[at] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
        });
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                out.push(value as u8);
                at += 4;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of `/proc/self/cgroup`: `id:controllers:path` (v2: `0::path`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Membership {
    /// The v1 controllers of the hierarchy; empty for the v2 line.
    controllers: Vec<String>,
    /// This process's cgroup in that hierarchy.
    path: String,
}

fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some(Membership {
                controllers: controllers
                    .split(',')
                    .filter(|name| !name.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// The mounts and memberships of one process, and the root they are read under.
struct Hierarchy<'a> {
    root: &'a Path,
    mounts: &'a [Mount],
    memberships: &'a [Membership],
}

impl Hierarchy<'_> {
    /// The directories from this process's cgroup up to the mount's root in the v1 hierarchy
    /// of `controller`, or (`None`) in the v2 one; deepest first.
    fn directories(&self, controller: Option<&str>) -> Option<Vec<PathBuf>> {
        let has = |controllers: &[String]| match controller {
            Some(name) => controllers.iter().any(|own| own == name),
            None => controllers.is_empty(),
        };
        let mount = self.mounts.iter().find(|mount| {
            has(&mount.controllers) && (controller.is_some() == (mount.version == Version::V1))
        })?;
        let membership = self
            .memberships
            .iter()
            .find(|line| has(&line.controllers))?;
        // The part of our path below the mount's root; a path outside it (another cgroup
        // namespace's view) leaves the mount point itself.
        let relative = match membership
            .path
            .strip_prefix(mount.root.trim_end_matches('/'))
        {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
            _ => "",
        };
        let mount_point = self
            .root
            .join(mount.mount_point.trim_start_matches('/'))
            .to_path_buf();
        let mut directory = mount_point.join(relative.trim_start_matches('/'));
        let mut directories = vec![directory.clone()];
        while directory != mount_point {
            if !directory.pop() || !directory.starts_with(&mount_point) {
                break;
            }
            directories.push(directory.clone());
        }
        Some(directories)
    }

    fn memory_limit(&self) -> Option<MemoryLimit> {
        if let Some(directories) = self.directories(Some("memory")) {
            // v1: the cgroup's own limit, and the lowest of its ancestors' as the kernel sums
            // it up in memory.stat (ancestors above the mount are not visible otherwise).
            let own = directories.iter().filter_map(|directory| {
                read_number(&directory.join("memory.limit_in_bytes"))
                    .filter(|&bytes| bytes < UNLIMITED_BYTES_MIN)
            });
            let hierarchical = std::fs::read_to_string(directories[0].join("memory.stat"))
                .ok()
                .and_then(|stat| {
                    stat.lines()
                        .filter_map(|line| line.strip_prefix("hierarchical_memory_limit "))
                        .find_map(|value| value.trim().parse::<u64>().ok())
                })
                .filter(|&bytes| bytes < UNLIMITED_BYTES_MIN);
            return own.chain(hierarchical).min().map(|bytes| MemoryLimit {
                bytes,
                version: Version::V1,
            });
        }
        let directories = self.directories(None)?;
        directories
            .iter()
            .filter_map(|directory| {
                let text = std::fs::read_to_string(directory.join("memory.max")).ok()?;
                text.trim().parse::<u64>().ok()
            })
            .min()
            .map(|bytes| MemoryLimit {
                bytes,
                version: Version::V2,
            })
    }

    fn cpu_quota(&self) -> Option<CpuQuota> {
        let (quotas, version): (Vec<(u64, u64)>, Version) = match self.directories(Some("cpu")) {
            Some(directories) => (
                directories
                    .iter()
                    .filter_map(|directory| {
                        // -1 (no quota) does not parse as a u64.
                        let quota = read_number(&directory.join("cpu.cfs_quota_us"))?;
                        let period = read_number(&directory.join("cpu.cfs_period_us"))?;
                        Some((quota, period))
                    })
                    .collect(),
                Version::V1,
            ),
            None => (
                self.directories(None)?
                    .iter()
                    .filter_map(|directory| {
                        let text = std::fs::read_to_string(directory.join("cpu.max")).ok()?;
                        let mut fields = text.split_whitespace();
                        // `max 100000` (no quota) does not parse.
                        let quota = fields.next()?.parse::<u64>().ok()?;
                        let period = fields.next()?.parse::<u64>().ok()?;
                        Some((quota, period))
                    })
                    .collect(),
                Version::V2,
            ),
        };
        quotas
            .into_iter()
            .filter(|&(quota, period)| quota > 0 && period > 0)
            // The smallest ratio of quota to period, compared without division.
            .min_by(|left, right| {
                (u128::from(left.0) * u128::from(right.1))
                    .cmp(&(u128::from(right.0) * u128::from(left.1)))
            })
            .map(|(quota_us, period_us)| CpuQuota {
                quota_us,
                period_us,
                version,
            })
    }
}

/// The default `--max-memory`: half the smaller of the RAM (`ram_bytes`, when known) and the
/// cgroup's memory limit, and where it came from in words for the ready line; `fallback_bytes`
/// when neither is known.
pub fn default_message_bytes_max(
    ram_bytes: Option<u64>,
    limits: &Limits,
    fallback_bytes: u64,
) -> (u64, String) {
    let limit = limits
        .memory
        .filter(|limit| ram_bytes.is_none_or(|ram| limit.bytes < ram));
    match (limit, ram_bytes) {
        (Some(limit), _) => (
            limit.bytes / 2,
            format!(
                "half the {} memory limit ({})",
                limit.version,
                format_bytes(limit.bytes)
            ),
        ),
        (None, Some(ram)) => (ram / 2, format!("half the RAM ({})", format_bytes(ram))),
        (None, None) => (fallback_bytes, "the RAM could not be read".to_string()),
    }
}

/// The default shard count: every CPU this process may use (`allowed_cpus`), but no more than
/// the cgroup's CPU quota rounded up; and where it came from, in words for the ready line (the
/// quota whenever it is no more than those CPUs).
pub fn default_shard_count(allowed_cpus: usize, limits: &Limits) -> (usize, String) {
    match limits.cpu {
        Some(quota) if quota.cpus() <= allowed_cpus => {
            let exact = quota.cpus_exact();
            let cpus = if exact.fract() == 0.0 {
                format!("{exact:.0}")
            } else {
                format!("{exact:.2}").trim_end_matches('0').to_string()
            };
            let unit = if exact == 1.0 { "CPU" } else { "CPUs" };
            (
                quota.cpus(),
                format!("the {} CPU quota ({cpus} {unit})", quota.version),
            )
        }
        _ => (
            allowed_cpus.max(1),
            "every CPU this process may use".to_string(),
        ),
    }
}

/// A byte count in binary units for people: `256 MiB`, `23.5 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        if bytes % GIB == 0 {
            format!("{} GiB", bytes / GIB)
        } else {
            format!("{:.1} GiB", bytes as f64 / GIB as f64)
        }
    } else if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture tree under a fresh temporary directory, removed on drop.
    struct Fixture(PathBuf);

    impl Fixture {
        fn new(name: &str) -> Fixture {
            let root = std::env::temp_dir().join(format!(
                "azq-cgroup-{name}-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(&root).unwrap();
            Fixture(root)
        }

        fn file(&self, path: &str, text: &str) -> &Fixture {
            let path = self.0.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
            self
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// What podman 4.3 (runc, cgroupfs) shows a container with `--memory 256m --cpus 1` on a
    /// cgroup v1 host, as seen on this project's machines: each hierarchy bind-mounted at the
    /// container's own cgroup.
    const V1_CONTAINER_CGROUP: &str = "\
8:pids:/libpod_parent/libpod-a4a6
4:memory:/libpod_parent/libpod-a4a6
2:cpuacct:/libpod_parent/libpod-a4a6
1:cpu:/libpod_parent/libpod-a4a6
0::/libpod_parent/libpod-a4a6
";
    const V1_CONTAINER_MOUNTINFO: &str = "\
131 123 0:59 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
132 131 0:29 /libpod_parent/libpod-a4a6 /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu
133 131 0:30 /libpod_parent/libpod-a4a6 /sys/fs/cgroup/cpuacct ro,nosuid - cgroup cgroup rw,cpuacct
135 131 0:32 /libpod_parent/libpod-a4a6 /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
139 131 0:36 /libpod_parent/libpod-a4a6 /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids
";

    #[test]
    fn v1_container_memory_and_cpu() {
        let fixture = Fixture::new("v1");
        fixture
            .file("proc/self/cgroup", V1_CONTAINER_CGROUP)
            .file("proc/self/mountinfo", V1_CONTAINER_MOUNTINFO)
            .file("sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n")
            .file(
                "sys/fs/cgroup/memory/memory.stat",
                "cache 0\nhierarchical_memory_limit 268435456\nhierarchical_memsw_limit 1\n",
            )
            .file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "150000\n")
            .file("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
        let limits = read_under(&fixture.0);
        assert_eq!(
            limits.memory,
            Some(MemoryLimit {
                bytes: 256 << 20,
                version: Version::V1
            })
        );
        let cpu = limits.cpu.expect("a quota");
        assert_eq!(
            (cpu.quota_us, cpu.period_us, cpu.version),
            (150_000, 100_000, Version::V1)
        );
        assert_eq!(cpu.cpus(), 2);
        assert_eq!(cpu.cpus_exact(), 1.5);
    }

    #[test]
    fn v1_without_limits_and_an_ancestor_limit_in_memory_stat() {
        let fixture = Fixture::new("v1-unlimited");
        fixture
            .file("proc/self/cgroup", V1_CONTAINER_CGROUP)
            .file("proc/self/mountinfo", V1_CONTAINER_MOUNTINFO)
            .file(
                "sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            )
            .file(
                "sys/fs/cgroup/memory/memory.stat",
                "hierarchical_memory_limit 9223372036854771712\n",
            )
            .file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
            .file("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
        assert_eq!(read_under(&fixture.0), Limits::default());
        // A limit on an ancestor the container cannot see shows in hierarchical_memory_limit.
        fixture.file(
            "sys/fs/cgroup/memory/memory.stat",
            "hierarchical_memory_limit 1073741824\n",
        );
        assert_eq!(read_under(&fixture.0).memory.unwrap().bytes, 1 << 30);
    }

    #[test]
    fn v1_host_path_below_the_mount_root() {
        // No container: the hierarchy is mounted at its root and the process sits deeper; a
        // limit on its parent applies.
        let fixture = Fixture::new("v1-host");
        fixture
            .file("proc/self/cgroup", "4:memory:/jobs/job-7\n")
            .file(
                "proc/self/mountinfo",
                "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
            )
            .file(
                "sys/fs/cgroup/memory/jobs/memory.limit_in_bytes",
                "536870912\n",
            )
            .file(
                "sys/fs/cgroup/memory/jobs/job-7/memory.limit_in_bytes",
                "9223372036854771712\n",
            );
        let limits = read_under(&fixture.0);
        assert_eq!(limits.memory.unwrap().bytes, 512 << 20);
        assert_eq!(limits.cpu, None);
    }

    /// A cgroup v2 container with a private cgroup namespace (Docker's and podman's default
    /// on v2): it sees its own cgroup as the root of the mount.
    const V2_CONTAINER_MOUNTINFO: &str =
        "1020 1010 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn v2_container_memory_and_cpu() {
        let fixture = Fixture::new("v2");
        fixture
            .file("proc/self/cgroup", "0::/\n")
            .file("proc/self/mountinfo", V2_CONTAINER_MOUNTINFO)
            .file("sys/fs/cgroup/memory.max", "268435456\n")
            .file("sys/fs/cgroup/cpu.max", "100000 100000\n");
        let limits = read_under(&fixture.0);
        assert_eq!(
            limits.memory,
            Some(MemoryLimit {
                bytes: 256 << 20,
                version: Version::V2
            })
        );
        let cpu = limits.cpu.unwrap();
        assert_eq!((cpu.cpus(), cpu.version), (1, Version::V2));
        fixture
            .file("sys/fs/cgroup/memory.max", "max\n")
            .file("sys/fs/cgroup/cpu.max", "max 100000\n");
        assert_eq!(read_under(&fixture.0), Limits::default());
    }

    #[test]
    fn v2_nested_takes_the_lowest_of_the_ancestors() {
        // systemd on a v2 host: the process in a service below a slice with its own limits.
        let fixture = Fixture::new("v2-nested");
        fixture
            .file("proc/self/cgroup", "0::/work.slice/azq.service\n")
            .file(
                "proc/self/mountinfo",
                "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
            )
            .file("sys/fs/cgroup/work.slice/memory.max", "1073741824\n")
            .file("sys/fs/cgroup/work.slice/cpu.max", "50000 100000\n")
            .file(
                "sys/fs/cgroup/work.slice/azq.service/memory.max",
                "2147483648\n",
            )
            .file(
                "sys/fs/cgroup/work.slice/azq.service/cpu.max",
                "max 100000\n",
            );
        let limits = read_under(&fixture.0);
        assert_eq!(limits.memory.unwrap().bytes, 1 << 30);
        let cpu = limits.cpu.unwrap();
        assert_eq!(
            (cpu.quota_us, cpu.period_us, cpu.cpus()),
            (50_000, 100_000, 1)
        );
    }

    #[test]
    fn hybrid_host_prefers_the_v1_controller() {
        // Unified hierarchy mounted but empty of controllers; memory is in v1.
        let fixture = Fixture::new("hybrid");
        fixture
            .file("proc/self/cgroup", "4:memory:/\n1:cpu:/\n0::/\n")
            .file(
                "proc/self/mountinfo",
                "\
32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
40 31 0:40 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
",
            )
            .file("sys/fs/cgroup/memory/memory.limit_in_bytes", "1048576\n")
            .file("sys/fs/cgroup/unified/memory.max", "2048\n");
        assert_eq!(
            read_under(&fixture.0).memory,
            Some(MemoryLimit {
                bytes: 1 << 20,
                version: Version::V1
            })
        );
    }

    #[test]
    fn nothing_readable_means_no_limits() {
        let fixture = Fixture::new("empty");
        assert_eq!(read_under(&fixture.0), Limits::default());
        fixture.file("proc/self/cgroup", "garbage\n::\n").file(
            "proc/self/mountinfo",
            "not a mountinfo line\n1 2 3 - cgroup2\n",
        );
        assert_eq!(read_under(&fixture.0), Limits::default());
    }

    #[test]
    fn defaults_and_where_they_came_from() {
        let limited = |memory_bytes: Option<u64>, quota_us: Option<u64>| Limits {
            memory: memory_bytes.map(|bytes| MemoryLimit {
                bytes,
                version: Version::V1,
            }),
            cpu: quota_us.map(|quota_us| CpuQuota {
                quota_us,
                period_us: 100_000,
                version: Version::V2,
            }),
        };
        let ram = Some(24u64 << 30);
        assert_eq!(
            default_message_bytes_max(ram, &limited(Some(256 << 20), None), 1),
            (
                128 << 20,
                "half the cgroup v1 memory limit (256 MiB)".to_string()
            )
        );
        // A limit above the RAM does not raise the default.
        assert_eq!(
            default_message_bytes_max(ram, &limited(Some(64 << 30), None), 1),
            (12 << 30, "half the RAM (24 GiB)".to_string())
        );
        assert_eq!(
            default_message_bytes_max(None, &limited(Some(1 << 30), None), 1).0,
            512 << 20
        );
        assert_eq!(default_message_bytes_max(None, &Limits::default(), 7).0, 7);
        assert_eq!(
            default_shard_count(2, &limited(None, Some(100_000))),
            (1, "the cgroup v2 CPU quota (1 CPU)".to_string())
        );
        assert_eq!(
            default_shard_count(4, &limited(None, Some(150_000))),
            (2, "the cgroup v2 CPU quota (1.5 CPUs)".to_string())
        );
        // Where the quota rounds up to every allowed CPU, it is still the reason given.
        assert_eq!(
            default_shard_count(2, &limited(None, Some(150_000))),
            (2, "the cgroup v2 CPU quota (1.5 CPUs)".to_string())
        );
        // A quota of more CPUs than the process may use changes nothing.
        assert_eq!(
            default_shard_count(2, &limited(None, Some(400_000))),
            (2, "every CPU this process may use".to_string())
        );
        assert_eq!(default_shard_count(3, &Limits::default()).0, 3);
        assert_eq!(format_bytes(25_276_510_208), "23.5 GiB");
        assert_eq!(format_bytes(1536 << 10), "1.5 MiB");
        assert_eq!(format_bytes(512), "512 bytes");
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape(r"/x\09"), r"/x\09");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
