//! Shared access signatures: reading the SAS fields of a query string, the strings-to-sign of an
//! account SAS (both layouts), a queue service SAS and a queue user delegation SAS, the checks
//! that follow a valid signature (time window, protocol, source address, service, resource type,
//! permission, stored access policy, the delegation key's life), the `Access` each operation
//! needs, and a bounded cache of verified signatures.
//!
//! Layouts, from "Create an account SAS", "Create a service SAS" and, for the user delegation
//! SAS, the SDKs that sign it (azure-storage-queue `_shared_access_signature.py`,
//! @azure/storage-queue `QueueSASSignatureValues.ts`, which agree):
//! - account SAS, `sv` >= 2020-12-06: `account\nsp\nss\nsrt\nst\nse\nsip\nspr\nsv\nses\n`;
//! - account SAS, `sv` 2015-04-05 up to 2020-12-06: the same without `ses` (still ending `\n`);
//! - queue service SAS, `sv` >= 2015-04-05: `sp\nst\nse\n/queue/account/queue\nsi\nsip\nspr\nsv`;
//! - queue user delegation SAS, `sv` >= 2025-07-05 (the layout with `skdutid` and `sduoid`):
//!   `sp\nst\nse\n/queue/account/queue\nskoid\nsktid\nskt\nske\nsks\nskv\nskdutid\nsduoid\n`
//!   `sip\nspr\nsv`, signed with the delegation key (`delegation.rs`), not the account key.
//!
//! A field the token does not carry signs as an empty line, exactly as one sent empty; azq
//! therefore treats an empty field as absent throughout.

use std::net::IpAddr;

use ahash::AHashMap;

use super::accounts::Account;
use super::delegation::{
    self, KeyFields, SIGNED_SERVICE_QUEUE, USER_DELEGATION_SAS_VERSION_OLDEST,
};
use super::outcome::{
    decode_signature, AuthFailure, AuthScheme, Principal, RequestContext, TimeFrame,
};
use crate::http::Query;
use crate::limits::SAS_CACHE_KEY_BYTES_MAX;
use crate::time::parse_iso8601_ms;

/// The oldest `sv` azq verifies: account SAS appeared with it, and the queue service SAS has
/// had its current layout (with `sip` and `spr`) since.
pub const SAS_VERSION_OLDEST: &str = "2015-04-05";
/// The first `sv` whose account SAS signs `ses` (the encryption scope).
pub const SAS_VERSION_ENCRYPTION_SCOPE: &str = "2020-12-06";

/// The resource types of an account SAS `srt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceType {
    /// Account-level operations: service properties and stats, List Queues (`s`).
    Service,
    /// Operations on a queue itself: create, delete, metadata, ACL, clear (`c`).
    Container,
    /// Operations on messages (`o`).
    Object,
}

impl ResourceType {
    /// The `srt` letter that grants this resource type.
    pub fn letter(self) -> char {
        match self {
            ResourceType::Service => 's',
            ResourceType::Container => 'c',
            ResourceType::Object => 'o',
        }
    }
}

/// A set of lowercase letters, as in `sp`, `ss`, `srt` and an access policy's `Permission`.
/// Order and repetition do not matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PermissionSet {
    /// Bit `n` stands for the letter `'a' + n`.
    letters: u32,
}

impl PermissionSet {
    /// The set of the letters of a literal, for constants. Panics on anything but lowercase
    /// ASCII letters, which in a constant is a compile error.
    pub const fn from_letters(letters: &str) -> PermissionSet {
        let bytes = letters.as_bytes();
        let mut set = 0;
        let mut at = 0;
        while at < bytes.len() {
            assert!(bytes[at].is_ascii_lowercase(), "permission letters are a-z");
            set |= 1 << (bytes[at] - b'a');
            at += 1;
        }
        PermissionSet { letters: set }
    }

    /// The set of the letters of `text` (possibly empty); `None` if any character is not a
    /// lowercase ASCII letter.
    pub fn parse(text: &str) -> Option<PermissionSet> {
        let mut set = 0;
        for byte in text.bytes() {
            if !byte.is_ascii_lowercase() {
                return None;
            }
            set |= 1 << (byte - b'a');
        }
        Some(PermissionSet { letters: set })
    }

    /// Whether `letter` is in the set.
    pub fn contains(self, letter: char) -> bool {
        letter.is_ascii_lowercase() && self.letters & (1 << (letter as u32 - 'a' as u32)) != 0
    }

    /// Whether the two sets share a letter.
    pub fn intersects(self, other: PermissionSet) -> bool {
        self.letters & other.letters != 0
    }
}

/// What an operation needs from a SAS. The api layer passes one per operation; the associated
/// constants encode the contract's table. A SharedKey signature grants everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The `srt` letter an account SAS must carry.
    pub resource_type: ResourceType,
    /// An account SAS must carry at least one of these `sp` letters (Create Queue: `c` or `w`);
    /// empty when no account SAS may perform the operation (Get and Set Queue ACL).
    pub account_permissions: PermissionSet,
    /// The `sp` letter a queue service SAS must carry; `None` when no service SAS may perform
    /// the operation (queue management, account-level operations).
    pub service_permission: Option<char>,
    /// Only a bearer token may perform the operation: neither the account key nor any SAS
    /// (Get User Delegation Key: "Only authorization with Microsoft Entra ID is supported").
    pub bearer_only: bool,
    /// The service whose letter an account SAS's `ss` must carry: `q` for every queue
    /// operation, `b` and `t` for the probes the blob and table ports answer. It also picks the
    /// SharedKey layout: the table service signs its own.
    pub service: char,
}

impl Access {
    const fn new(
        resource_type: ResourceType,
        account_permissions: &str,
        service_permission: Option<char>,
    ) -> Access {
        Access {
            resource_type,
            account_permissions: PermissionSet::from_letters(account_permissions),
            service_permission,
            bearer_only: false,
            service: 'q',
        }
    }

    const fn on_service(self, service: char) -> Access {
        Access { service, ..self }
    }

    /// Get Service Properties: account SAS `s` + `r`.
    pub const GET_SERVICE_PROPERTIES: Access = Access::new(ResourceType::Service, "r", None);
    /// Set Service Properties: account SAS `s` + `w`.
    pub const SET_SERVICE_PROPERTIES: Access = Access::new(ResourceType::Service, "w", None);
    /// Get User Delegation Key: a bearer token only.
    pub const GET_USER_DELEGATION_KEY: Access = Access {
        bearer_only: true,
        ..Access::new(ResourceType::Service, "", None)
    };
    /// Get Service Stats: account SAS `s` + `r`.
    pub const GET_SERVICE_STATS: Access = Access::new(ResourceType::Service, "r", None);
    /// List Queues: account SAS `s` + `l`.
    pub const LIST_QUEUES: Access = Access::new(ResourceType::Service, "l", None);
    /// Create Queue: account SAS `c` + `c` or `w`.
    pub const CREATE_QUEUE: Access = Access::new(ResourceType::Container, "cw", None);
    /// Delete Queue: account SAS `c` + `d`.
    pub const DELETE_QUEUE: Access = Access::new(ResourceType::Container, "d", None);
    /// Get Metadata: account SAS `c` + `r`; service SAS `r`.
    pub const GET_QUEUE_METADATA: Access = Access::new(ResourceType::Container, "r", Some('r'));
    /// Set Metadata: account SAS `c` + `w`.
    pub const SET_QUEUE_METADATA: Access = Access::new(ResourceType::Container, "w", None);
    /// Get Queue ACL: no SAS of any kind. "Only the account owner may call this operation"
    /// (REST reference, Get Queue ACL), and the account SAS permission table ("Create an account
    /// SAS") lists no ACL operation: every SAS is `AuthorizationFailure`, the service's code for
    /// an operation no permission covers ("SAS error codes": "attempting to modify an access
    /// control list").
    pub const GET_QUEUE_ACL: Access = Access::new(ResourceType::Container, "", None);
    /// Set Queue ACL: no SAS of any kind, as Get Queue ACL.
    pub const SET_QUEUE_ACL: Access = Access::new(ResourceType::Container, "", None);
    /// Clear Messages: account SAS `c` + `d`.
    pub const CLEAR_MESSAGES: Access = Access::new(ResourceType::Container, "d", None);
    /// Put Message: account SAS `o` + `a`; service SAS `a`.
    pub const PUT_MESSAGE: Access = Access::new(ResourceType::Object, "a", Some('a'));
    /// Get Messages: account SAS `o` + `p`; service SAS `p`.
    pub const GET_MESSAGES: Access = Access::new(ResourceType::Object, "p", Some('p'));
    /// Peek Messages: account SAS `o` + `r`; service SAS `r`.
    pub const PEEK_MESSAGES: Access = Access::new(ResourceType::Object, "r", Some('r'));
    /// Update Message: account SAS `o` + `u`; service SAS `u`.
    pub const UPDATE_MESSAGE: Access = Access::new(ResourceType::Object, "u", Some('u'));
    /// Delete Message: account SAS `o` + `p`; service SAS `p`.
    pub const DELETE_MESSAGE: Access = Access::new(ResourceType::Object, "p", Some('p'));
    /// List Containers on the blob port (a readiness probe): account SAS `b`, `s` + `l`.
    pub const LIST_CONTAINERS: Access =
        Access::new(ResourceType::Service, "l", None).on_service('b');
    /// Get Blob Service Properties on the blob port: account SAS `b`, `s` + `r`.
    pub const GET_BLOB_SERVICE_PROPERTIES: Access =
        Access::new(ResourceType::Service, "r", None).on_service('b');
    /// Query Tables on the table port (a readiness probe): account SAS `t`, `c` + `l` (tables
    /// are the table service's containers; `l` lists them).
    pub const QUERY_TABLES: Access =
        Access::new(ResourceType::Container, "l", None).on_service('t');
}

/// A stored access policy of a queue (its ACL entry), as the api layer hands it over for a
/// service SAS with `si`. Times from `parse_iso8601_ms`, permissions from `PermissionSet::parse`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoredPolicy {
    /// `Start`, in ms since the Unix epoch; a SAS may set `st` only when this is `None`.
    pub start_ms: Option<u64>,
    /// `Expiry`, in ms since the Unix epoch; a SAS may set `se` only when this is `None`.
    pub expiry_ms: Option<u64>,
    /// `Permission`; a SAS may set `sp` only when this is `None`.
    pub permissions: Option<PermissionSet>,
}

/// The SAS fields of a query string, percent-decoded: exactly the values that were signed.
/// Empty fields are `None`. Fields are named as in Azure's documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SasFields<'q> {
    /// `sv`
    pub signed_version: Option<&'q str>,
    /// `ss`
    pub signed_services: Option<&'q str>,
    /// `srt`
    pub signed_resource_types: Option<&'q str>,
    /// `sp`
    pub signed_permissions: Option<&'q str>,
    /// `st`
    pub signed_start: Option<&'q str>,
    /// `se`
    pub signed_expiry: Option<&'q str>,
    /// `sip`
    pub signed_ip: Option<&'q str>,
    /// `spr`
    pub signed_protocol: Option<&'q str>,
    /// `ses`
    pub signed_encryption_scope: Option<&'q str>,
    /// `si`
    pub signed_identifier: Option<&'q str>,
    /// `skoid`: the object a user delegation key was issued to.
    pub signed_key_object_id: Option<&'q str>,
    /// `sktid`: that object's tenant.
    pub signed_key_tenant_id: Option<&'q str>,
    /// `skt`: the key's start.
    pub signed_key_start: Option<&'q str>,
    /// `ske`: the key's expiry.
    pub signed_key_expiry: Option<&'q str>,
    /// `sks`: the service the key was issued for.
    pub signed_key_service: Option<&'q str>,
    /// `skv`: the service version the key was issued with.
    pub signed_key_version: Option<&'q str>,
    /// `skdutid`: the tenant of the user the key delegates to.
    pub signed_key_delegated_user_tenant_id: Option<&'q str>,
    /// `sduoid`: the user who alone may use the SAS, with a token of their own.
    pub signed_delegated_user_object_id: Option<&'q str>,
    /// `sig`
    pub signature: Option<&'q str>,
}

impl SasFields<'_> {
    /// Whether any field of a user delegation SAS is present.
    fn has_delegation_field(&self) -> bool {
        [
            self.signed_key_object_id,
            self.signed_key_tenant_id,
            self.signed_key_start,
            self.signed_key_expiry,
            self.signed_key_service,
            self.signed_key_version,
            self.signed_key_delegated_user_tenant_id,
            self.signed_delegated_user_object_id,
        ]
        .iter()
        .any(Option::is_some)
    }
}

/// Which kind of SAS a query carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SasKind {
    /// Account SAS (the query has `ss` or `srt`), with its signed services and resource types.
    Account {
        /// `ss`: the services it covers; azq needs `q`.
        services: PermissionSet,
        /// `srt`: `s` service, `c` container (a queue), `o` object (its messages).
        resource_types: PermissionSet,
    },
    /// Queue service SAS (the query has `sig` but neither `ss` nor `srt`).
    Service,
    /// Queue user delegation SAS (a service SAS with the `sk…` fields of a user delegation key),
    /// with the key's validity.
    UserDelegation {
        /// `skt`, in ms since the Unix epoch.
        key_start_ms: u64,
        /// `ske`, in ms since the Unix epoch.
        key_expiry_ms: u64,
    },
}

/// An inclusive range of client addresses (`sip`: one address or `first-last`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpRange {
    first: IpAddr,
    last: IpAddr,
}

impl IpRange {
    /// Parses `address` or `first-last`; both ends of one family, `first <= last`.
    pub fn parse(text: &str) -> Option<IpRange> {
        let (first, last) = text.split_once('-').unwrap_or((text, text));
        let first = first.trim().parse::<IpAddr>().ok()?.to_canonical();
        let last = last.trim().parse::<IpAddr>().ok()?.to_canonical();
        let ordered = match (first, last) {
            (IpAddr::V4(first), IpAddr::V4(last)) => first <= last,
            (IpAddr::V6(first), IpAddr::V6(last)) => first <= last,
            _ => false,
        };
        ordered.then_some(IpRange { first, last })
    }

    /// Whether `address` lies in the range. An IPv4 client seen through an IPv4-mapped IPv6
    /// socket address counts as IPv4.
    pub fn contains(self, address: IpAddr) -> bool {
        match (self.first, self.last, address.to_canonical()) {
            (IpAddr::V4(first), IpAddr::V4(last), IpAddr::V4(address)) => {
                first <= address && address <= last
            }
            (IpAddr::V6(first), IpAddr::V6(last), IpAddr::V6(address)) => {
                first <= address && address <= last
            }
            _ => false,
        }
    }
}

/// The protocols a SAS allows (`spr`); both when absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllowedProtocols {
    /// Plain HTTP allowed: `spr` lists `http`, or there is no `spr`.
    pub http: bool,
    /// HTTPS allowed: `spr` lists `https`, or there is no `spr`.
    pub https: bool,
}

impl AllowedProtocols {
    /// Parses `https`, `https,http` (and the same in any order); `None` for anything else.
    pub fn parse(text: &str) -> Option<AllowedProtocols> {
        let mut allowed = AllowedProtocols {
            http: false,
            https: false,
        };
        for protocol in text.split(',') {
            match protocol.trim() {
                "http" => allowed.http = true,
                "https" => allowed.https = true,
                _ => return None,
            }
        }
        Some(allowed)
    }

    fn allows(self, secure_transport: bool) -> bool {
        if secure_transport {
            self.https
        } else {
            self.http
        }
    }
}

/// A SAS read from a query string and checked for form; not yet verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SasToken<'q> {
    /// Account or service SAS, which decides the string-to-sign and what is checked.
    pub kind: SasKind,
    /// The signed values, for the string-to-sign.
    pub fields: SasFields<'q>,
    /// The decoded `sig`.
    pub signature: [u8; 32],
    /// `st`, in ms since the Unix epoch; `None` when absent (then the policy's applies, if any).
    pub start_ms: Option<u64>,
    /// `se`, in ms since the Unix epoch; required, from the SAS or its stored policy.
    pub expiry_ms: Option<u64>,
    /// `sp`; required, from the SAS or its stored policy.
    pub permissions: Option<PermissionSet>,
    /// `sip`; `None` allows every client address.
    pub ip_range: Option<IpRange>,
    /// `spr`; both protocols when absent.
    pub protocols: AllowedProtocols,
}

/// Reads the SAS of a decoded query: `Ok(None)` when there is none (no `sig`, `ss` or `srt`).
/// Fails when a SAS field repeats or is unreadable, `sig` or `sv` is missing, or `sv` predates
/// every known layout. Unrelated parameters are skipped.
pub fn parse<'q>(query: &'q Query<'_>) -> Result<Option<SasToken<'q>>, AuthFailure> {
    let mut fields = SasFields::default();
    for (name, value) in query.pairs() {
        let (field_name, slot) = match name {
            "sv" => ("sv", &mut fields.signed_version),
            "ss" => ("ss", &mut fields.signed_services),
            "srt" => ("srt", &mut fields.signed_resource_types),
            "sp" => ("sp", &mut fields.signed_permissions),
            "st" => ("st", &mut fields.signed_start),
            "se" => ("se", &mut fields.signed_expiry),
            "sip" => ("sip", &mut fields.signed_ip),
            "spr" => ("spr", &mut fields.signed_protocol),
            "ses" => ("ses", &mut fields.signed_encryption_scope),
            "si" => ("si", &mut fields.signed_identifier),
            "sig" => ("sig", &mut fields.signature),
            "skoid" => ("skoid", &mut fields.signed_key_object_id),
            "sktid" => ("sktid", &mut fields.signed_key_tenant_id),
            "skt" => ("skt", &mut fields.signed_key_start),
            "ske" => ("ske", &mut fields.signed_key_expiry),
            "sks" => ("sks", &mut fields.signed_key_service),
            "skv" => ("skv", &mut fields.signed_key_version),
            "skdutid" => ("skdutid", &mut fields.signed_key_delegated_user_tenant_id),
            "sduoid" => ("sduoid", &mut fields.signed_delegated_user_object_id),
            _ => continue,
        };
        if value.is_empty() {
            continue;
        }
        if slot.is_some() {
            return Err(AuthFailure::MalformedSas(field_name));
        }
        *slot = Some(value);
    }
    let is_account_sas = fields.signed_services.is_some() || fields.signed_resource_types.is_some();
    if fields.signature.is_none() && !is_account_sas {
        return Ok(None);
    }

    // Some clients leave `+` unescaped in `sig`, which query decoding turns into a space; a
    // space is never base64, so reading it back as `+` is safe.
    let signature_text = fields
        .signature
        .ok_or(AuthFailure::MissingSasField("sig"))?;
    let signature = if signature_text.contains(' ') {
        decode_signature(&signature_text.replace(' ', "+"))
    } else {
        decode_signature(signature_text)
    }
    .ok_or(AuthFailure::MalformedSas("sig"))?;

    let version = fields
        .signed_version
        .ok_or(AuthFailure::MissingSasField("sv"))?;
    if !is_version(version) {
        return Err(AuthFailure::MalformedSas("sv"));
    }
    if version < SAS_VERSION_OLDEST {
        return Err(AuthFailure::UnsupportedSasVersion);
    }

    let kind = if is_account_sas {
        let letters = |field: Option<&str>, field_name| {
            field
                .and_then(PermissionSet::parse)
                .ok_or(AuthFailure::MalformedSas(field_name))
        };
        SasKind::Account {
            services: letters(fields.signed_services, "ss")?,
            resource_types: letters(fields.signed_resource_types, "srt")?,
        }
    } else if fields.has_delegation_field() {
        user_delegation_kind(&fields, version)?
    } else {
        SasKind::Service
    };
    let time = |field: Option<&str>, field_name| {
        field
            .map(|text| parse_iso8601_ms(text).ok_or(AuthFailure::MalformedSas(field_name)))
            .transpose()
    };
    let start_ms = time(fields.signed_start, "st")?;
    let expiry_ms = time(fields.signed_expiry, "se")?;
    let permissions = fields
        .signed_permissions
        .map(|text| PermissionSet::parse(text).ok_or(AuthFailure::MalformedSas("sp")))
        .transpose()?;
    let ip_range = fields
        .signed_ip
        .map(|text| IpRange::parse(text).ok_or(AuthFailure::MalformedSas("sip")))
        .transpose()?;
    let protocols = match fields.signed_protocol {
        Some(text) => AllowedProtocols::parse(text).ok_or(AuthFailure::MalformedSas("spr"))?,
        None => AllowedProtocols {
            http: true,
            https: true,
        },
    };
    Ok(Some(SasToken {
        kind,
        fields,
        signature,
        start_ms,
        expiry_ms,
        permissions,
        ip_range,
        protocols,
    }))
}

/// The kind of a SAS with user delegation fields: every field naming the key present and
/// readable, a version that has the queue user delegation SAS.
fn user_delegation_kind(fields: &SasFields<'_>, version: &str) -> Result<SasKind, AuthFailure> {
    for (field, field_name) in [
        (fields.signed_key_object_id, "skoid"),
        (fields.signed_key_tenant_id, "sktid"),
        (fields.signed_key_start, "skt"),
        (fields.signed_key_expiry, "ske"),
        (fields.signed_key_service, "sks"),
        (fields.signed_key_version, "skv"),
    ] {
        if field.is_none() {
            return Err(AuthFailure::MissingSasField(field_name));
        }
    }
    let key_time = |field: Option<&str>, field_name| {
        field
            .and_then(parse_iso8601_ms)
            .ok_or(AuthFailure::MalformedSas(field_name))
    };
    let key_start_ms = key_time(fields.signed_key_start, "skt")?;
    let key_expiry_ms = key_time(fields.signed_key_expiry, "ske")?;
    if version < USER_DELEGATION_SAS_VERSION_OLDEST {
        return Err(AuthFailure::UserDelegationSasVersion);
    }
    Ok(SasKind::UserDelegation {
        key_start_ms,
        key_expiry_ms,
    })
}

/// Appends the string-to-sign of `token` to `out`. `account_name` is the primary account;
/// `queue_name` the URL's queue, which a service SAS signs.
pub fn write_string_to_sign(
    token: &SasToken<'_>,
    account_name: &str,
    queue_name: Option<&str>,
    out: &mut Vec<u8>,
) -> Result<(), AuthFailure> {
    let fields = &token.fields;
    let line = |out: &mut Vec<u8>, value: Option<&str>| {
        out.extend_from_slice(value.unwrap_or_default().as_bytes());
        out.push(b'\n');
    };
    match token.kind {
        SasKind::Account { .. } => {
            line(out, Some(account_name));
            line(out, fields.signed_permissions);
            line(out, fields.signed_services);
            line(out, fields.signed_resource_types);
            line(out, fields.signed_start);
            line(out, fields.signed_expiry);
            line(out, fields.signed_ip);
            line(out, fields.signed_protocol);
            let version = fields.signed_version;
            line(out, version);
            if version.unwrap_or_default() >= SAS_VERSION_ENCRYPTION_SCOPE {
                line(out, fields.signed_encryption_scope);
            }
        }
        SasKind::Service | SasKind::UserDelegation { .. } => {
            let queue_name = queue_name.ok_or(AuthFailure::ServiceSasWithoutQueue)?;
            line(out, fields.signed_permissions);
            line(out, fields.signed_start);
            line(out, fields.signed_expiry);
            out.extend_from_slice(b"/queue/");
            out.extend_from_slice(account_name.as_bytes());
            out.push(b'/');
            line(out, Some(queue_name));
            if let SasKind::UserDelegation { .. } = token.kind {
                // In place of `si`: the key's fields, then the delegated user's.
                for field in [
                    fields.signed_key_object_id,
                    fields.signed_key_tenant_id,
                    fields.signed_key_start,
                    fields.signed_key_expiry,
                    fields.signed_key_service,
                    fields.signed_key_version,
                    fields.signed_key_delegated_user_tenant_id,
                    fields.signed_delegated_user_object_id,
                ] {
                    line(out, field);
                }
            } else {
                line(out, fields.signed_identifier);
            }
            line(out, fields.signed_ip);
            line(out, fields.signed_protocol);
            // The service layouts are the ones without a trailing line break.
            out.extend_from_slice(fields.signed_version.unwrap_or_default().as_bytes());
        }
    }
    Ok(())
}

/// Verifies `token` for a request to `account` needing `access`: the signature (through
/// `cache`), then the stored policy, time window, protocol, address, service, resource type and
/// permission. `string_to_sign` is scratch space.
pub(super) fn verify(
    token: &SasToken<'_>,
    account: &Account,
    context: &RequestContext<'_>,
    access: Access,
    stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
    cache: &mut SasCache,
    string_to_sign: &mut Vec<u8>,
) -> Result<Principal, AuthFailure> {
    string_to_sign.clear();
    write_string_to_sign(token, account.name(), context.queue_name, string_to_sign)?;
    let key_index = verify_signature(token, account, cache, string_to_sign)?;
    authorize(token, context, access, stored_policy)?;
    let scheme = match token.kind {
        SasKind::Account { .. } => AuthScheme::AccountSas,
        SasKind::Service => AuthScheme::ServiceSas,
        SasKind::UserDelegation { .. } => AuthScheme::UserDelegationSas,
    };
    Ok(Principal { scheme, key_index })
}

/// Checks the signature over `string_to_sign`, consulting and filling the cache. On return the
/// buffer may hold the cache key (string-to-sign followed by the signature).
fn verify_signature(
    token: &SasToken<'_>,
    account: &Account,
    cache: &mut SasCache,
    string_to_sign: &mut Vec<u8>,
) -> Result<usize, AuthFailure> {
    let string_to_sign_length = string_to_sign.len();
    // The key holds the signature too: a cached string-to-sign with a forged signature must
    // miss the cache and fail verification.
    string_to_sign.extend_from_slice(&token.signature);
    let cache_key: &[u8] = string_to_sign;
    if let Some(key_index) = cache.get(cache_key) {
        return Ok(key_index);
    }
    let signed = &cache_key[..string_to_sign_length];
    let key_index = match token.delegation_key() {
        Some(key) => delegation::matching_key_index(account, &key, signed, &token.signature),
        None => account.matching_key_index(signed, &token.signature),
    };
    match key_index {
        Some(key_index) => {
            cache.insert(cache_key, key_index);
            Ok(key_index)
        }
        None => Err(AuthFailure::SignatureMismatch {
            string_to_sign: String::from_utf8_lossy(signed).into_owned(),
            request_signature: None,
        }),
    }
}

/// The checks after a valid signature, in the order Azure reports them.
fn authorize(
    token: &SasToken<'_>,
    context: &RequestContext<'_>,
    access: Access,
    stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
) -> Result<(), AuthFailure> {
    let terms = match token.kind {
        SasKind::Account { .. } => token.terms(),
        SasKind::Service => apply_stored_policy(token, stored_policy)?,
        SasKind::UserDelegation {
            key_start_ms,
            key_expiry_ms,
        } => {
            check_delegation_key(token, key_start_ms, key_expiry_ms, context.now_ms)?;
            token.terms()
        }
    };
    let expiry_ms = terms.expiry_ms.ok_or(AuthFailure::MissingSasField("se"))?;
    let permissions = terms
        .permissions
        .ok_or(AuthFailure::MissingSasField("sp"))?;

    // Without `st` the token is valid from any past instant; Azure takes it as starting now.
    let time_frame = TimeFrame {
        start_ms: terms.start_ms.unwrap_or(context.now_ms),
        expiry_ms,
        now_ms: context.now_ms,
    };
    // The service first checks that a SAS's own window is not empty, taking now for a missing
    // `st`: so an expired SAS without `st` fails as "Signed expiry time [se] must be after
    // signed start time [now]" (the Storage Emulator's `ValidateNonRevocableAccessWindow`, and
    // the service's answers to expired GitHub attachment links). A SAS that names a stored
    // policy (`si`) is revocable and skips that check: its window fails as any other.
    let start_given = terms.start_ms.is_some();
    let revocable = token.fields.signed_identifier.is_some();
    if (start_given || !revocable) && time_frame.start_ms >= expiry_ms {
        return Err(AuthFailure::SasTimesInverted(time_frame));
    }
    if context.now_ms < time_frame.start_ms {
        return Err(AuthFailure::SasNotYetValid(time_frame));
    }
    if context.now_ms >= expiry_ms {
        return Err(AuthFailure::SasExpired(time_frame));
    }
    if !token.protocols.allows(context.secure_transport) {
        return Err(AuthFailure::ProtocolMismatch);
    }
    if token
        .ip_range
        .is_some_and(|range| !range.contains(context.client_ip))
    {
        return Err(AuthFailure::SourceIpMismatch);
    }
    match token.kind {
        SasKind::Account {
            services,
            resource_types,
        } => {
            if !services.contains(access.service) {
                return Err(AuthFailure::ServiceMismatch);
            }
            if !resource_types.contains(access.resource_type.letter()) {
                return Err(AuthFailure::ResourceTypeMismatch);
            }
            if access.account_permissions == PermissionSet::default() {
                return Err(AuthFailure::OperationNotAllowed);
            }
            if !permissions.intersects(access.account_permissions) {
                return Err(AuthFailure::PermissionMismatch);
            }
        }
        SasKind::Service | SasKind::UserDelegation { .. } => match access.service_permission {
            None => return Err(AuthFailure::OperationNotAllowed),
            Some(permission) if !permissions.contains(permission) => {
                return Err(AuthFailure::PermissionMismatch);
            }
            Some(_) => {}
        },
    }
    Ok(())
}

/// The start, expiry and permissions a SAS grants, wherever each came from.
struct Terms {
    start_ms: Option<u64>,
    expiry_ms: Option<u64>,
    permissions: Option<PermissionSet>,
}

impl SasToken<'_> {
    /// The fields of the user delegation key a user delegation SAS is signed with, which
    /// derive it; `None` for the other kinds. `parse` made sure every required one is there.
    pub fn delegation_key(&self) -> Option<KeyFields<'_>> {
        let SasKind::UserDelegation {
            key_start_ms,
            key_expiry_ms,
        } = self.kind
        else {
            return None;
        };
        let fields = &self.fields;
        Some(KeyFields {
            signed_oid: fields.signed_key_object_id.unwrap_or_default(),
            signed_tid: fields.signed_key_tenant_id.unwrap_or_default(),
            signed_start_ms: key_start_ms,
            signed_expiry_ms: key_expiry_ms,
            signed_service: fields.signed_key_service.unwrap_or_default(),
            signed_version: fields.signed_key_version.unwrap_or_default(),
            signed_delegated_user_tid: fields.signed_key_delegated_user_tenant_id,
        })
    }

    /// The terms the token itself carries.
    fn terms(&self) -> Terms {
        Terms {
            start_ms: self.start_ms,
            expiry_ms: self.expiry_ms,
            permissions: self.permissions,
        }
    }
}

/// The checks a user delegation SAS adds: a key issued for the queue service, no stored
/// access policy (a user delegation SAS cannot name one), and a key valid now. A SAS can live
/// no longer than its key: past `ske` it fails whatever its own `se` says.
fn check_delegation_key(
    token: &SasToken<'_>,
    key_start_ms: u64,
    key_expiry_ms: u64,
    now_ms: u64,
) -> Result<(), AuthFailure> {
    if token.fields.signed_key_service != Some(SIGNED_SERVICE_QUEUE) {
        return Err(AuthFailure::UserDelegationKeyService);
    }
    if token.fields.signed_identifier.is_some() {
        return Err(AuthFailure::UserDelegationWithPolicy);
    }
    if now_ms < key_start_ms || now_ms >= key_expiry_ms {
        return Err(AuthFailure::UserDelegationKeyNotValid(TimeFrame {
            start_ms: key_start_ms,
            expiry_ms: key_expiry_ms,
            now_ms,
        }));
    }
    Ok(())
}

/// A service SAS's terms, completed from its stored access policy when it names one (`si`).
/// A field may come from the token or the policy, never both.
fn apply_stored_policy(
    token: &SasToken<'_>,
    stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
) -> Result<Terms, AuthFailure> {
    let Some(identifier) = token.fields.signed_identifier else {
        return Ok(token.terms());
    };
    let policy = stored_policy(identifier).ok_or(AuthFailure::StoredPolicyNotFound)?;
    Ok(Terms {
        start_ms: one_of(token.start_ms, policy.start_ms, "st")?,
        expiry_ms: one_of(token.expiry_ms, policy.expiry_ms, "se")?,
        permissions: one_of(token.permissions, policy.permissions, "sp")?,
    })
}

fn one_of<T>(
    from_token: Option<T>,
    from_policy: Option<T>,
    field_name: &'static str,
) -> Result<Option<T>, AuthFailure> {
    match (from_token, from_policy) {
        (Some(_), Some(_)) => Err(AuthFailure::StoredPolicyConflict(field_name)),
        (from_token, from_policy) => Ok(from_token.or(from_policy)),
    }
}

/// `YYYY-MM-DD`, the form of every storage service version.
fn is_version(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 10
        && bytes.iter().enumerate().all(|(at, &byte)| match at {
            4 | 7 => byte == b'-',
            _ => byte.is_ascii_digit(),
        })
}

/// Signatures already verified, so that a client repeating one token skips the HMAC. Maps the
/// exact signed bytes plus the signature to the index of the key that verified them; only
/// successes are stored, so forged tokens cannot crowd out good ones. The time window and
/// every other check still run on each request: only the signature outcome is remembered,
/// and it cannot change because keys are fixed at start-up.
///
/// Eviction is two generations: entries go into `current`; when it is full it becomes
/// `previous` (dropping the old `previous`), and a hit in `previous` moves back to `current`.
/// Tokens in use stay; the rest age out within two generations. One per shard, no locking.
#[derive(Debug)]
pub struct SasCache {
    current: AHashMap<Box<[u8]>, usize>,
    previous: AHashMap<Box<[u8]>, usize>,
    /// Half the capacity: each generation holds at most this many entries.
    generation_entries_max: usize,
}

impl SasCache {
    /// A cache of at most `entries_max` verified signatures (at least 2).
    pub fn new(entries_max: usize) -> SasCache {
        assert!(entries_max >= 2, "a SAS cache holds at least two entries");
        SasCache {
            current: AHashMap::new(),
            previous: AHashMap::new(),
            generation_entries_max: entries_max / 2,
        }
    }

    /// Verified signatures currently remembered.
    pub fn entry_count(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    fn get(&mut self, key: &[u8]) -> Option<usize> {
        if let Some(&key_index) = self.current.get(key) {
            return Some(key_index);
        }
        let (key, key_index) = self.previous.remove_entry(key)?;
        self.insert_boxed(key, key_index);
        Some(key_index)
    }

    fn insert(&mut self, key: &[u8], key_index: usize) {
        if key.len() <= SAS_CACHE_KEY_BYTES_MAX {
            self.insert_boxed(key.into(), key_index);
        }
    }

    fn insert_boxed(&mut self, key: Box<[u8]>, key_index: usize) {
        if self.current.len() >= self.generation_entries_max {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, key_index);
        assert!(self.current.len() <= self.generation_entries_max);
        assert!(self.previous.len() <= self.generation_entries_max);
    }
}

#[cfg(test)]
pub(super) mod tests;
