//! What every authentication scheme shares, below them all: how a request proved who sent it
//! (`AuthScheme`, `Principal`) or why it is refused (`AuthFailure`), what the api layer knows
//! of a request besides its bytes (`RequestContext`), the secondary endpoint's account suffix,
//! and the decoding of a base64 HMAC-SHA256 signature.

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

/// Why a request was refused. The log gets the reason; the client gets only the mapped
/// `StorageError`, so that a failure never tells an attacker which part of a forgery was wrong.
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
    /// which is what a client author needs to find the difference.
    SignatureMismatch {
        /// azq's string-to-sign, newlines included; logged, never sent to the client.
        string_to_sign: String,
    },
    /// A SAS field is missing or unreadable; names the field.
    MalformedSas(&'static str),
    /// The SAS `sv` predates every string-to-sign layout azq knows.
    UnsupportedSasVersion,
    /// A service SAS was used on a URL that names no queue.
    ServiceSasWithoutQueue,
    /// The SAS `si` names no stored access policy on the queue.
    StoredPolicyNotFound,
    /// A field is set both in the SAS and in its stored access policy; names the field.
    StoredPolicyConflict(&'static str),
    /// The SAS start time is still in the future.
    SasNotYetValid,
    /// The SAS expiry time has passed.
    SasExpired,
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
    /// A bearer token over plain HTTP, which Azure never accepts.
    BearerOverHttp,
    /// A bearer token while `--oauth` is off.
    BearerDisabled,
    /// A bearer token on Get or Set Queue ACL, which take only the account key (as Azurite).
    BearerNotForOperation,
    /// A bearer token whose claims do not hold.
    InvalidBearerToken(bearer::TokenProblem),
}

impl fmt::Display for AuthFailure {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            AuthFailure::MalformedAuthorization(why) => {
                return write!(formatter, "malformed Authorization header: {why}");
            }
            AuthFailure::SignatureMismatch { string_to_sign } => {
                return write!(formatter, "signature mismatch; signed {string_to_sign:?}");
            }
            AuthFailure::MalformedSas(field) => {
                return write!(formatter, "SAS field {field} is missing or invalid");
            }
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
            AuthFailure::ServiceSasWithoutQueue => "service SAS used on a URL without a queue",
            AuthFailure::StoredPolicyNotFound => "SAS names an unknown stored access policy",
            AuthFailure::SasNotYetValid => "SAS start time is in the future",
            AuthFailure::SasExpired => "SAS has expired",
            AuthFailure::ProtocolMismatch => "SAS forbids this protocol",
            AuthFailure::SourceIpMismatch => "SAS forbids this client address",
            AuthFailure::ServiceMismatch => "account SAS excludes the service asked",
            AuthFailure::ResourceTypeMismatch => "account SAS excludes this resource type",
            AuthFailure::PermissionMismatch => "SAS lacks the permission this operation needs",
            AuthFailure::BearerOverHttp => "bearer tokens are not allowed over HTTP",
            AuthFailure::BearerDisabled => "bearer token while --oauth is off",
            AuthFailure::BearerNotForOperation => "bearer tokens cannot get or set a queue ACL",
        };
        formatter.write_str(text)
    }
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
