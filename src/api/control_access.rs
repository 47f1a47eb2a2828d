//! Who may use azq's control plane (`/_azq/`), decided before any of its endpoints is planned:
//!
//! - **Host**: every `/_azq/` endpoint but health, metrics and the certificate needs a
//!   well-formed `Host` and answers only one the server answers to: an IP literal, `localhost`
//!   or a name under `.localhost`, or a name given by `--control-hosts` (and
//!   `AZQ_CONTROL_HOSTS`). A DNS-rebinding page reaches the server under its own name, so it
//!   gets 403.
//! - **Cross-site writes**: a request that changes something (any method but GET and HEAD)
//!   with an `Origin` other than the server's own, or `Sec-Fetch-Site` other than
//!   `same-origin` or `none`, is 403; a POST must also be a request no page can send blind: a
//!   JSON `Content-Type` or an `X-Azq-Request` header (either needs a CORS preflight, which
//!   `/_azq/` never grants).
//! - **Credentials**: an account whose keys include the public development key is open to
//!   everyone, as before; an account with only private keys is shown and acted on only for a
//!   caller who proves its key: a SharedKey signature (not SharedKeyLite, which leaves the
//!   query unsigned), an account SAS with every permission the endpoint's queue operations
//!   need, or the console's session (`POST /_azq/session` with the account and key, answered
//!   with an `HttpOnly`, `SameSite=Strict` cookie bound to that account, which expires). One
//!   account's proof shows that account and the open ones, never another private one. Bearer
//!   tokens are refused here: `--oauth basic` checks no signature, so anyone can make one.
//!
//! A session is `ACCOUNT.EXPIRY_MS.MAC`, the MAC an HMAC-SHA256 of the account and expiry under
//! a key every shard shares, made at start: it holds on any shard, dies with the process, and
//! cannot be made or stretched without that key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64_URL;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use std::cell::RefCell;
use std::net::IpAddr;

use crate::auth::accounts::constant_time_equal;
use crate::auth::{Access, AuthScheme, Authenticator, RequestContext, SigningKey};
use crate::http::{KnownHeader, Method, Query, Request};

use super::step::AdminAnswer;

/// The cookie that carries a console session.
pub const SESSION_COOKIE: &str = "azq_session";

/// What a session's MAC signs before the account and expiry: keeps its MACs apart from any
/// other use of the key.
const SESSION_MAC_CONTEXT: &[u8] = b"azq console session v1\n";

/// The names a control-plane request's `Host` may carry besides IP literals and loopback names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlHosts {
    /// Any name (`--control-hosts '*'`): DNS rebinding is then not defended.
    Any,
    /// These names, lowercase.
    Names(Vec<String>),
}

impl ControlHosts {
    /// Parses `--control-hosts`' list: names separated by commas, or `*` for any.
    pub fn parse(text: &str) -> Result<ControlHosts, String> {
        if text.trim() == "*" {
            return Ok(ControlHosts::Any);
        }
        let names: Vec<String> = text
            .split(',')
            .map(|name| name.trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        let valid = |name: &String| {
            name.bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'.')
        };
        if let Some(bad) = names.iter().find(|name| !valid(name)) {
            return Err(format!(
                "{bad:?} is not a host name (letters, digits, '-', '.')"
            ));
        }
        Ok(ControlHosts::Names(names))
    }

    /// These names and `other`'s.
    pub fn merged(self, other: ControlHosts) -> ControlHosts {
        match (self, other) {
            (ControlHosts::Names(mut names), ControlHosts::Names(more)) => {
                for name in more {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                ControlHosts::Names(names)
            }
            _ => ControlHosts::Any,
        }
    }

    /// How many names it lists (`Any`: none), for `CONTROL_HOST_NAMES_MAX`.
    pub fn name_count(&self) -> usize {
        match self {
            ControlHosts::Any => 0,
            ControlHosts::Names(names) => names.len(),
        }
    }

    /// Whether a request with `Host: host` may reach the control plane: a well-formed
    /// `name[:port]` or `[IPv6][:port]` whose name is an IP literal, a loopback name or listed.
    fn allow(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else {
            return false;
        };
        if name.starts_with('[') {
            return true;
        }
        let name = name.to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        let well_formed = !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
            });
        if !well_formed {
            return false;
        }
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if name.parse::<std::net::Ipv4Addr>().is_ok() {
            return true;
        }
        match self {
            ControlHosts::Any => true,
            ControlHosts::Names(names) => names.iter().any(|allowed| allowed == name),
        }
    }
}

/// The name in a `Host` value without its port (`localhost:10001` → `localhost`), or the
/// bracketed IPv6 literal (`[::1]:10001` → `[::1]`); `None` when the value is neither (a
/// port that is not digits, anything after `]` but a port, brackets around no IPv6 address).
fn host_name(host: &str) -> Option<&str> {
    let port_ok = |port: &str| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    if host.starts_with('[') {
        let end = host.find(']')?;
        let (literal, rest) = host.split_at(end + 1);
        literal[1..literal.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .ok()?;
        return match rest {
            "" => Some(literal),
            _ => rest
                .strip_prefix(':')
                .filter(|port| port_ok(port))
                .map(|_| literal),
        };
    }
    match host.split_once(':') {
        None => Some(host),
        Some((name, port)) if port_ok(port) => Some(name),
        Some(_) => None,
    }
}

/// The control plane's rules for one server: the same on every shard.
#[derive(Clone, Debug)]
pub struct ControlAccess {
    /// The accounts whose keys include the public development key, open to everyone.
    open: Vec<String>,
    /// Every account's name.
    all: Vec<String>,
    /// The key sessions are signed with: random, made once per process.
    session_key: [u8; 32],
    /// How long a session lasts, ms (`--session-lifetime`).
    session_lifetime_ms: u64,
    /// The names `Host` may carry.
    hosts: ControlHosts,
}

/// Which accounts a control-plane caller may see and act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every account.
    All,
    /// Only these (the open ones and the one the caller proved).
    Only(Vec<String>),
}

impl Scope {
    /// Whether the caller may see and act on `account`.
    pub fn allows(&self, account: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(accounts) => accounts.iter().any(|allowed| allowed == account),
        }
    }

    /// The accounts allowed, or `None` for every account.
    pub fn accounts(&self) -> Option<&[String]> {
        match self {
            Scope::All => None,
            Scope::Only(accounts) => Some(accounts),
        }
    }
}

/// A control-plane caller: who it proved to be and what it may therefore see.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The accounts it may see and act on.
    pub scope: Scope,
    /// The account whose key it proved, if any.
    pub account: Option<String>,
    /// Its session's expiry, ms, when it came with one.
    pub session_expiry_ms: Option<u64>,
}

/// What `POST /_azq/session` reads.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    account: String,
    key: String,
}

impl ControlAccess {
    /// The rules for a server with `accounts`; `session_key` must be random and the same on
    /// every shard.
    pub fn new(
        authenticator: &Authenticator,
        session_key: [u8; 32],
        session_lifetime_ms: u64,
        hosts: ControlHosts,
    ) -> ControlAccess {
        let accounts = authenticator.accounts();
        let all = accounts.names();
        let open = all
            .iter()
            .filter(|name| {
                accounts
                    .get(name)
                    .is_some_and(|account| account.has_public_key())
            })
            .cloned()
            .collect();
        ControlAccess {
            open,
            all,
            session_key,
            session_lifetime_ms,
            hosts,
        }
    }

    /// The accounts open without credentials (their key is the public development key).
    pub fn open_accounts(&self) -> &[String] {
        &self.open
    }

    /// The accounts that need their key to be seen: the others.
    pub fn private_accounts(&self) -> Vec<String> {
        let open = &self.open;
        self.all
            .iter()
            .filter(|name| !open.contains(name))
            .cloned()
            .collect()
    }

    /// The scope of a caller who proved `account` (or nothing).
    fn scope(&self, account: Option<&str>) -> Scope {
        let mut allowed = self.open.clone();
        if let Some(account) = account {
            if !allowed.iter().any(|open| open == account) {
                allowed.push(account.to_string());
            }
        }
        if self.all.iter().all(|name| allowed.contains(name)) {
            Scope::All
        } else {
            Scope::Only(allowed)
        }
    }

    /// A session for `account` from `now_ms`: the cookie's value and its expiry.
    pub fn session_token(&self, account: &str, now_ms: u64) -> (String, u64) {
        let expiry_ms = now_ms + self.session_lifetime_ms;
        let mac = self.session_mac(account, expiry_ms);
        (
            format!("{account}.{expiry_ms}.{}", BASE64_URL.encode(mac)),
            expiry_ms,
        )
    }

    fn session_mac(&self, account: &str, expiry_ms: u64) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.session_key)
            .expect("HMAC takes a key of any length");
        mac.update(SESSION_MAC_CONTEXT);
        mac.update(account.as_bytes());
        mac.update(b"\n");
        mac.update(expiry_ms.to_string().as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The account and expiry of a session cookie's value, if it is one this server made, for an
    /// account it has, not expired at `now_ms`.
    pub fn verify_session(&self, token: &str, now_ms: u64) -> Option<(String, u64)> {
        let mut parts = token.split('.');
        let (account, expiry, mac) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !self.all.iter().any(|name| name == account) {
            return None;
        }
        if expiry.starts_with('0') || !expiry.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let expiry_ms: u64 = expiry.parse().ok()?;
        if expiry_ms <= now_ms {
            return None;
        }
        let given: [u8; 32] = BASE64_URL.decode(mac).ok()?.try_into().ok()?;
        constant_time_equal(&self.session_mac(account, expiry_ms), &given)
            .then(|| (account.to_string(), expiry_ms))
    }

    /// `Set-Cookie` for a session `token` good for `lifetime_ms` (0: removes the cookie).
    pub fn cookie(&self, token: &str, lifetime_ms: u64, secure: bool) -> String {
        format!(
            "{SESSION_COOKIE}={token}; Path=/_azq/; Max-Age={}; HttpOnly; SameSite=Strict{}",
            lifetime_ms / 1000,
            if secure { "; Secure" } else { "" }
        )
    }
}

/// A 403 answer with `why`.
fn forbidden(why: &str) -> AdminAnswer {
    AdminAnswer::error(403, why)
}

/// Whether `/_azq/` `path` is one of the endpoints machines reach by any name (health checks,
/// Prometheus, a client fetching the certificate): no `Host` rule, no credentials.
pub fn is_machine_endpoint(path: &[u8]) -> bool {
    matches!(path, b"/_azq/health" | b"/_azq/metrics" | b"/_azq/cert.pem")
}

impl ControlAccess {
    /// The `Host` and cross-site rules for a request to `/_azq/` (not a machine endpoint) on a
    /// server that serves HTTPS when `secure`: `Err` is the 403 to answer.
    pub fn check_browser_rules(&self, request: &Request, secure: bool) -> Result<(), AdminAnswer> {
        let control = self;
        let Some(host) = request.known_str(KnownHeader::Host) else {
            return Err(forbidden(
                "/_azq/ needs a Host header (UTF-8): the name the server answers to",
            ));
        };
        if !control.hosts.allow(host) {
            return Err(forbidden(&format!(
                "Host {host:?} is not a name this server answers to on /_azq/ (DNS \
                 rebinding?): use localhost or an IP address, or start azq with \
                 --control-hosts NAME"
            )));
        }
        if matches!(request.method, Method::Get | Method::Head) {
            return Ok(());
        }
        if let Some(site) = request.header_str("sec-fetch-site") {
            if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
                return Err(forbidden("cross-site request refused (Sec-Fetch-Site)"));
            }
        }
        if let Some(origin) = request.known(KnownHeader::Origin) {
            if !same_origin(origin, request.known_str(KnownHeader::Host), secure) {
                return Err(forbidden(&format!(
                    "cross-site request refused: Origin {:?} is not this server",
                    String::from_utf8_lossy(origin)
                )));
            }
        }
        if request.method == Method::Post {
            let json = request.header_str("content-type").is_some_and(|value| {
                let media = value.split(';').next().unwrap_or_default().trim();
                media.eq_ignore_ascii_case("application/json")
            });
            if !json && request.header("x-azq-request").is_none() {
                return Err(forbidden(
                    "a POST to /_azq/ needs Content-Type: application/json or an X-Azq-Request \
                     header (so that no web page can send it blind)",
                ));
            }
        }
        Ok(())
    }

    /// Who sent a control-plane request: a session cookie, a SharedKey signature, or an
    /// account SAS for `sas_account` (the account the URL names) that allows every one of
    /// `accesses` (an endpoint that shows or does more than one queue operation needs each
    /// one's permission), checked by the shard's `authenticator` on a server that serves HTTPS
    /// when `secure`. SharedKeyLite is refused: it does not sign the query, which says what an
    /// endpoint does. A credential that does not hold is 403, never ignored; none at all is an
    /// anonymous caller.
    #[allow(clippy::too_many_arguments)]
    pub fn caller(
        &self,
        authenticator: &RefCell<Authenticator>,
        secure: bool,
        request: &Request,
        sas_account: Option<&str>,
        accesses: &[Access],
        now_ms: u64,
        peer: IpAddr,
    ) -> Result<Caller, AdminAnswer> {
        let control = self;
        let Some(query) = Query::parse(request.query()) else {
            return Err(AdminAnswer::error(
                400,
                "the query is not percent-encoded UTF-8",
            ));
        };
        let context = |account_name| RequestContext {
            account_name,
            secondary: false,
            queue_name: None,
            now_ms,
            client_ip: peer,
            secure_transport: secure,
        };
        let proved = |account: String, session_expiry_ms| Caller {
            scope: control.scope(Some(&account)),
            account: Some(account),
            session_expiry_ms,
        };
        if let Some(authorization) = request.known_str(KnownHeader::Authorization) {
            let (scheme, rest) = authorization.trim().split_once(' ').unwrap_or_default();
            if scheme != "SharedKey" {
                return Err(forbidden(
                    "/_azq/ takes SharedKey, an account SAS or a console session (not \
                     SharedKeyLite, which does not sign the query, nor bearer tokens, whose \
                     signatures are not checked)",
                ));
            }
            let account = rest.split(':').next().unwrap_or_default().trim();
            let verified = authenticator.borrow_mut().authenticate(
                request,
                &query,
                &context(account),
                Access::LIST_QUEUES,
                &|_| None,
            );
            return match verified {
                Ok(_) => Ok(proved(account.to_string(), None)),
                Err(failure) => Err(forbidden(&format!("{account}: {failure}"))),
            };
        }
        if query.get("sig").is_some() {
            let Some(account) = sas_account.filter(|name| control.all.iter().any(|a| a == name))
            else {
                return Err(forbidden(
                    "a SAS on /_azq/ needs the account named: ?account=NAME, or in the path",
                ));
            };
            for &access in accesses {
                let verified = authenticator.borrow_mut().authenticate(
                    request,
                    &query,
                    &context(account),
                    access,
                    &|_| None,
                );
                match verified {
                    Ok(principal) if principal.scheme == AuthScheme::AccountSas => {}
                    Ok(_) => {
                        return Err(forbidden(
                            "only an account SAS (ss, srt) is accepted on /_azq/",
                        ))
                    }
                    Err(failure) => return Err(forbidden(&format!("{account}: {failure}"))),
                }
            }
            return Ok(proved(account.to_string(), None));
        }
        if let Some(token) = session_cookie(request) {
            if let Some((account, expiry_ms)) = control.verify_session(token, now_ms) {
                return Ok(proved(account, Some(expiry_ms)));
            }
        }
        Ok(Caller {
            scope: control.scope(None),
            account: None,
            session_expiry_ms: None,
        })
    }

    /// The answer to `/_azq/session`: `GET` says who the caller is and which accounts need a
    /// sign-in (and whether `admin` actions are on); `POST` signs in (JSON `{"account",
    /// "key"}`, checked against `authenticator`'s accounts) and sets the session cookie
    /// (`Secure` when `secure`); `DELETE` signs out (removes the cookie).
    pub fn session(
        &self,
        authenticator: &Authenticator,
        (secure, admin): (bool, bool),
        request: &Request,
        caller: &Caller,
        now_ms: u64,
    ) -> AdminAnswer {
        let control = self;
        match request.method {
            Method::Get | Method::Head => {
                let json = serde_json::json!({
                    "account": caller.account,
                    "expires_ms": caller.session_expiry_ms,
                    "open_accounts": control.open,
                    "sign_in_required": control.open.len() < control.all.len(),
                    "admin": admin,
                });
                AdminAnswer::json(200, json.to_string())
            }
            Method::Post => {
                let Ok(sign_in) = serde_json::from_slice::<SignIn>(&request.body) else {
                    return AdminAnswer::error(400, "expected {\"account\": ..., \"key\": ...}");
                };
                let proved = SigningKey::from_base64(&sign_in.key)
                    .ok()
                    .zip(authenticator.accounts().get(&sign_in.account))
                    .is_some_and(|(key, account)| account.has_key(&key));
                if !proved {
                    return forbidden("wrong account name or key");
                }
                let (token, expiry_ms) = control.session_token(&sign_in.account, now_ms);
                let mut answer = AdminAnswer::json(
                    200,
                    serde_json::json!({"account": sign_in.account, "expires_ms": expiry_ms})
                        .to_string(),
                );
                let cookie = control.cookie(&token, control.session_lifetime_ms, secure);
                answer.headers.push(("Set-Cookie", cookie));
                answer
                    .headers
                    .push(("Cache-Control", "no-store".to_string()));
                answer
            }
            Method::Delete => {
                let mut answer = AdminAnswer::json(200, "{\"account\":null}".to_string());
                answer
                    .headers
                    .push(("Set-Cookie", control.cookie("", 0, secure)));
                answer
            }
            _ => AdminAnswer::error(405, "GET, POST or DELETE"),
        }
    }
}

/// Whether `origin` is this server as the client addressed it (`Host`), over HTTPS when
/// `secure`.
fn same_origin(origin: &[u8], host: Option<&str>, secure: bool) -> bool {
    let (Ok(origin), Some(host)) = (std::str::from_utf8(origin), host) else {
        return false;
    };
    let scheme = if secure { "https://" } else { "http://" };
    let Some(authority) = origin.strip_prefix(scheme) else {
        return false;
    };
    let default_port = if secure { ":443" } else { ":80" };
    let normal = |authority: &str| {
        let authority = authority.to_ascii_lowercase();
        match authority.strip_suffix(default_port) {
            Some(bare) => bare.to_string(),
            None => authority,
        }
    };
    normal(authority) == normal(host.trim())
}

/// The session cookie's value in `request`, if it carries one.
fn session_cookie(request: &Request) -> Option<&str> {
    request
        .headers()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"cookie"))
        .filter_map(|(_, value)| std::str::from_utf8(value).ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Accounts, DEVELOPMENT_ACCOUNT_KEY};

    const PRIVATE_KEY: &str = "cHJpdmF0ZSBrZXkgb2YgdGhlIHRlc3QgYWNjb3VudCwgMzIgYnl0ZXM=";

    fn access(accounts: &[(&str, &str)]) -> ControlAccess {
        let accounts: Vec<(String, Vec<String>)> = accounts
            .iter()
            .map(|(name, key)| (name.to_string(), vec![key.to_string()]))
            .collect();
        let authenticator = Authenticator::new(Accounts::new(&accounts).unwrap());
        ControlAccess::new(
            &authenticator,
            [7; 32],
            60_000,
            ControlHosts::parse("azurite").unwrap(),
        )
    }

    #[test]
    fn accounts_with_the_development_key_are_open() {
        let both = access(&[
            ("devstoreaccount1", DEVELOPMENT_ACCOUNT_KEY),
            ("secretacct", PRIVATE_KEY),
        ]);
        assert_eq!(both.open_accounts(), ["devstoreaccount1"]);
        assert_eq!(both.private_accounts(), ["secretacct"]);
        assert_eq!(
            both.scope(None),
            Scope::Only(vec!["devstoreaccount1".into()])
        );
        assert_eq!(both.scope(Some("secretacct")), Scope::All);
        // The name does not make an account open: its key does.
        let renamed = access(&[("devstoreaccount1", PRIVATE_KEY), ("other", PRIVATE_KEY)]);
        assert!(renamed.open_accounts().is_empty());
        assert_eq!(
            renamed.scope(Some("other")),
            Scope::Only(vec!["other".into()])
        );
        let development = access(&[("devstoreaccount1", DEVELOPMENT_ACCOUNT_KEY)]);
        assert_eq!(development.scope(None), Scope::All);
    }

    #[test]
    fn sessions_hold_until_they_expire_and_cannot_be_altered() {
        let control = access(&[("secretacct", PRIVATE_KEY), ("other", PRIVATE_KEY)]);
        let (token, expiry_ms) = control.session_token("secretacct", 1_000);
        assert_eq!(expiry_ms, 61_000);
        assert_eq!(
            control.verify_session(&token, 60_999),
            Some(("secretacct".to_string(), 61_000))
        );
        assert_eq!(control.verify_session(&token, 61_000), None, "expired");
        let mac = token.rsplit('.').next().unwrap();
        for forged in [
            format!("other.61000.{mac}"),
            format!("secretacct.99999999.{mac}"),
            format!("secretacct.061000.{mac}"),
            format!("secretacct.+61000.{mac}"),
            format!("nobody.61000.{mac}"),
            format!("secretacct.61000.{}", &mac[1..]),
            format!("secretacct.61000.{mac}A"),
            format!("{token}.x"),
            "secretacct.61000".to_string(),
            String::new(),
        ] {
            assert_eq!(control.verify_session(&forged, 2_000), None, "{forged}");
        }
        // Every single-character change of the MAC is refused.
        for index in 0..mac.len() {
            let mut changed = mac.as_bytes().to_vec();
            changed[index] = if changed[index] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(changed).unwrap();
            let forged = format!("secretacct.61000.{changed}");
            assert_eq!(control.verify_session(&forged, 2_000), None, "{forged}");
        }
        // Another process's key makes other MACs.
        let mut elsewhere = control.clone();
        elsewhere.session_key = [8; 32];
        assert_eq!(elsewhere.verify_session(&token, 2_000), None);
    }

    #[test]
    fn host_rule_table() {
        let names = ControlHosts::parse("azurite, Azq.Internal.").unwrap();
        for allowed in [
            "localhost",
            "LOCALHOST:10001",
            "localhost.:10001",
            "devstoreaccount1.localhost:10001",
            "127.0.0.1",
            "127.0.0.1:10001",
            "10.1.2.3:80",
            "[::1]:10001",
            "[::1]",
            "azurite:10001",
            "azq.internal",
        ] {
            assert!(names.allow(allowed), "{allowed}");
        }
        for refused in [
            "evil.example",
            "evil.example:10001",
            "localhost.evil.example",
            "127.0.0.1.nip.io:10001",
            "azurite.evil.example",
            "",
            "[::1]evil.example",
            "evil.example:.localhost",
            "evil.example/.localhost",
            "evil.example#.localhost",
            "evil.example\\.localhost",
            "localhost..",
            " localhost",
            "localhost:",
            "localhost:80x",
            "[evil.example]:80",
            "2130706433",
            "127.1",
        ] {
            assert!(!names.allow(refused), "{refused}");
        }
        assert!(ControlHosts::Any.allow("evil.example"));
        assert!(ControlHosts::parse("a b").is_err());
        assert_eq!(ControlHosts::parse("*").unwrap(), ControlHosts::Any);
        assert_eq!(
            names.merged(ControlHosts::parse("azurite,x").unwrap()),
            ControlHosts::Names(vec!["azurite".into(), "azq.internal".into(), "x".into()])
        );
    }
}
