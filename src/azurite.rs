//! Azurite's command line, so that azq runs wherever Azurite's does: the program names `azurite`
//! (every service) and `azurite-queue` (queues only), by the binary's name or by the first
//! argument (`azq azurite …`, as a container image whose entrypoint is azq runs Azurite's
//! commands); the flags only Azurite has (the blob and table ports, keep-alive timeouts); the
//! environment defaults a container image sets (`AZQ_*_HOST`, `AZQ_LOCATION`), which hold
//! whatever the command line is unless it says otherwise; and Azurite's start-up and shut-down
//! lines, byte for byte, which Testcontainers modules wait for. The ports come from the
//! environment too (`AZQ_QUEUE_PORT`, `AZQ_BLOB_PORT`, `AZQ_TABLE_PORT`): .NET Aspire, running
//! `azq azurite` as an executable resource, hands each endpoint's port to the process in the
//! variable an endpoint names (`WithHttpEndpoint(env: …)`).
//!
//! `interpret` turns a command line into the mode, the arguments azq's own parser reads and the
//! probe ports (blob 10000 and table 10002, `api::probe`), which only `azurite` opens.
//! Everything here is pure: the environment is passed in.

use std::net::{IpAddr, SocketAddr};

use crate::api::Surface;

/// The Azurite program a command line asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// azq itself: queues, azq's lines.
    Azq,
    /// `azurite`: queues, the blob and table ports for readiness probes, Azurite's lines.
    Azurite,
    /// `azurite-queue`: queues and azurite-queue's lines.
    AzuriteQueue,
}

/// Azurite's default listening address, as its own (every service on loopback).
const AZURITE_HOST_DEFAULT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
/// Azurite's blob port.
pub const BLOB_PORT_DEFAULT: u16 = 10000;
/// Azurite's table port.
pub const TABLE_PORT_DEFAULT: u16 = 10002;

/// Environment variables that give a flag its default when the command line lacks it, as a
/// container image sets them (deploy/docker/Dockerfile), and .NET Aspire the ports of an
/// executable resource: (variable, flag).
pub const ENVIRONMENT_DEFAULTS: [(&str, &str); 7] = [
    ("AZQ_QUEUE_HOST", "--queueHost"),
    ("AZQ_BLOB_HOST", "--blobHost"),
    ("AZQ_TABLE_HOST", "--tableHost"),
    ("AZQ_LOCATION", "--location"),
    ("AZQ_QUEUE_PORT", "--queuePort"),
    ("AZQ_BLOB_PORT", "--blobPort"),
    ("AZQ_TABLE_PORT", "--tablePort"),
];

/// A command line, interpreted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// Which program it asked for.
    pub mode: Mode,
    /// What azq's own parser reads: the command line without the program word and without
    /// the flags handled here, with the environment's defaults added.
    pub arguments: Vec<String>,
    /// The blob and table ports to answer readiness probes on (`azurite` without
    /// `--queue-only`; empty otherwise).
    pub probes: Vec<(Surface, SocketAddr)>,
}

impl Mode {
    /// The mode a program name asks for (`/usr/local/bin/azurite` → `Azurite`); `Err` for
    /// Azurite's programs of services azq does not serve.
    fn of_program(name: &str) -> Result<Option<Mode>, String> {
        let base = name.rsplit('/').next().unwrap_or(name);
        match base {
            "azurite" => Ok(Some(Mode::Azurite)),
            "azurite-queue" => Ok(Some(Mode::AzuriteQueue)),
            "azurite-blob" | "azurite-table" => Err(format!(
                "{base}: azq serves queues only; run `azurite` (queues, with the blob and table \
                 ports answering readiness probes) or `azurite-queue`"
            )),
            _ => Ok(None),
        }
    }
}

/// Interprets the command line `arguments` (without the program name) of the program named
/// `program`, with `environment` giving the variables' values.
pub fn interpret(
    program: &str,
    arguments: Vec<String>,
    environment: impl Fn(&str) -> Option<String>,
) -> Result<Invocation, String> {
    let mut arguments = arguments.into_iter().peekable();
    let mode = match Mode::of_program(program)? {
        Some(mode) => mode,
        None => match arguments.peek().map(|first| Mode::of_program(first)) {
            Some(Ok(Some(mode))) => {
                arguments.next();
                mode
            }
            Some(Err(why)) => return Err(why),
            _ => Mode::Azq,
        },
    };
    let mut kept = Vec::new();
    let (mut blob_host, mut blob_port) = (None, BLOB_PORT_DEFAULT);
    let (mut table_host, mut table_port) = (None, TABLE_PORT_DEFAULT);
    let mut queue_only = false;
    let mut given = Vec::new();
    while let Some(argument) = arguments.next() {
        let (flag, inline_value) = match argument.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value)),
            _ => (argument.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline_value
                .map(str::to_string)
                .or_else(|| arguments.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let probe_flag = matches!(
            flag.as_str(),
            "--blobHost" | "--blobPort" | "--tableHost" | "--tablePort" | "--queue-only"
        );
        if probe_flag && mode == Mode::Azq {
            return Err(format!(
                "{flag}: the blob and table ports exist only as `azurite` (e.g. `azq azurite \
                 {flag} …`); azq alone serves queues"
            ));
        }
        match flag.as_str() {
            "--blobHost" => blob_host = Some(parse_host(&flag, &value()?)?),
            "--tableHost" => table_host = Some(parse_host(&flag, &value()?)?),
            "--blobPort" => blob_port = parse_port(&flag, &value()?)?,
            "--tablePort" => table_port = parse_port(&flag, &value()?)?,
            "--queue-only" => queue_only = true,
            // Azurite's keep-alive timeouts (seconds, default 5): accepted; azq keeps idle
            // connections open for IDLE_CONNECTION_TIMEOUT_MS whatever they say.
            "--blobKeepAliveTimeout" | "--queueKeepAliveTimeout" | "--tableKeepAliveTimeout" => {
                value()?
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{flag} must be a number of seconds"))?;
            }
            _ => {
                given.push(flag.clone());
                kept.push(argument);
                continue;
            }
        }
        given.push(flag);
    }
    // Defaults from the environment for flags the command line lacks.
    let mut arguments = Vec::new();
    for (variable, flag) in ENVIRONMENT_DEFAULTS {
        let Some(value) = environment(variable).filter(|value| !value.trim().is_empty()) else {
            continue;
        };
        let spelled = |name: &str| given.iter().any(|given| given == name);
        match flag {
            "--blobHost" if blob_host.is_none() => {
                blob_host = Some(parse_host(variable, &value)?);
            }
            "--tableHost" if table_host.is_none() => {
                table_host = Some(parse_host(variable, &value)?);
            }
            "--blobPort" if !spelled(flag) => blob_port = parse_port(variable, &value)?,
            "--tablePort" if !spelled(flag) => table_port = parse_port(variable, &value)?,
            "--queueHost" | "--queuePort" if !spelled(flag) => {
                if flag == "--queuePort" {
                    parse_port(variable, &value)?;
                }
                arguments.extend([flag.to_string(), value.trim().to_string()]);
            }
            "--location" if !spelled(flag) && !spelled("-l") => {
                arguments.extend([flag.to_string(), value]);
            }
            _ => {}
        }
    }
    arguments.extend(kept);
    let probes = if mode == Mode::Azurite && !queue_only {
        vec![
            (
                Surface::Blob,
                SocketAddr::new(blob_host.unwrap_or(AZURITE_HOST_DEFAULT), blob_port),
            ),
            (
                Surface::Table,
                SocketAddr::new(table_host.unwrap_or(AZURITE_HOST_DEFAULT), table_port),
            ),
        ]
    } else {
        Vec::new()
    };
    Ok(Invocation {
        mode,
        arguments,
        probes,
    })
}

fn parse_host(name: &str, text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{name} must be an IP address, not {text:?}"))
}

fn parse_port(name: &str, text: &str) -> Result<u16, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{name} must be a port number, not {text:?}"))
}

/// `http://HOST:PORT` (`https` with TLS), as Azurite writes an address.
fn url(address: SocketAddr, https: bool) -> String {
    let scheme = if https { "https" } else { "http" };
    format!("{scheme}://{}:{}", address.ip(), address.port())
}

/// The lines Azurite prints before its services listen: `queue` is the queue address asked for,
/// `probes` the probe ports'.
pub fn starting_lines(
    mode: Mode,
    queue: SocketAddr,
    probes: &[(Surface, SocketAddr)],
    https: bool,
) -> Vec<String> {
    match mode {
        Mode::Azq => Vec::new(),
        // src/queue/main.ts: the host and port as configured, no scheme.
        Mode::AzuriteQueue => vec![format!(
            "Azurite Queue service is starting on {}:{}",
            queue.ip(),
            queue.port()
        )],
        Mode::Azurite => services(queue, probes)
            .map(|(surface, address)| {
                format!(
                    "Azurite {} service is starting at {}",
                    surface.name(),
                    url(address, https)
                )
            })
            .collect(),
    }
}

/// The lines Azurite prints once its services listen, on the addresses they listen on.
pub fn listening_lines(
    mode: Mode,
    queue: SocketAddr,
    probes: &[(Surface, SocketAddr)],
    https: bool,
) -> Vec<String> {
    match mode {
        Mode::Azq => Vec::new(),
        Mode::AzuriteQueue => vec![format!(
            "Azurite Queue service successfully listens on {}",
            url(queue, https)
        )],
        Mode::Azurite => services(queue, probes)
            .map(|(surface, address)| {
                format!(
                    "Azurite {} service is successfully listening at {}",
                    surface.name(),
                    url(address, https)
                )
            })
            .collect(),
    }
}

/// The lines Azurite prints when it is asked to stop, and once it has.
pub fn closing_lines(mode: Mode, probes: &[(Surface, SocketAddr)]) -> (Vec<String>, Vec<String>) {
    let surfaces: Vec<Surface> = match mode {
        Mode::Azq => Vec::new(),
        Mode::AzuriteQueue => vec![Surface::Queue],
        Mode::Azurite => services(SocketAddr::from(([0, 0, 0, 0], 0)), probes)
            .map(|(surface, _)| surface)
            .collect(),
    };
    (
        surfaces
            .iter()
            .map(|surface| format!("Azurite {} service is closing...", surface.name()))
            .collect(),
        surfaces
            .iter()
            .map(|surface| format!("Azurite {} service successfully closed", surface.name()))
            .collect(),
    )
}

/// Azurite's services in the order it starts them: blob, queue, table.
fn services(
    queue: SocketAddr,
    probes: &[(Surface, SocketAddr)],
) -> impl Iterator<Item = (Surface, SocketAddr)> + '_ {
    let probe = move |wanted: Surface| {
        probes
            .iter()
            .copied()
            .filter(move |(surface, _)| *surface == wanted)
    };
    probe(Surface::Blob)
        .chain(std::iter::once((Surface::Queue, queue)))
        .chain(probe(Surface::Table))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(arguments: &[&str]) -> Vec<String> {
        arguments
            .iter()
            .map(|argument| argument.to_string())
            .collect()
    }

    fn no_environment(_: &str) -> Option<String> {
        None
    }

    /// The environment of deploy/docker/Dockerfile's image.
    fn image_environment(variable: &str) -> Option<String> {
        match variable {
            "AZQ_QUEUE_HOST" | "AZQ_BLOB_HOST" | "AZQ_TABLE_HOST" => Some("0.0.0.0".into()),
            "AZQ_LOCATION" => Some("/data".into()),
            _ => None,
        }
    }

    fn any() -> IpAddr {
        IpAddr::from([0, 0, 0, 0])
    }

    #[test]
    fn program_names_and_first_words() {
        let cases: &[(&str, &[&str], Mode, &[&str])] = &[
            (
                "azq",
                &["--inMemoryPersistence"],
                Mode::Azq,
                &["--inMemoryPersistence"],
            ),
            ("/usr/local/bin/azurite", &["-s"], Mode::Azurite, &["-s"]),
            ("azurite-queue", &[], Mode::AzuriteQueue, &[]),
            (
                "azq",
                &["azurite", "-l", "/x"],
                Mode::Azurite,
                &["-l", "/x"],
            ),
            (
                "/usr/local/bin/azq",
                &["azurite-queue"],
                Mode::AzuriteQueue,
                &[],
            ),
            // Only the first word is a program name.
            ("azq", &["-s", "azurite"], Mode::Azq, &["-s", "azurite"]),
        ];
        for &(program, arguments, mode, kept) in cases {
            let invocation = interpret(program, strings(arguments), no_environment).unwrap();
            assert_eq!(invocation.mode, mode, "{program} {arguments:?}");
            assert_eq!(
                invocation.arguments,
                strings(kept),
                "{program} {arguments:?}"
            );
        }
        for refused in [("azurite-blob", &[][..]), ("azq", &["azurite-table"][..])] {
            let error = interpret(refused.0, strings(refused.1), no_environment).unwrap_err();
            assert!(error.contains("serves queues only"), "{error}");
        }
    }

    #[test]
    fn azurite_flags_and_probe_ports() {
        // What the Testcontainers modules and Aspire run.
        let invocation = interpret(
            "azurite",
            strings(&[
                "-l",
                "/data",
                "--blobHost",
                "0.0.0.0",
                "--queueHost",
                "0.0.0.0",
                "--tableHost=0.0.0.0",
                "--blobKeepAliveTimeout",
                "5",
                "--skipApiVersionCheck",
            ]),
            no_environment,
        )
        .unwrap();
        assert_eq!(
            invocation.arguments,
            strings(&[
                "-l",
                "/data",
                "--queueHost",
                "0.0.0.0",
                "--skipApiVersionCheck"
            ])
        );
        assert_eq!(
            invocation.probes,
            vec![
                (Surface::Blob, SocketAddr::new(any(), 10000)),
                (Surface::Table, SocketAddr::new(any(), 10002)),
            ]
        );
        // Azurite's defaults: loopback; ports as given; --queue-only closes them.
        let invocation = interpret(
            "azurite",
            strings(&["--blobPort", "0", "--tablePort=12002"]),
            no_environment,
        )
        .unwrap();
        let loopback = IpAddr::from([127, 0, 0, 1]);
        assert_eq!(
            invocation.probes,
            vec![
                (Surface::Blob, SocketAddr::new(loopback, 0)),
                (Surface::Table, SocketAddr::new(loopback, 12002)),
            ]
        );
        let queue_only = interpret("azurite", strings(&["--queue-only"]), no_environment).unwrap();
        assert!(queue_only.probes.is_empty() && queue_only.arguments.is_empty());
        // azurite-queue takes them and opens nothing; azq alone refuses them.
        let queue = interpret(
            "azurite-queue",
            strings(&["--blobHost", "0.0.0.0"]),
            no_environment,
        );
        assert!(queue.unwrap().probes.is_empty());
        for refused in [
            &["--blobHost", "0.0.0.0"][..],
            &["--queue-only"],
            &["azurite", "--blobPort", "blob"],
            &["azurite", "--tableHost", "example.com"],
            &["azurite", "--queueKeepAliveTimeout", "soon"],
            &["azurite", "--blobPort"],
        ] {
            assert!(
                interpret("azq", strings(refused), no_environment).is_err(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn environment_defaults_yield_to_the_command_line() {
        let cases: &[(&[&str], &[&str])] = &[
            // `docker run IMAGE --inMemoryPersistence`: still on every address (in memory wins
            // over the location, as ever).
            (
                &["--inMemoryPersistence"],
                &[
                    "--queueHost",
                    "0.0.0.0",
                    "--location",
                    "/data",
                    "--inMemoryPersistence",
                ],
            ),
            (
                &["azurite-queue", "--queueHost", "127.0.0.1", "-l", "/other"],
                &["--queueHost", "127.0.0.1", "-l", "/other"],
            ),
            (
                &["--queueHost=::", "--location=/x"],
                &["--queueHost=::", "--location=/x"],
            ),
        ];
        for &(arguments, expected) in cases {
            let invocation = interpret("azq", strings(arguments), image_environment).unwrap();
            assert_eq!(invocation.arguments, strings(expected), "{arguments:?}");
        }
        let azurite = interpret(
            "azq",
            strings(&["azurite", "--blobHost", "127.0.0.1"]),
            image_environment,
        )
        .unwrap();
        assert_eq!(
            azurite.probes,
            vec![
                (
                    Surface::Blob,
                    SocketAddr::new(IpAddr::from([127, 0, 0, 1]), 10000)
                ),
                (Surface::Table, SocketAddr::new(any(), 10002)),
            ]
        );
        let bad = |variable: &str| (variable == "AZQ_BLOB_HOST").then(|| "nowhere".to_string());
        assert!(interpret("azurite", Vec::new(), bad).is_err());
    }

    #[test]
    fn ports_from_the_environment_as_aspire_passes_them() {
        // An executable resource's endpoints declared `WithHttpEndpoint(env: "AZQ_…_PORT")`:
        // Aspire puts each endpoint's port in its variable and starts `azq azurite …`.
        let aspire = |variable: &str| match variable {
            "AZQ_BLOB_PORT" => Some("41000".to_string()),
            "AZQ_QUEUE_PORT" => Some("41001".to_string()),
            "AZQ_TABLE_PORT" => Some(" 41002".to_string()),
            _ => None,
        };
        let invocation = interpret(
            "azq",
            strings(&["azurite", "--inMemoryPersistence"]),
            aspire,
        )
        .unwrap();
        assert_eq!(
            invocation.arguments,
            strings(&["--queuePort", "41001", "--inMemoryPersistence"])
        );
        let loopback = IpAddr::from([127, 0, 0, 1]);
        assert_eq!(
            invocation.probes,
            vec![
                (Surface::Blob, SocketAddr::new(loopback, 41000)),
                (Surface::Table, SocketAddr::new(loopback, 41002)),
            ]
        );
        // The command line wins, flag by flag.
        let invocation = interpret(
            "azurite",
            strings(&["--queuePort", "10001", "--blobPort=10000"]),
            aspire,
        )
        .unwrap();
        assert_eq!(invocation.arguments, strings(&["--queuePort", "10001"]));
        assert_eq!(
            invocation.probes,
            vec![
                (Surface::Blob, SocketAddr::new(loopback, 10000)),
                (Surface::Table, SocketAddr::new(loopback, 41002)),
            ]
        );
        // An empty variable is no value; a bad one names itself.
        let empty = |variable: &str| (variable == "AZQ_QUEUE_PORT").then(String::new);
        assert!(interpret("azurite-queue", Vec::new(), empty)
            .unwrap()
            .arguments
            .is_empty());
        for (name, value) in [
            ("AZQ_QUEUE_PORT", "http"),
            ("AZQ_BLOB_PORT", "70000"),
            ("AZQ_TABLE_PORT", "-1"),
        ] {
            let bad = |variable: &str| (variable == name).then(|| value.to_string());
            let error = interpret("azurite", Vec::new(), bad).unwrap_err();
            assert!(error.contains(name), "{error}");
        }
    }

    #[test]
    fn azurites_lines_byte_for_byte() {
        let queue = SocketAddr::new(any(), 10001);
        let probes = [
            (Surface::Blob, SocketAddr::new(any(), 10000)),
            (Surface::Table, SocketAddr::new(any(), 10002)),
        ];
        // src/azurite.ts
        assert_eq!(
            starting_lines(Mode::Azurite, queue, &probes, false),
            [
                "Azurite Blob service is starting at http://0.0.0.0:10000",
                "Azurite Queue service is starting at http://0.0.0.0:10001",
                "Azurite Table service is starting at http://0.0.0.0:10002",
            ]
        );
        assert_eq!(
            listening_lines(Mode::Azurite, queue, &probes, true),
            [
                "Azurite Blob service is successfully listening at https://0.0.0.0:10000",
                "Azurite Queue service is successfully listening at https://0.0.0.0:10001",
                "Azurite Table service is successfully listening at https://0.0.0.0:10002",
            ]
        );
        // src/queue/main.ts
        assert_eq!(
            starting_lines(Mode::AzuriteQueue, queue, &[], false),
            ["Azurite Queue service is starting on 0.0.0.0:10001"]
        );
        assert_eq!(
            listening_lines(Mode::AzuriteQueue, queue, &[], false),
            ["Azurite Queue service successfully listens on http://0.0.0.0:10001"]
        );
        assert_eq!(
            closing_lines(Mode::Azurite, &probes),
            (
                vec![
                    "Azurite Blob service is closing...".to_string(),
                    "Azurite Queue service is closing...".to_string(),
                    "Azurite Table service is closing...".to_string(),
                ],
                vec![
                    "Azurite Blob service successfully closed".to_string(),
                    "Azurite Queue service successfully closed".to_string(),
                    "Azurite Table service successfully closed".to_string(),
                ]
            )
        );
        assert!(listening_lines(Mode::Azq, queue, &probes, false).is_empty());
        assert_eq!(
            closing_lines(Mode::Azurite, &[]).0,
            ["Azurite Queue service is closing..."]
        );
    }
}
