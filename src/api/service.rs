//! `Service`: the API of one shard, as built at start-up: its authenticator (with its SAS cache),
//! the routing settings, what `/_azq/health` and `/_azq/cert.pem` report. Planning
//! (`plan.rs`) and answering (`mod.rs`) are its methods elsewhere in `api/`; this file only
//! holds the state they share, so every file that plans or answers can name it.

use std::cell::RefCell;
use std::sync::Arc;

use crate::auth::{Accounts, Authenticator, OAuthLevel};
use crate::lifecycle::Lifecycle;
use crate::limits::CONSOLE_SESSION_LIFETIME_MS_DEFAULT;

use std::net::IpAddr;

use crate::auth::Access;
use crate::http::Request;

use super::control_access::{Caller, ControlAccess, ControlHosts};
use super::step::AdminAnswer;

/// What `GET /_azq/health` reports besides the shard count.
#[derive(Clone, Debug)]
pub struct Health {
    /// Whether every shard serves, or the server is stopping.
    pub lifecycle: Arc<Lifecycle>,
    /// The backend the shards run on (`io_uring` or `portable`).
    pub backend: &'static str,
}

/// The API of one shard: its authenticator (with its SAS cache) and the routing settings.
pub struct Service {
    /// Per-shard and only borrowed inside `plan`, which never waits, so the borrow never spans
    /// another request.
    pub(super) authenticator: RefCell<Authenticator>,
    /// The accounts, as the authenticator has them: Get User Delegation Key derives its keys
    /// from theirs.
    pub(super) accounts: Accounts,
    pub(super) shards: usize,
    pub(super) host_style_enabled: bool,
    /// `host:port` used in List Queues' ServiceEndpoint when a request has no Host header.
    pub(super) default_authority: String,
    pub(super) health: Health,
    /// Whether requests arrive over TLS (the server serves HTTPS), for a SAS `spr` and bearer
    /// tokens.
    pub(super) secure_transport: bool,
    /// The server's certificate chain in PEM, served at `GET /_azq/cert.pem` (HTTPS only).
    pub(super) certificate_pem: Option<Arc<str>>,
    /// `--admin` (or `--faults-api`): `/_azq/faults`, `/_azq/reset` and the console's actions
    /// answer (else 403 with the reason).
    pub(super) admin: bool,
    /// Who may use `/_azq/`: the open accounts, the session key, the `Host` names.
    pub(super) control: ControlAccess,
}

impl Service {
    /// A service over `accounts` for a server of `shards` shards.
    pub fn new(
        accounts: Accounts,
        shards: usize,
        host_style_enabled: bool,
        default_authority: String,
        health: Health,
    ) -> Self {
        assert!(shards > 0);
        let authenticator = Authenticator::new(accounts.clone());
        // A fixed session key until `with_control` gives the server's: a service that is never
        // given one (the api layer's tests) signs sessions nobody else can check anyway.
        let control = ControlAccess::new(
            &authenticator,
            [0; 32],
            CONSOLE_SESSION_LIFETIME_MS_DEFAULT,
            ControlHosts::Names(Vec::new()),
        );
        Service {
            authenticator: RefCell::new(authenticator),
            control,
            accounts,
            shards,
            host_style_enabled,
            default_authority,
            health,
            secure_transport: false,
            certificate_pem: None,
            admin: false,
        }
    }

    /// The same service for a server that serves HTTPS with the certificate `certificate_pem`.
    pub fn with_https(mut self, certificate_pem: Arc<str>) -> Self {
        self.secure_transport = true;
        self.certificate_pem = Some(certificate_pem);
        self
    }

    /// The same service accepting bearer tokens when `oauth` says so (`--oauth basic`). Over
    /// plain HTTP every bearer token is still refused, per request, as Azure refuses them.
    pub fn with_oauth(mut self, oauth: Option<OAuthLevel>) -> Self {
        match oauth {
            Some(OAuthLevel::Basic) => self.authenticator.get_mut().enable_bearer(),
            None => {}
        }
        self
    }

    /// The same service accepting SharedKey requests whatever their date when `skipped`
    /// (`--skipRequestDateCheck`).
    pub fn with_request_date_check_skipped(mut self, skipped: bool) -> Self {
        if skipped {
            self.authenticator.get_mut().skip_request_date_check();
        }
        self
    }

    /// The same service with the admin endpoints answering when `admin` (`--admin`).
    pub fn with_admin(mut self, admin: bool) -> Self {
        self.admin = admin;
        self
    }

    /// The same service with the control plane's session key (random, the same on every shard),
    /// session lifetime and `Host` names (`--session-lifetime`, `--control-hosts`).
    pub fn with_control(
        mut self,
        session_key: [u8; 32],
        session_lifetime_ms: u64,
        hosts: ControlHosts,
    ) -> Self {
        self.control = ControlAccess::new(
            self.authenticator.get_mut(),
            session_key,
            session_lifetime_ms,
            hosts,
        );
        self
    }

    /// The accounts `/_azq/` shows without credentials, and those it shows only to a caller
    /// with their key.
    pub fn control_accounts(&self) -> (Vec<String>, Vec<String>) {
        (
            self.control.open_accounts().to_vec(),
            self.control.private_accounts(),
        )
    }

    /// The `Host` and cross-site rules of `/_azq/` (`ControlAccess::check_browser_rules`).
    pub(super) fn check_browser_rules(&self, request: &Request) -> Result<(), AdminAnswer> {
        self.control
            .check_browser_rules(request, self.secure_transport)
    }

    /// Who sent a control-plane request (`ControlAccess::caller`).
    pub(super) fn control_caller(
        &self,
        request: &Request,
        sas_account: Option<&str>,
        accesses: &[Access],
        now_ms: u64,
        peer: IpAddr,
    ) -> Result<Caller, AdminAnswer> {
        self.control.caller(
            &self.authenticator,
            self.secure_transport,
            request,
            sas_account,
            accesses,
            now_ms,
            peer,
        )
    }

    /// The answer to `/_azq/session` (`ControlAccess::session`).
    pub(super) fn session(&self, request: &Request, caller: &Caller, now_ms: u64) -> AdminAnswer {
        self.control.session(
            &self.authenticator.borrow(),
            (self.secure_transport, self.admin),
            request,
            caller,
            now_ms,
        )
    }

    /// Whether the admin endpoints answer (`--admin`).
    pub fn admin(&self) -> bool {
        self.admin
    }

    /// The server's accounts, by name.
    pub fn account_names(&self) -> Vec<String> {
        self.authenticator.borrow().accounts().names()
    }

    /// Whether `name` is one of the accounts this service serves.
    pub(super) fn is_account(&self, name: &str) -> bool {
        self.accounts.get(name).is_some()
    }
}
