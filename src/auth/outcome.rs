//! What every authentication scheme shares, below them all: how a request proved who sent it
//! (`AuthScheme`, `Principal`) or why it is refused (`AuthFailure`, with the `TimeFrame` a
//! SAS's times were checked in), what the api layer knows of a request besides its bytes
//! (`RequestContext`), the secondary endpoint's account suffix, and the decoding of a base64
//! HMAC-SHA256 signature.

use std::fmt;
use std::net::IpAddr;

use super::bearer;

/// Suffix of the account name on the secondary (read-replica) endpoint. Requests there are
/// signed with the primary account's name and keys.
pub const SECONDARY_ACCOUNT_SUFFIX: &str = "-secondary";

/// How a request proved who sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthScheme {
    /// `Authorization: SharedKey account:signature`, the full string-to-sign.
    SharedKey,
    /// `Authorization: SharedKeyLite account:signature`, the shorter string-to-sign.
    SharedKeyLite,
    /// A SAS in the query with `ss`/`srt`, signed with an account key.
    AccountSas,
    /// A SAS in the query without `ss`/`srt`, for one queue, possibly via a stored policy.
    ServiceSas,
    /// A queue SAS signed with a user delegation key (`skoid`…), possibly bound to a user.
    UserDelegationSas,
    /// `Authorization: Bearer <JWT>` (`--oauth basic`).
    Bearer,
}

/// The outcome of a successful authentication, for the request log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Principal {
    /// How the request was signed: shows in the log which clients use SAS and which keys.
    pub scheme: AuthScheme,
    /// Which of the account's keys signed the request (0 = primary): shows in the log whether
    /// clients still use a key that is being rotated out.
    pub key_index: usize,
}

/// Why a request was refused. The log gets the reason; the client gets the mapped
/// `StorageError` and, as Azure gives it, an `AuthenticationErrorDetail` (`error.rs` words it):
/// what azq signed and the times it compared, never a key nor which key came closest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization` header and no SAS in the query: azq allows no anonymous access.
    NoCredentials,
    /// The account named by the URL does not exist.
    UnknownAccount,
    /// The `Authorization` header is not `Scheme account:signature`.
    MalformedAuthorization(&'static str),
    /// The `Authorization` header uses a scheme other than SharedKey or SharedKeyLite.
    UnsupportedScheme,
    /// The `Authorization` header names an account other than the URL's.
    AccountMismatch,
    /// A query parameter has a broken percent-escape or is not UTF-8.
    MalformedQuery,
    /// The signature does not match under any of the account's keys. Carries what azq signed,
    /// which is what a client author needs to find the difference (Azure shows it too).
    SignatureMismatch {
        /// azq's string-to-sign, newlines included.
        string_to_sign: String,
        /// The signature of a SharedKey `Authorization` header, base64, which Azure's detail
        /// quotes; `None` for a SAS, whose detail does not.
        request_signature: Option<String>,
    },
    /// A SAS field is unreadable; names the field.
    MalformedSas(&'static str),
    /// A SAS field the SAS needs is missing or empty; names the field.
    MissingSasField(&'static str),
    /// The SAS `sv` predates every string-to-sign layout azq knows.
    UnsupportedSasVersion,
    /// A user delegation SAS whose `sv` predates its layout (2025-07-05).
    UserDelegationSasVersion,
    /// A user delegation SAS whose key was issued for another service (`sks` is not `q`).
    UserDelegationKeyService,
    /// A user delegation SAS naming a stored access policy (`si`), which it cannot.
    UserDelegationWithPolicy,
    /// A user delegation SAS whose key is not valid now (`skt`..`ske`).
    UserDelegationKeyNotValid(TimeFrame),
    /// A user delegation SAS bound to a user (`sduoid`) without that user's bearer token:
    /// none, or one for another object or tenant.
    DelegatedUserMismatch,
    /// An operation that takes a bearer token only (Get User Delegation Key), sent with the
    /// account key or a SAS.
    BearerRequired,
    /// Get User Delegation Key with a token that names no object (`oid`) or tenant: there is
    /// no identity to issue the key to.
    BearerWithoutIdentity,
    /// A service SAS was used on a URL that names no queue.
    ServiceSasWithoutQueue,
    /// The SAS `si` names no stored access policy on the queue.
    StoredPolicyNotFound,
    /// A field is set both in the SAS and in its stored access policy; names the field.
    StoredPolicyConflict(&'static str),
    /// The SAS expiry is not after its start: its `st`, or now when it has none and names no
    /// stored policy (so an expired SAS without `st` fails here, as the service reports it).
    SasTimesInverted(TimeFrame),
    /// The SAS start time is still in the future.
    SasNotYetValid(TimeFrame),
    /// The SAS expiry time has passed.
    SasExpired(TimeFrame),
    /// The SAS does not allow the request's protocol (`spr`).
    ProtocolMismatch,
    /// The SAS does not allow the client's address (`sip`).
    SourceIpMismatch,
    /// The account SAS does not cover the service asked (`ss` lacks `q`, or `b`/`t` on the probe
    /// ports).
    ServiceMismatch,
    /// The account SAS does not cover the operation's resource type (`srt`).
    ResourceTypeMismatch,
    /// The SAS does not grant the operation's permission (`sp`).
    PermissionMismatch,
    /// A SharedKey request without `x-ms-date` or `Date`.
    RequestDateMissing,
    /// A SharedKey request whose date is not RFC 1123.
    RequestDateInvalid,
    /// A SharedKey request dated more than `REQUEST_DATE_SKEW_MS_MAX` ago: perhaps a replay.
    RequestDateTooOld,
    /// A SharedKey request dated more than `REQUEST_DATE_SKEW_MS_MAX` ahead.
    RequestDateInFuture,
    /// No permission of this kind of SAS covers the operation (a queue ACL through any SAS,
    /// queue management through a service SAS).
    OperationNotAllowed,
    /// A bearer token over plain HTTP, which Azure never accepts.
    BearerOverHttp,
    /// A bearer token while `--oauth` is off.
    BearerDisabled,
    /// A bearer token whose claims do not hold.
    InvalidBearerToken(bearer::TokenProblem),
}

impl fmt::Display for AuthFailure {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            AuthFailure::MalformedAuthorization(why) => {
                return write!(formatter, "malformed Authorization header: {why}");
            }
            AuthFailure::SignatureMismatch { string_to_sign, .. } => {
                return write!(formatter, "signature mismatch; signed {string_to_sign:?}");
            }
            AuthFailure::MalformedSas(field) => {
                return write!(formatter, "SAS field {field} is invalid");
            }
            AuthFailure::MissingSasField(field) => {
                return write!(formatter, "SAS field {field} is missing");
            }
            AuthFailure::SasTimesInverted(_) => "SAS expiry is not after its start (or now)",
            AuthFailure::StoredPolicyConflict(field) => {
                return write!(formatter, "SAS field {field} is also in the stored policy");
            }
            AuthFailure::InvalidBearerToken(problem) => {
                return write!(formatter, "bearer token refused: {}", problem.reason());
            }
            AuthFailure::NoCredentials => "no Authorization header and no SAS",
            AuthFailure::UnknownAccount => "the URL names an unknown account",
            AuthFailure::UnsupportedScheme => "Authorization scheme is not SharedKey(Lite)",
            AuthFailure::AccountMismatch => "Authorization names another account than the URL",
            AuthFailure::MalformedQuery => "query string cannot be decoded",
            AuthFailure::UnsupportedSasVersion => "SAS version predates every known layout",
            AuthFailure::UserDelegationSasVersion => {
                "user delegation SAS version predates user delegation for queues"
            }
            AuthFailure::UserDelegationKeyService => "user delegation key is for another service",
            AuthFailure::UserDelegationWithPolicy => "user delegation SAS names a stored policy",
            AuthFailure::UserDelegationKeyNotValid(_) => "user delegation key is not valid now",
            AuthFailure::DelegatedUserMismatch => {
                "user delegation SAS without the delegated user's token"
            }
            AuthFailure::BearerRequired => "the operation takes a bearer token only",
            AuthFailure::BearerWithoutIdentity => "the bearer token names no oid or tenant",
            AuthFailure::ServiceSasWithoutQueue => "service SAS used on a URL without a queue",
            AuthFailure::StoredPolicyNotFound => "SAS names an unknown stored access policy",
            AuthFailure::SasNotYetValid(_) => "SAS start time is in the future",
            AuthFailure::SasExpired(_) => "SAS has expired",
            AuthFailure::ProtocolMismatch => "SAS forbids this protocol",
            AuthFailure::SourceIpMismatch => "SAS forbids this client address",
            AuthFailure::ServiceMismatch => "account SAS excludes the service asked",
            AuthFailure::ResourceTypeMismatch => "account SAS excludes this resource type",
            AuthFailure::PermissionMismatch => "SAS lacks the permission this operation needs",
            AuthFailure::RequestDateMissing => "no x-ms-date or Date header",
            AuthFailure::RequestDateInvalid => "the request date is not an RFC 1123 date",
            AuthFailure::RequestDateTooOld => "request date header too old",
            AuthFailure::RequestDateInFuture => "request date header too far in the future",
            AuthFailure::OperationNotAllowed => "no SAS of this kind may perform this operation",
            AuthFailure::BearerOverHttp => "bearer tokens are not allowed over HTTP",
            AuthFailure::BearerDisabled => "bearer token while --oauth is off",
        };
        formatter.write_str(text)
    }
}

/// The instants a SAS's time window was checked with, which Azure's
/// `AuthenticationErrorDetail` names: start (`st`, or now when the SAS has none), expiry and
/// now, in ms since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeFrame {
    /// `st`, or the time of the request when the SAS has no start.
    pub start_ms: u64,
    /// `se`, from the SAS or its stored access policy.
    pub expiry_ms: u64,
    /// The time of the request.
    pub now_ms: u64,
}

/// What the api layer knows about a request besides its bytes.
#[derive(Clone, Copy, Debug)]
pub struct RequestContext<'a> {
    /// The account named by the URL (path segment or first Host label), without the
    /// `-secondary` suffix.
    pub account_name: &'a str,
    /// Whether the URL named the account's secondary endpoint (`account-secondary`).
    pub secondary: bool,
    /// The queue named by the URL; `None` for account-level operations.
    pub queue_name: Option<&'a str>,
    /// Now, in milliseconds since the epoch, from the shard's clock.
    pub now_ms: u64,
    /// The client's address, checked against a SAS `sip`.
    pub client_ip: IpAddr,
    /// Whether the request came over TLS, checked against a SAS `spr`.
    pub secure_transport: bool,
}

/// Decodes a base64 HMAC-SHA256 signature, as sent in `Authorization` or a SAS `sig`.
/// `None` unless it is valid base64 of exactly 32 bytes.
pub(super) fn decode_signature(text: &str) -> Option<[u8; 32]> {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    // 32 bytes take exactly 44 base64 characters (the last one `=`). Checking the length first
    // rejects oversized input cheaply and guarantees the decode fits the stack buffer.
    const SIGNATURE_BASE64_BYTES: usize = 44;
    if text.len() != SIGNATURE_BASE64_BYTES {
        return None;
    }
    let mut decoded = [0u8; 48];
    let length = BASE64.decode_slice(text, &mut decoded).ok()?;
    decoded[..length].try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_signature_table() {
        let valid = "qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0=";
        assert!(decode_signature(valid).is_some());
        for invalid in [
            "",
            "qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0",
            "qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0==",
            "qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U*=",
            "qX9x0hi6-PD7oWVjsAb_mxxh3vk9QUq5pC_dlKvC3U0=",
            "qX9x0hi6 PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0=",
            "YWJj",
        ] {
            assert_eq!(decode_signature(invalid), None, "{invalid}");
        }
    }
}
