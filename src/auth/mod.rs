//! Authentication and authorisation of requests: SharedKey and SharedKeyLite signatures, account
//! and service shared access signatures (SAS), and the accounts whose keys sign them. Pure and
//! synchronous: time, the client's address and stored access policies are passed in.
//!
//! - `accounts`: accounts and keys (HMAC state prepared once), `AZURITE_ACCOUNTS` parsing.
//! - `collation`: the header order of SharedKey canonicalisation (not byte order).
//! - `shared_key`: string-to-sign for SharedKey/SharedKeyLite, verification, client signing.
//! - `sas`: SAS parsing, strings-to-sign, validation, and a cache of verified signatures.
//! - `bearer`: the claims of an OAuth bearer token (`--oauth basic`); signatures unchecked.
//!
//! The api layer owns one `Authenticator` per shard and calls `Authenticator::authenticate`
//! once per request (CORS preflight excepted) with the operation's `Access`. A failure carries
//! its reason for the log; the client sees the `StorageError` it maps to, with Azure's
//! `AuthenticationErrorDetail` for it (`error::authentication_error_detail`).

pub mod accounts;
pub mod bearer;
pub mod collation;
pub mod delegation;
pub mod sas;
pub mod shared_key;

use std::fmt;
use std::net::IpAddr;

use crate::http::{Query, Request};

pub use accounts::{Account, Accounts, SigningKey};
pub use sas::{Access, PermissionSet, ResourceType, SasCache, StoredPolicy};
pub use shared_key::sign_shared_key;

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
    /// A user delegation SAS whose `sv` predates user delegation for queues (2026-02-06).
    UserDelegationSasVersion,
    /// A user delegation SAS whose key was issued for another service (`sks` is not `q`).
    UserDelegationKeyService,
    /// A user delegation SAS naming a stored access policy (`si`), which it cannot.
    UserDelegationWithPolicy,
    /// A user delegation SAS whose key is not valid now (`skt`..`ske`).
    UserDelegationKeyNotValid(sas::TimeFrame),
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
    /// The SAS expiry is not after its start.
    SasTimesInverted(sas::TimeFrame),
    /// The SAS start time is still in the future.
    SasNotYetValid(sas::TimeFrame),
    /// The SAS expiry time has passed.
    SasExpired(sas::TimeFrame),
    /// The SAS does not allow the request's protocol (`spr`).
    ProtocolMismatch,
    /// The SAS does not allow the client's address (`sip`).
    SourceIpMismatch,
    /// The account SAS does not cover the queue service (`ss` lacks `q`).
    ServiceMismatch,
    /// The account SAS does not cover the operation's resource type (`srt`).
    ResourceTypeMismatch,
    /// The SAS does not grant the operation's permission (`sp`).
    PermissionMismatch,
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
            AuthFailure::SasTimesInverted(_) => "SAS expiry is not after its start",
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
            AuthFailure::ServiceMismatch => "account SAS excludes the queue service",
            AuthFailure::ResourceTypeMismatch => "account SAS excludes this resource type",
            AuthFailure::PermissionMismatch => "SAS lacks the permission this operation needs",
            AuthFailure::OperationNotAllowed => "no SAS of this kind may perform this operation",
            AuthFailure::BearerOverHttp => "bearer tokens are not allowed over HTTP",
            AuthFailure::BearerDisabled => "bearer token while --oauth is off",
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

/// The authentication state of one shard: the accounts, a cache of verified SAS signatures and
/// a scratch buffer for strings-to-sign. Owned by the shard, never shared, so it needs no lock.
#[derive(Debug)]
pub struct Authenticator {
    accounts: Accounts,
    sas_cache: SasCache,
    /// Reused for every string-to-sign so that verification does not allocate one per request.
    string_to_sign: Vec<u8>,
    /// Whether bearer tokens are accepted (`--oauth basic`).
    bearer_enabled: bool,
}

impl Authenticator {
    /// An authenticator over `accounts` with an empty SAS cache.
    pub fn new(accounts: Accounts) -> Authenticator {
        Authenticator {
            accounts,
            sas_cache: SasCache::new(crate::config::SAS_CACHE_ENTRIES_MAX),
            string_to_sign: Vec::with_capacity(512),
            bearer_enabled: false,
        }
    }

    /// Accepts bearer tokens from now on (`--oauth basic`), over HTTPS.
    pub fn enable_bearer(&mut self) {
        self.bearer_enabled = true;
    }

    /// The accounts this authenticator checks against (the api layer answers 404 for others).
    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    /// Decides whether `request` may perform an operation needing `access`. Tries, in order, a
    /// SharedKey/SharedKeyLite `Authorization` header (full access), an account SAS (query has
    /// `ss` or `srt`), then a service SAS (query has `sig`). No credentials is a failure.
    ///
    /// `stored_policy` returns the stored access policy of `context.queue_name` with the given
    /// identifier; it is called at most once, and only for a service SAS with `si`. The queue's
    /// ACL may live on another shard: the api layer can call `sas::signed_identifier` first to
    /// learn whether (and which) policy to fetch, then pass a closure over the fetched copy.
    pub fn authenticate(
        &mut self,
        request: &Request,
        query: &Query<'_>,
        context: &RequestContext<'_>,
        access: Access,
        stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
    ) -> Result<Principal, AuthFailure> {
        let account = self
            .accounts
            .get(context.account_name)
            .ok_or(AuthFailure::UnknownAccount)?;
        let authorization = request.header("authorization");
        let bearer = authorization.and_then(bearer_token);
        if access.bearer_only && bearer.is_none() {
            return Err(AuthFailure::BearerRequired);
        }
        if let Some(authorization) = authorization {
            if let Some(token) = bearer {
                // A user delegation SAS bound to a user (`sduoid`) comes with that user's token;
                // then the SAS decides what the request may do.
                if let Ok(Some(sas)) = sas::parse(query) {
                    if sas.fields.signed_delegated_user_object_id.is_some() && !access.bearer_only {
                        let principal = self.verify_sas(&sas, context, access, stored_policy)?;
                        self.authenticate_bearer(token, request, context)?;
                        check_delegated_user(&sas, token)?;
                        return Ok(principal);
                    }
                }
                self.authenticate_bearer(token, request, context)?;
                if access.bearer_only {
                    let identity = bearer::identity(token).unwrap_or_default();
                    if identity.object_id.is_none() || identity.tenant_id.is_none() {
                        return Err(AuthFailure::BearerWithoutIdentity);
                    }
                }
                return Ok(Principal {
                    scheme: AuthScheme::Bearer,
                    key_index: 0,
                });
            }
            return shared_key::verify(
                request,
                authorization,
                context.secondary,
                account,
                &mut self.string_to_sign,
            );
        }
        let token = sas::parse(query)?.ok_or(AuthFailure::NoCredentials)?;
        if token.fields.signed_delegated_user_object_id.is_some() {
            return Err(AuthFailure::DelegatedUserMismatch);
        }
        self.verify_sas(&token, context, access, stored_policy)
    }

    fn verify_sas(
        &mut self,
        token: &sas::SasToken<'_>,
        context: &RequestContext<'_>,
        access: Access,
        stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
    ) -> Result<Principal, AuthFailure> {
        let account = self
            .accounts
            .get(context.account_name)
            .ok_or(AuthFailure::UnknownAccount)?;
        sas::verify(
            token,
            account,
            context,
            access,
            stored_policy,
            &mut self.sas_cache,
            &mut self.string_to_sign,
        )
    }
}

/// Whether the bearer `token` was issued to the user a SAS is bound to: the object `sduoid`, in
/// the tenant `skdutid` (a user of another tenant) or else the key's own tenant `sktid`.
fn check_delegated_user(sas: &sas::SasToken<'_>, token: &str) -> Result<(), AuthFailure> {
    let fields = &sas.fields;
    let tenant = fields
        .signed_key_delegated_user_tenant_id
        .or(fields.signed_key_tenant_id);
    let identity = bearer::identity(token).unwrap_or_default();
    if identity.object_id.as_deref() == fields.signed_delegated_user_object_id
        && identity.tenant_id.as_deref() == tenant
    {
        Ok(())
    } else {
        Err(AuthFailure::DelegatedUserMismatch)
    }
}

impl Authenticator {
    /// Checks a bearer token, as Azurite's `--oauth basic`: only over HTTPS, and with claims
    /// that hold (`bearer::verify`). Every operation takes one, Get and Set Queue ACL included:
    /// Azure's RBAC table lists data actions for both (Azurite refuses them).
    fn authenticate_bearer(
        &self,
        token: &str,
        request: &Request,
        context: &RequestContext<'_>,
    ) -> Result<(), AuthFailure> {
        if !context.secure_transport {
            return Err(AuthFailure::BearerOverHttp);
        }
        if !self.bearer_enabled {
            return Err(AuthFailure::BearerDisabled);
        }
        bearer::verify(
            token,
            context.account_name,
            request.header_str("host"),
            context.now_ms,
        )
        .map_err(AuthFailure::InvalidBearerToken)
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), if it is one.
pub fn bearer_token(authorization: &[u8]) -> Option<&str> {
    let prefix = bearer::BEARER_PREFIX.as_bytes();
    if authorization.len() < prefix.len()
        || !authorization[..prefix.len()].eq_ignore_ascii_case(prefix)
    {
        return None;
    }
    // A token that is not text cannot be a JWT: an empty one fails as malformed.
    Some(std::str::from_utf8(&authorization[prefix.len()..]).unwrap_or_default())
}

/// Decodes a base64 HMAC-SHA256 signature, as sent in `Authorization` or a SAS `sig`.
/// `None` unless it is valid base64 of exactly 32 bytes.
fn decode_signature(text: &str) -> Option<[u8; 32]> {
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
pub(crate) mod test_support {
    //! What the auth tests share: the development account and a body-less `Request`.

    use bytes::Bytes;

    use super::{Accounts, Authenticator};
    use crate::config::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
    use crate::http::request::Request;

    /// A body-less request (`Request::from_parts` with an empty body).
    pub fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> Request {
        Request::from_parts(method, target, headers, Bytes::new())
    }

    pub fn development_accounts() -> Accounts {
        Accounts::new(&[(
            DEVELOPMENT_ACCOUNT_NAME.to_string(),
            vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
        )])
        .unwrap()
    }

    pub fn development_authenticator() -> Authenticator {
        Authenticator::new(development_accounts())
    }

    /// `unsigned` (a user delegation SAS's fields, query-encoded) signed for `queue_name` as a
    /// client signs it, with the key azq issues for its `sk…` fields.
    pub fn sign_delegated(unsigned: &str, queue_name: &str) -> String {
        use base64::engine::general_purpose::STANDARD as BASE64;
        use base64::Engine;
        use hmac::Mac;

        use super::delegation::key_value;
        use super::sas;
        use super::SigningKey;
        use crate::http::Query;

        let placeholder = format!("{unsigned}&sig={}=", "A".repeat(43));
        let query = Query::parse(placeholder.as_bytes()).unwrap();
        let token = sas::parse(&query).unwrap().unwrap();
        let key = token
            .delegation_key()
            .unwrap_or_else(|| panic!("not a user delegation SAS: {unsigned}"));
        let value = key_value(
            &SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap(),
            &key,
        );
        let mut string_to_sign = Vec::new();
        sas::write_string_to_sign(
            &token,
            DEVELOPMENT_ACCOUNT_NAME,
            Some(queue_name),
            &mut string_to_sign,
        )
        .unwrap();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&value).unwrap();
        mac.update(&string_to_sign);
        let signature = BASE64
            .encode(mac.finalize().into_bytes())
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        format!("{unsigned}&sig={signature}")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{development_authenticator, request};
    use super::*;

    const NOVEMBER_22_MS: u64 = 1_795_305_600_000;

    fn context(queue_name: Option<&'static str>) -> RequestContext<'static> {
        RequestContext {
            account_name: "devstoreaccount1",
            secondary: false,
            queue_name,
            now_ms: NOVEMBER_22_MS + 3_600_000,
            client_ip: IpAddr::from([127, 0, 0, 1]),
            secure_transport: false,
        }
    }

    fn no_policy(_identifier: &str) -> Option<StoredPolicy> {
        None
    }

    fn query_of(request: &Request) -> Query<'_> {
        Query::parse(request.query()).expect("a well-formed query")
    }

    const PEEK_HEADERS: &[(&str, &str)] = &[
        ("x-ms-version", "2026-04-06"),
        ("x-ms-date", "Sun, 22 Nov 2026 00:00:00 GMT"),
        (
            "x-ms-client-request-id",
            "00000000-0000-0000-0000-000000000001",
        ),
    ];

    fn peek_request(authorization: Option<&str>, query_extra: &str) -> Request {
        let mut headers = PEEK_HEADERS.to_vec();
        if let Some(value) = authorization {
            headers.push(("Authorization", value));
        }
        request(
            "GET",
            &format!(
                "/devstoreaccount1/myqueue/messages?numofmessages=2&peekonly=true{query_extra}"
            ),
            &headers,
        )
    }

    #[test]
    fn every_scheme_in_order() {
        let mut authenticator = development_authenticator();
        let queue = context(Some("myqueue"));
        let account_sas = "&sv=2026-10-06&ss=q&srt=sco&sp=rwdlacup&st=2026-11-22T00:00:00Z\
            &se=2026-11-23T00:00:00Z&sig=fwZjH/QMIpHkgAn4hsXNvttEDtucDoClV/pmmnt6anw%3D";
        let service_sas = "&sv=2026-10-06&sp=raup&st=2026-11-22T00%3A00%3A00Z\
            &se=2026-11-23T00%3A00%3A00Z&spr=https%2Chttp\
            &sig=OxCNGzjOaDzj0ZT0SPbgS3%2BJKWc3Wl%2FKaXKcKzCQvTo%3D";
        let cases: &[(Request, Result<AuthScheme, AuthFailure>)] = &[
            (
                peek_request(
                    Some("SharedKey devstoreaccount1:qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0="),
                    "",
                ),
                Ok(AuthScheme::SharedKey),
            ),
            (
                peek_request(
                    Some("SharedKeyLite devstoreaccount1:adHUy8qYGbk2BPINvg67pcMIw6eIcQjBOrUtug8zvOQ="),
                    "",
                ),
                Ok(AuthScheme::SharedKeyLite),
            ),
            (peek_request(None, account_sas), Ok(AuthScheme::AccountSas)),
            (peek_request(None, service_sas), Ok(AuthScheme::ServiceSas)),
            (peek_request(None, ""), Err(AuthFailure::NoCredentials)),
            // The header wins over a SAS in the query; a bearer token needs HTTPS.
            (
                peek_request(Some("Bearer eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9"), account_sas),
                Err(AuthFailure::BearerOverHttp),
            ),
        ];
        for (request, expected) in cases {
            let outcome = authenticator
                .authenticate(
                    request,
                    &query_of(request),
                    &queue,
                    Access::PEEK_MESSAGES,
                    &no_policy,
                )
                .map(|principal| principal.scheme);
            assert_eq!(
                &outcome,
                expected,
                "{:?}",
                String::from_utf8_lossy(request.target())
            );
        }
    }

    #[test]
    fn bearer_tokens_need_https_oauth_a_token_operation_and_good_claims() {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        let now_s = (NOVEMBER_22_MS + 3_600_000) / 1000;
        let token = |expires_s: u64| {
            format!(
                "Bearer {}.{}.",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
                URL_SAFE_NO_PAD.encode(format!(
                    r#"{{"aud":"https://storage.azure.com","iss":"https://sts.windows.net/t/","nbf":{},"exp":{expires_s}}}"#,
                    now_s - 60
                ))
            )
        };
        let valid = token(now_s + 3600);
        let expired = token(now_s - 3600);
        let mut secure = context(Some("myqueue"));
        secure.secure_transport = true;
        let mut off = development_authenticator();
        let mut on = development_authenticator();
        on.enable_bearer();
        // (bearer enabled, Authorization, over HTTPS, access, outcome)
        type Case<'a> = (bool, &'a str, bool, Access, Result<AuthScheme, AuthFailure>);
        let cases: [Case<'_>; 6] = [
            (
                true,
                &valid,
                true,
                Access::PEEK_MESSAGES,
                Ok(AuthScheme::Bearer),
            ),
            (
                true,
                &valid,
                false,
                Access::PEEK_MESSAGES,
                Err(AuthFailure::BearerOverHttp),
            ),
            (
                false,
                &valid,
                true,
                Access::PEEK_MESSAGES,
                Err(AuthFailure::BearerDisabled),
            ),
            // Queue ACLs too, as Azure's RBAC allows (Azurite refuses them).
            (
                true,
                &valid,
                true,
                Access::GET_QUEUE_ACL,
                Ok(AuthScheme::Bearer),
            ),
            (
                true,
                &expired,
                true,
                Access::PEEK_MESSAGES,
                Err(AuthFailure::InvalidBearerToken(
                    bearer::TokenProblem::Expired,
                )),
            ),
            (
                true,
                "bearer not-a-jwt",
                true,
                Access::PEEK_MESSAGES,
                Err(AuthFailure::InvalidBearerToken(
                    bearer::TokenProblem::Malformed,
                )),
            ),
        ];
        for (enabled, authorization, https, access, expected) in cases {
            let authenticator = if enabled { &mut on } else { &mut off };
            let request = peek_request(Some(authorization), "");
            let context = if https {
                secure
            } else {
                context(Some("myqueue"))
            };
            let outcome = authenticator
                .authenticate(&request, &query_of(&request), &context, access, &no_policy)
                .map(|principal| principal.scheme);
            assert_eq!(
                outcome, expected,
                "{authorization} https={https} {access:?}"
            );
        }
    }

    /// An unsigned JWT for the storage audience with `extra` claims, valid around `now_s`.
    fn bearer(now_s: u64, extra: &str) -> String {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        format!(
            "Bearer {}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(format!(
                r#"{{"aud":"https://storage.azure.com","iss":"https://sts.windows.net/t/","nbf":{},"exp":{}{extra}}}"#,
                now_s - 60,
                now_s + 3600
            ))
        )
    }

    #[test]
    fn a_user_delegation_key_takes_a_bearer_token_with_an_identity() {
        let now_s = (NOVEMBER_22_MS + 3_600_000) / 1000;
        let mut authenticator = development_authenticator();
        authenticator.enable_bearer();
        let mut secure = context(None);
        secure.secure_transport = true;
        let target = "/devstoreaccount1/?restype=service&comp=userdelegationkey";
        let shared_key = sign_shared_key(
            "POST",
            target,
            PEEK_HEADERS,
            0,
            "devstoreaccount1",
            &SigningKey::from_base64(crate::config::DEVELOPMENT_ACCOUNT_KEY).unwrap(),
        )
        .unwrap();
        let with_identity = bearer(now_s, r#","oid":"o","tid":"t""#);
        let without_oid = bearer(now_s, r#","tid":"t""#);
        let cases = [
            (
                Some(format!("SharedKey devstoreaccount1:{shared_key}")),
                Err(AuthFailure::BearerRequired),
            ),
            (None, Err(AuthFailure::BearerRequired)),
            (Some(with_identity), Ok(AuthScheme::Bearer)),
            (Some(without_oid), Err(AuthFailure::BearerWithoutIdentity)),
        ];
        for (authorization, expected) in cases {
            let mut headers = PEEK_HEADERS.to_vec();
            if let Some(value) = &authorization {
                headers.push(("Authorization", value));
            }
            let request = request("POST", target, &headers);
            let outcome = authenticator
                .authenticate(
                    &request,
                    &query_of(&request),
                    &secure,
                    Access::GET_USER_DELEGATION_KEY,
                    &no_policy,
                )
                .map(|principal| principal.scheme);
            assert_eq!(outcome, expected, "{authorization:?}");
        }
    }

    #[test]
    fn a_sas_bound_to_a_user_takes_that_users_token() {
        let now_s = (NOVEMBER_22_MS + 3_600_000) / 1000;
        let mut authenticator = development_authenticator();
        authenticator.enable_bearer();
        let key = "skoid=owner&sktid=home&skt=2026-11-22T00:00:00Z&ske=2026-11-23T00:00:00Z\
            &sks=q&skv=2026-04-06";
        let bound = test_support::sign_delegated(
            &format!("sv=2026-10-06&sp=r&se=2026-11-22T12:00:00Z&{key}&sduoid=user"),
            "myqueue",
        );
        let across = test_support::sign_delegated(
            &format!("sv=2026-10-06&sp=r&se=2026-11-22T12:00:00Z&{key}&skdutid=away&sduoid=user"),
            "myqueue",
        );
        let user_at_home = bearer(now_s, r#","oid":"user","tid":"home""#);
        let user_away = bearer(now_s, r#","oid":"user","tid":"away""#);
        let someone_else = bearer(now_s, r#","oid":"owner","tid":"home""#);
        let mut secure = context(Some("myqueue"));
        secure.secure_transport = true;
        let cases = [
            (&bound, None, true, Err(AuthFailure::DelegatedUserMismatch)),
            (
                &bound,
                Some(&user_at_home),
                true,
                Ok(AuthScheme::UserDelegationSas),
            ),
            (
                &bound,
                Some(&user_away),
                true,
                Err(AuthFailure::DelegatedUserMismatch),
            ),
            (
                &bound,
                Some(&someone_else),
                true,
                Err(AuthFailure::DelegatedUserMismatch),
            ),
            (
                &bound,
                Some(&user_at_home),
                false,
                Err(AuthFailure::BearerOverHttp),
            ),
            (
                &across,
                Some(&user_away),
                true,
                Ok(AuthScheme::UserDelegationSas),
            ),
            (
                &across,
                Some(&user_at_home),
                true,
                Err(AuthFailure::DelegatedUserMismatch),
            ),
        ];
        for (sas, authorization, https, expected) in cases {
            let mut headers = PEEK_HEADERS.to_vec();
            if let Some(value) = authorization {
                headers.push(("Authorization", value.as_str()));
            }
            let request = request(
                "GET",
                &format!("/devstoreaccount1/myqueue/messages?peekonly=true&{sas}"),
                &headers,
            );
            let at = if https {
                secure
            } else {
                context(Some("myqueue"))
            };
            let outcome = authenticator
                .authenticate(
                    &request,
                    &query_of(&request),
                    &at,
                    Access::PEEK_MESSAGES,
                    &no_policy,
                )
                .map(|principal| principal.scheme);
            assert_eq!(outcome, expected, "{sas} {authorization:?} https={https}");
        }
    }

    #[test]
    fn unknown_account_is_not_found() {
        let mut authenticator = development_authenticator();
        let request = peek_request(None, "");
        let mut unknown = context(Some("myqueue"));
        unknown.account_name = "otheraccount";
        let failure = authenticator
            .authenticate(
                &request,
                &query_of(&request),
                &unknown,
                Access::PEEK_MESSAGES,
                &no_policy,
            )
            .unwrap_err();
        assert_eq!(failure, AuthFailure::UnknownAccount);
    }

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
