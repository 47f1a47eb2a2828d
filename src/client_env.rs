//! `azq env`: the environment a client needs to reach a server started with the same flags,
//! printed for a POSIX shell (`eval "$(azq env)"`), PowerShell (`azq env --format powershell |
//! Invoke-Expression`) or a dotenv file (`azq env --format dotenv > .env`), as `gcloud beta
//! emulators pubsub env-init` does for its emulator. Pure formatting; `main` gathers the
//! configuration.
//!
//! The variables are the ones the Azure SDKs, the Azure CLI and Functions read:
//! `AZURE_STORAGE_CONNECTION_STRING` (with `QueueEndpoint`, path-style, as Azurite's),
//! `AZURE_STORAGE_ACCOUNT`, `AZURE_STORAGE_KEY`, and `AZURE_STORAGE_QUEUE_ENDPOINT` for code
//! that builds a client from a URL and a credential.

use std::fmt::Write;

/// Where a client finds the server, and as whom it signs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `https` when the server serves TLS (`--cert`).
    pub https: bool,
    /// The host a client connects to (a wildcard listen address becomes `127.0.0.1`).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The account's name.
    pub account: String,
    /// The account's key, base64.
    pub key: String,
}

/// The form to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// `export NAME='value'` (sh, bash, zsh).
    Posix,
    /// `$env:NAME = 'value'`.
    PowerShell,
    /// `NAME="value"` lines for a `.env` file (docker compose, python-dotenv, dotenv).
    Dotenv,
}

impl Shell {
    /// Reads `sh` (`bash`, `zsh`, `posix`), `powershell` (`pwsh`, `ps`) or `dotenv`.
    pub fn parse(name: &str) -> Option<Shell> {
        match name.to_ascii_lowercase().as_str() {
            "sh" | "bash" | "zsh" | "posix" => Some(Shell::Posix),
            "powershell" | "pwsh" | "ps" => Some(Shell::PowerShell),
            "dotenv" | "env" => Some(Shell::Dotenv),
            _ => None,
        }
    }
}

impl Endpoint {
    /// The queue service's URL for the account, path-style.
    pub fn queue_endpoint(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let host = if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{scheme}://{host}:{}/{}", self.port, self.account)
    }

    /// The variables, in the order they are printed.
    pub fn variables(&self) -> Vec<(&'static str, String)> {
        let scheme = if self.https { "https" } else { "http" };
        let connection_string = format!(
            "DefaultEndpointsProtocol={scheme};AccountName={};AccountKey={};QueueEndpoint={};",
            self.account,
            self.key,
            self.queue_endpoint()
        );
        vec![
            ("AZURE_STORAGE_CONNECTION_STRING", connection_string),
            ("AZURE_STORAGE_ACCOUNT", self.account.clone()),
            ("AZURE_STORAGE_KEY", self.key.clone()),
            ("AZURE_STORAGE_QUEUE_ENDPOINT", self.queue_endpoint()),
        ]
    }

    /// The variables in `shell`'s syntax, one line each.
    pub fn render(&self, shell: Shell) -> String {
        let mut out = String::new();
        for (name, value) in self.variables() {
            let _ = match shell {
                Shell::Posix => writeln!(out, "export {name}='{}'", value.replace('\'', "'\\''")),
                Shell::PowerShell => writeln!(out, "$env:{name} = '{}'", value.replace('\'', "''")),
                Shell::Dotenv => writeln!(
                    out,
                    "{name}=\"{}\"",
                    value
                        .replace('\\', "\\\\")
                        .replace('"', "\\\"")
                        .replace('$', "\\$")
                ),
            };
        }
        out
    }
}

/// The host a client should use for a server listening on `listen_host`.
pub fn client_host(listen_host: &str) -> String {
    match listen_host {
        "0.0.0.0" | "" => "127.0.0.1".to_string(),
        "::" | "[::]" => "::1".to_string(),
        host => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> Endpoint {
        Endpoint {
            https: false,
            host: "127.0.0.1".into(),
            port: 10001,
            account: "devstoreaccount1".into(),
            key: "a+b/c==".into(),
        }
    }

    #[test]
    fn every_form_carries_the_connection_string() {
        let connection_string = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;\
             AccountKey=a+b/c==;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;";
        let posix = endpoint().render(Shell::Posix);
        assert!(posix.starts_with(&format!(
            "export AZURE_STORAGE_CONNECTION_STRING='{connection_string}'\n"
        )));
        assert!(posix.contains(
            "export AZURE_STORAGE_QUEUE_ENDPOINT=\
             'http://127.0.0.1:10001/devstoreaccount1'\n"
        ));
        let powershell = endpoint().render(Shell::PowerShell);
        assert!(powershell.contains("$env:AZURE_STORAGE_ACCOUNT = 'devstoreaccount1'\n"));
        let dotenv = endpoint().render(Shell::Dotenv);
        assert!(dotenv.contains(&format!(
            "AZURE_STORAGE_CONNECTION_STRING=\"{connection_string}\"\n"
        )));
        assert_eq!(dotenv.lines().count(), 4);
    }

    #[test]
    fn quotes_and_hosts_are_escaped_for_each_form() {
        let odd = Endpoint {
            https: true,
            host: "::1".into(),
            account: "it's".into(),
            key: "k$\"\\".into(),
            ..endpoint()
        };
        assert_eq!(odd.queue_endpoint(), "https://[::1]:10001/it's");
        assert!(odd
            .render(Shell::Posix)
            .contains("export AZURE_STORAGE_ACCOUNT='it'\\''s'\n"));
        assert!(odd
            .render(Shell::PowerShell)
            .contains("$env:AZURE_STORAGE_ACCOUNT = 'it''s'\n"));
        assert!(odd
            .render(Shell::Dotenv)
            .contains("AZURE_STORAGE_KEY=\"k\\$\\\"\\\\\"\n"));
        assert_eq!(client_host("0.0.0.0"), "127.0.0.1");
        assert_eq!(client_host("[::]"), "::1");
        assert_eq!(client_host("localhost"), "localhost");
        assert_eq!(Shell::parse("PWSH"), Some(Shell::PowerShell));
        assert_eq!(Shell::parse("fish"), None);
    }
}
