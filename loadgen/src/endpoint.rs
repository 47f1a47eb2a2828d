//! Where requests go and who signs them: the endpoint URL (`http://` or `https://`), a
//! connection string, the account and its key, a SAS token or a bearer token, resolved once at
//! start-up into an `Endpoint` (with its TLS client for HTTPS) and `Credentials`.
//!
//! Path-style URLs (`http://127.0.0.1:10001/devstoreaccount1`, the emulators') name the account
//! in the first path segment; host-style URLs (`http://acct.queue.core.windows.net`, the real
//! service's) in the first DNS label. Either way the request paths start with the URL's path.

use std::net::{SocketAddr, ToSocketAddrs};

use azq::auth::SigningKey;
use azq::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};

use crate::tls::{TlsArguments, TlsClient};

/// The emulators' default queue endpoint, shared by Azurite and azq.
pub const DEVELOPMENT_ENDPOINT: &str = "http://127.0.0.1:10001/devstoreaccount1";

/// The network address and URL shape of the queue service.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Resolved once at start-up: the engine never waits for DNS.
    pub address: SocketAddr,
    /// The `Host` header: the URL's authority.
    pub host_header: String,
    /// The URL's path without a trailing `/` (`/devstoreaccount1`, or empty for host style);
    /// every request path starts with it.
    pub base_path: String,
    /// The account name the URL implies, when it implies one.
    pub account_from_url: Option<String>,
    /// For an `https://` URL: the TLS client every connection uses.
    pub tls: Option<TlsClient>,
}

/// How requests prove who sent them.
#[derive(Clone, Debug)]
pub enum Credentials {
    /// `Authorization: SharedKey account:signature`, signed as the SDKs sign.
    SharedKey { account: String, key: SigningKey },
    /// A SAS token appended to every request's query (without the leading `?`).
    Sas { token: String },
    /// `Authorization: Bearer <token>` (azq or Azurite with `--oauth basic`, over HTTPS).
    Bearer { token: String },
}

/// What the command line said about the target, before resolution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetArguments {
    pub endpoint: Option<String>,
    pub account: Option<String>,
    pub key: Option<String>,
    pub connection_string: Option<String>,
    pub sas: Option<String>,
    /// `--bearer TOKEN`, or `--bearer unsigned` for a generated unsigned JWT.
    pub bearer: Option<String>,
    /// How HTTPS endpoints are verified (`--ca`, `--insecure`).
    pub tls: TlsArguments,
}

/// `--bearer unsigned`: a JWT made here, which an emulator that checks claims but not signatures
/// (azq and Azurite with `--oauth basic`) accepts.
pub const UNSIGNED_BEARER: &str = "unsigned";
/// How long a generated token is valid, seconds: longer than any run.
const UNSIGNED_BEARER_LIFETIME_S: u64 = 7 * 24 * 3600;

/// Resolves the target arguments into an endpoint and credentials. Precedence: explicit flags
/// over the connection string over the development defaults.
pub fn resolve(arguments: &TargetArguments) -> Result<(Endpoint, Credentials), String> {
    let connection = match &arguments.connection_string {
        Some(text) => Some(ConnectionString::parse(text)?),
        None => None,
    };
    let endpoint_url = arguments
        .endpoint
        .clone()
        .or_else(|| {
            connection
                .as_ref()
                .and_then(ConnectionString::queue_endpoint)
        })
        .unwrap_or_else(|| DEVELOPMENT_ENDPOINT.to_string());
    let endpoint = parse_endpoint(&endpoint_url, &arguments.tls)?;
    if let Some(token) = &arguments.bearer {
        if endpoint.tls.is_none() {
            return Err(
                "--bearer needs an https:// endpoint (bearer tokens never go over HTTP)"
                    .to_string(),
            );
        }
        let token = if token == UNSIGNED_BEARER {
            unsigned_bearer(azq::time::unix_ms() / 1000)
        } else {
            token.clone()
        };
        return Ok((endpoint, Credentials::Bearer { token }));
    }
    let sas = arguments
        .sas
        .clone()
        .or_else(|| connection.as_ref().and_then(|c| c.sas.clone()));
    if let Some(token) = sas {
        let token = token.trim_start_matches('?').to_string();
        if token.is_empty() {
            return Err("--sas needs a token".to_string());
        }
        return Ok((endpoint, Credentials::Sas { token }));
    }
    let account = arguments
        .account
        .clone()
        .or_else(|| connection.as_ref().and_then(|c| c.account.clone()))
        .or_else(|| endpoint.account_from_url.clone())
        .unwrap_or_else(|| DEVELOPMENT_ACCOUNT_NAME.to_string());
    let key_text = arguments
        .key
        .clone()
        .or_else(|| connection.as_ref().and_then(|c| c.key.clone()));
    let key_text = match key_text {
        Some(key) => key,
        None if account == DEVELOPMENT_ACCOUNT_NAME => DEVELOPMENT_ACCOUNT_KEY.to_string(),
        None => return Err(format!("no key for account {account}: pass --key or --sas")),
    };
    let key = SigningKey::from_base64(&key_text).map_err(|error| format!("--key: {error}"))?;
    Ok((endpoint, Credentials::SharedKey { account, key }))
}

/// A JWT with Azure AD's claims for the storage audience, valid from `now_s` for a week, and no
/// signature.
fn unsigned_bearer(now_s: u64) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let header = r#"{"alg":"none","typ":"JWT"}"#;
    let claims = format!(
        r#"{{"aud":"https://storage.azure.com","iss":"https://sts.windows.net/00000000-0000-0000-0000-000000000000/","iat":{now_s},"nbf":{now_s},"exp":{},"sub":"azq-loadgen"}}"#,
        now_s + UNSIGNED_BEARER_LIFETIME_S
    );
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    )
}

/// Parses `http[s]://host[:port][/path]`, resolves the host and, for `https`, builds the TLS
/// client as `tls` says.
pub fn parse_endpoint(url: &str, tls: &TlsArguments) -> Result<Endpoint, String> {
    let (rest, secure) = if let Some(rest) = url.strip_prefix("http://") {
        (rest, false)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, true)
    } else {
        return Err(format!(
            "{url}: the endpoint must start with http:// or https://"
        ));
    };
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(format!("{url}: no host"));
    }
    let default_port = if secure { 443 } else { 80 };
    let port_of = |text: &str| {
        text.parse::<u16>()
            .map_err(|_| format!("{url}: bad port {text:?}"))
    };
    // An IPv6 literal is bracketed, and its colons are not the port's.
    let (host, port) = match authority.find(']') {
        Some(end) if authority.starts_with('[') => match &authority[end + 1..] {
            "" => (&authority[..=end], default_port),
            after => match after.strip_prefix(':') {
                Some(port) => (&authority[..=end], port_of(port)?),
                None => return Err(format!("{url}: bad authority {authority:?}")),
            },
        },
        _ => match authority.rsplit_once(':') {
            Some((host, port)) => (host, port_of(port)?),
            None => (authority, default_port),
        },
    };
    let base_path = path.trim_end_matches('/').to_string();
    if base_path.contains(['?', '#']) {
        return Err(format!("{url}: the endpoint must not have a query"));
    }
    let address = (host.trim_start_matches('[').trim_end_matches(']'), port)
        .to_socket_addrs()
        .map_err(|error| format!("{url}: cannot resolve {host}: {error}"))?
        .next()
        .ok_or_else(|| format!("{url}: {host} has no address"))?;
    let account_from_url = match base_path.trim_start_matches('/').split('/').next() {
        Some(segment) if !segment.is_empty() => Some(segment.to_string()),
        _ => host_style_account(host),
    };
    let tls = if secure {
        let name = host.trim_start_matches('[').trim_end_matches(']');
        Some(TlsClient::new(name, tls).map_err(|error| format!("{url}: {error}"))?)
    } else {
        None
    };
    Ok(Endpoint {
        address,
        host_header: authority.to_string(),
        base_path,
        account_from_url,
        tls,
    })
}

/// The account of a host-style name (`acct.queue.core.windows.net`): its first label, when the
/// host is a DNS name with a dot rather than an IP literal or `localhost`.
fn host_style_account(host: &str) -> Option<String> {
    if host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[') {
        return None;
    }
    host.split_once('.')
        .map(|(label, _)| label.to_string())
        .filter(|label| !label.is_empty())
}

/// The fields of an Azure Storage connection string that matter to the queue service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ConnectionString {
    protocol: Option<String>,
    account: Option<String>,
    key: Option<String>,
    queue_endpoint: Option<String>,
    endpoint_suffix: Option<String>,
    sas: Option<String>,
}

impl ConnectionString {
    /// Parses `Name=value;Name=value`; `UseDevelopmentStorage=true` means the emulator.
    fn parse(text: &str) -> Result<ConnectionString, String> {
        let mut parsed = ConnectionString::default();
        for pair in text
            .split(';')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            // Split at the first `=` only: keys and SAS tokens end in `=` padding.
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("connection string: {pair:?} has no `=`"))?;
            let value = value.trim().to_string();
            match name.trim().to_ascii_lowercase().as_str() {
                "usedevelopmentstorage" if value.eq_ignore_ascii_case("true") => {
                    parsed.account = Some(DEVELOPMENT_ACCOUNT_NAME.to_string());
                    parsed.key = Some(DEVELOPMENT_ACCOUNT_KEY.to_string());
                    parsed.queue_endpoint = Some(DEVELOPMENT_ENDPOINT.to_string());
                }
                "defaultendpointsprotocol" => parsed.protocol = Some(value),
                "accountname" => parsed.account = Some(value),
                "accountkey" => parsed.key = Some(value),
                "queueendpoint" => parsed.queue_endpoint = Some(value),
                "endpointsuffix" => parsed.endpoint_suffix = Some(value),
                "sharedaccesssignature" => parsed.sas = Some(value),
                // Blob, table and file endpoints and anything newer do not concern queues.
                _ => {}
            }
        }
        Ok(parsed)
    }

    /// The queue endpoint: explicit, or built from the protocol, account and suffix.
    fn queue_endpoint(&self) -> Option<String> {
        if let Some(endpoint) = &self.queue_endpoint {
            return Some(endpoint.clone());
        }
        let account = self.account.as_ref()?;
        let protocol = self.protocol.as_deref().unwrap_or("https");
        let suffix = self
            .endpoint_suffix
            .as_deref()
            .unwrap_or("core.windows.net");
        Some(format!("{protocol}://{account}.queue.{suffix}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host header, base path and implied account of an accepted URL; `Err` for a refused one.
    type Expected = Result<(&'static str, &'static str, Option<&'static str>), ()>;

    #[test]
    fn endpoint_table() {
        let cases: &[(&str, Expected)] = &[
            (
                DEVELOPMENT_ENDPOINT,
                Ok((
                    "127.0.0.1:10001",
                    "/devstoreaccount1",
                    Some("devstoreaccount1"),
                )),
            ),
            (
                "http://127.0.0.1:10001/devstoreaccount1/",
                Ok((
                    "127.0.0.1:10001",
                    "/devstoreaccount1",
                    Some("devstoreaccount1"),
                )),
            ),
            ("http://127.0.0.1:8080", Ok(("127.0.0.1:8080", "", None))),
            (
                "http://localhost:10001/acct",
                Ok(("localhost:10001", "/acct", Some("acct"))),
            ),
            (
                "https://127.0.0.1:10443/devstoreaccount1",
                Ok((
                    "127.0.0.1:10443",
                    "/devstoreaccount1",
                    Some("devstoreaccount1"),
                )),
            ),
            ("https://[::1]/acct", Ok(("[::1]", "/acct", Some("acct")))),
            (
                "http://[::1]:10001/acct",
                Ok(("[::1]:10001", "/acct", Some("acct"))),
            ),
            ("http://[::1]x/acct", Err(())),
            ("ftp://127.0.0.1", Err(())),
            ("http://", Err(())),
            ("http://127.0.0.1:port", Err(())),
            ("http://127.0.0.1:10001/acct?x=1", Err(())),
        ];
        for (url, expected) in cases {
            let insecure = TlsArguments {
                ca: None,
                insecure: true,
            };
            let parsed = parse_endpoint(url, &insecure);
            match expected {
                Ok((host, base_path, account)) => {
                    let endpoint = parsed.unwrap_or_else(|error| panic!("{url}: {error}"));
                    assert_eq!(endpoint.host_header, *host, "{url}");
                    assert_eq!(endpoint.base_path, *base_path, "{url}");
                    assert_eq!(endpoint.account_from_url.as_deref(), *account, "{url}");
                    assert_eq!(endpoint.tls.is_some(), url.starts_with("https"), "{url}");
                }
                Err(()) => assert!(parsed.is_err(), "{url} should be refused"),
            }
        }
    }

    #[test]
    fn host_style_account_table() {
        assert_eq!(
            host_style_account("acct.queue.core.windows.net").as_deref(),
            Some("acct")
        );
        assert_eq!(host_style_account("127.0.0.1"), None);
        assert_eq!(host_style_account("localhost"), None);
        assert_eq!(host_style_account("[::1]"), None);
    }

    #[test]
    fn connection_strings() {
        let development = ConnectionString::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(
            development.queue_endpoint().as_deref(),
            Some(DEVELOPMENT_ENDPOINT)
        );
        let explicit = ConnectionString::parse(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;\
             AccountKey=a2V5;QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;",
        )
        .unwrap();
        assert_eq!(explicit.key.as_deref(), Some("a2V5"));
        assert_eq!(
            explicit.queue_endpoint().as_deref(),
            Some(DEVELOPMENT_ENDPOINT)
        );
        let cloud = ConnectionString::parse("AccountName=acct;AccountKey=a2V5=;").unwrap();
        assert_eq!(cloud.key.as_deref(), Some("a2V5="));
        assert_eq!(
            cloud.queue_endpoint().as_deref(),
            Some("https://acct.queue.core.windows.net")
        );
        assert!(ConnectionString::parse("AccountName").is_err());
    }

    #[test]
    fn resolution_precedence() {
        let (endpoint, credentials) = resolve(&TargetArguments::default()).unwrap();
        assert_eq!(endpoint.base_path, "/devstoreaccount1");
        assert!(matches!(
            credentials,
            Credentials::SharedKey { ref account, .. } if account == DEVELOPMENT_ACCOUNT_NAME
        ));

        let sas = resolve(&TargetArguments {
            sas: Some("?sv=2026-10-06&sig=abc".to_string()),
            ..TargetArguments::default()
        })
        .unwrap();
        assert!(
            matches!(sas.1, Credentials::Sas { ref token } if token == "sv=2026-10-06&sig=abc")
        );

        let other_account = resolve(&TargetArguments {
            endpoint: Some("http://127.0.0.1:10001/otheraccount".to_string()),
            ..TargetArguments::default()
        });
        assert!(
            other_account.is_err(),
            "no key for a non-development account"
        );

        let from_connection = resolve(&TargetArguments {
            connection_string: Some(format!(
                "AccountName=acct1;AccountKey={DEVELOPMENT_ACCOUNT_KEY};\
                 QueueEndpoint=http://127.0.0.1:10001/acct1"
            )),
            ..TargetArguments::default()
        })
        .unwrap();
        assert_eq!(from_connection.0.base_path, "/acct1");

        let insecure = TlsArguments {
            ca: None,
            insecure: true,
        };
        let bearer = resolve(&TargetArguments {
            endpoint: Some("https://127.0.0.1:10443/devstoreaccount1".to_string()),
            bearer: Some(UNSIGNED_BEARER.to_string()),
            tls: insecure.clone(),
            ..TargetArguments::default()
        })
        .unwrap();
        let Credentials::Bearer { token } = bearer.1 else {
            panic!("{:?}", bearer.1);
        };
        assert!(
            azq::auth::bearer::verify(&token, "devstoreaccount1", None, azq::time::unix_ms())
                .is_ok()
        );
        assert!(
            resolve(&TargetArguments {
                bearer: Some(UNSIGNED_BEARER.to_string()),
                ..TargetArguments::default()
            })
            .is_err(),
            "a bearer token over http"
        );
        let missing_ca = resolve(&TargetArguments {
            endpoint: Some("https://127.0.0.1:10443/devstoreaccount1".to_string()),
            tls: TlsArguments {
                ca: Some("/nonexistent/ca.pem".to_string()),
                insecure: false,
            },
            ..TargetArguments::default()
        });
        assert!(missing_ca.unwrap_err().contains("/nonexistent/ca.pem"));
        assert!(matches!(
            from_connection.1,
            Credentials::SharedKey { ref account, .. } if account == "acct1"
        ));
    }
}
