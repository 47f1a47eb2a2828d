//! Authentication and authorisation of requests: SharedKey and SharedKeyLite signatures, account,
//! service and user delegation shared access signatures (SAS), bearer tokens, and the accounts
//! whose keys sign them. Pure and synchronous: time, the client's address and stored access
//! policies are passed in.
//!
//! - `accounts`: accounts and keys (HMAC state prepared once), `AZURITE_ACCOUNTS` parsing.
//! - `collation`: the header order of SharedKey canonicalisation (not byte order).
//! - `shared_key`: string-to-sign for SharedKey/SharedKeyLite, verification, client signing.
//! - `sas`: SAS parsing, strings-to-sign, validation, and a cache of verified signatures.
//! - `delegation`: user delegation keys, derived from the account key (Get User Delegation Key,
//!   and the key a user delegation SAS is signed with).
//! - `bearer`: the claims of an OAuth bearer token (`--oauth basic`); signatures unchecked.
//! - `redact`: a log line with its working credentials (SAS `sig`, SharedKey signatures,
//!   bearer tokens) replaced, for the request log.
//! - `outcome`: what every scheme shares: who sent a request (`Principal`) or why it is
//!   refused (`AuthFailure`, with a SAS's `TimeFrame`), what is known of it besides its bytes
//!   (`RequestContext`), and signature decoding. This file re-exports them and holds the
//!   `Authenticator`, which tries the schemes in turn; the files below it never import it.
//!
//! The api layer owns one `Authenticator` per shard and calls `Authenticator::authenticate`
//! once per request (CORS preflight excepted) with the operation's `Access`. A failure carries
//! its reason for the log; the client sees the `StorageError` it maps to, with Azure's
//! `AuthenticationErrorDetail` for it (`error::authentication_error_detail`).

pub mod accounts;
pub mod bearer;
pub mod collation;
pub mod delegation;
mod outcome;
pub mod redact;
pub mod sas;
pub mod shared_key;
#[cfg(test)]
mod test_support;

use crate::http::{KnownHeader, Query, Request};

pub use accounts::{
    Account, Accounts, SigningKey, DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME,
};
pub use bearer::OAuthLevel;
pub use outcome::{
    AuthFailure, AuthScheme, Principal, RequestContext, TimeFrame, SECONDARY_ACCOUNT_SUFFIX,
};
pub use sas::{Access, PermissionSet, ResourceType, SasCache, StoredPolicy};
pub use shared_key::sign_shared_key;

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
    /// Whether SharedKey requests must be dated within `REQUEST_DATE_SKEW_MS_MAX` of now (all
    /// but `--skipRequestDateCheck`).
    request_date_checked: bool,
}

impl Authenticator {
    /// An authenticator over `accounts` with an empty SAS cache.
    pub fn new(accounts: Accounts) -> Authenticator {
        Authenticator {
            accounts,
            sas_cache: SasCache::new(crate::limits::SAS_CACHE_ENTRIES_MAX),
            string_to_sign: Vec::with_capacity(512),
            bearer_enabled: false,
            request_date_checked: true,
        }
    }

    /// Accepts SharedKey requests whatever their date (`--skipRequestDateCheck`), for clients
    /// whose clocks are wrong; a captured request can then be replayed at any time.
    pub fn skip_request_date_check(&mut self) {
        self.request_date_checked = false;
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
    /// bearer token (with any SAS beside it checked too, and then deciding: a user delegation
    /// SAS bound to its user, `sduoid`, comes so), a SharedKey/SharedKeyLite `Authorization`
    /// header (full access), then
    /// a SAS in the query: account (`ss` or `srt`), user delegation (`skoid`…) or service. An
    /// operation that takes a bearer token only (`Access::bearer_only`) takes nothing else. No
    /// credentials is a failure.
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
        let authorization = request.known(KnownHeader::Authorization);
        let bearer = authorization.and_then(bearer_token);
        if access.bearer_only && bearer.is_none() {
            return Err(AuthFailure::BearerRequired);
        }
        if let Some(authorization) = authorization {
            if let Some(token) = bearer {
                return self.authenticate_token_and_sas(
                    token,
                    request,
                    query,
                    context,
                    access,
                    stored_policy,
                );
            }
            if self.request_date_checked {
                shared_key::check_request_date(request, context.now_ms)?;
            }
            if access.service == 't' {
                return shared_key::verify_table(
                    request,
                    authorization,
                    account,
                    &mut self.string_to_sign,
                );
            }
            return shared_key::verify(
                request,
                query,
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

    /// A request with a bearer token, and perhaps a SAS beside it. A SAS in the query is never
    /// passed over: one that does not read is refused as it would be alone, and one that reads
    /// is verified and decides what the request may do, the token checked as well. So a user
    /// delegation SAS bound to a user (`sduoid`) works with that user's token only, and a
    /// token cannot carry a tampered SAS, or another user's, through. Only an operation that
    /// takes a token alone (Get User Delegation Key) leaves a readable SAS unused: no SAS can
    /// perform it, so the token decides.
    fn authenticate_token_and_sas(
        &mut self,
        token: &str,
        request: &Request,
        query: &Query<'_>,
        context: &RequestContext<'_>,
        access: Access,
        stored_policy: &dyn Fn(&str) -> Option<StoredPolicy>,
    ) -> Result<Principal, AuthFailure> {
        let sas = sas::parse(query)?.filter(|_| !access.bearer_only);
        let principal = match &sas {
            Some(sas) => Some(self.verify_sas(sas, context, access, stored_policy)?),
            None => None,
        };
        self.authenticate_bearer(token, request, context)?;
        if let Some(sas) = &sas {
            if sas.fields.signed_delegated_user_object_id.is_some() {
                check_delegated_user(sas, token)?;
            }
        }
        if access.bearer_only {
            let identity = bearer::identity(token).unwrap_or_default();
            if identity.object_id.is_none() || identity.tenant_id.is_none() {
                return Err(AuthFailure::BearerWithoutIdentity);
            }
        }
        Ok(principal.unwrap_or(Principal {
            scheme: AuthScheme::Bearer,
            key_index: 0,
        }))
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
            request.known_str(KnownHeader::Host),
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

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::test_support::{development_accounts, request};
    use super::*;

    fn development_authenticator() -> Authenticator {
        Authenticator::new(development_accounts())
    }

    const NOVEMBER_22_MS: u64 = 1_795_305_600_000;

    fn context(queue_name: Option<&'static str>) -> RequestContext<'static> {
        RequestContext {
            account_name: "devstoreaccount1",
            secondary: false,
            queue_name,
            now_ms: NOVEMBER_22_MS + 600_000,
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
        let now_s = (NOVEMBER_22_MS + 600_000) / 1000;
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
        let now_s = (NOVEMBER_22_MS + 600_000) / 1000;
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
            &SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap(),
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
        let now_s = (NOVEMBER_22_MS + 600_000) / 1000;
        let mut authenticator = development_authenticator();
        authenticator.enable_bearer();
        let key = "skoid=owner&sktid=home&skt=2026-11-22T00:00:00Z&ske=2026-11-23T00:00:00Z\
            &sks=q&skv=2026-04-06";
        let bound = sas::tests::sign_delegated(
            &format!("sv=2026-10-06&sp=r&se=2026-11-22T12:00:00Z&{key}&sduoid=user"),
            "myqueue",
        );
        let across = sas::tests::sign_delegated(
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

    /// Issue 41: a SAS beside a bearer token was read, and when it did not read (a `sig` that
    /// is not base64, a broken field) the token alone served the request. Every SAS beside a
    /// token is now checked and decides; the token must hold as well.
    #[test]
    fn a_bearer_token_never_carries_an_unchecked_sas() {
        let now_s = (NOVEMBER_22_MS + 600_000) / 1000;
        let mut authenticator = development_authenticator();
        authenticator.enable_bearer();
        let key = "skoid=owner&sktid=home&skt=2026-11-22T00:00:00Z&ske=2026-11-23T00:00:00Z\
            &sks=q&skv=2026-04-06";
        let grant = "sv=2025-07-05&sp=r&se=2026-11-22T12:00:00Z";
        let bound = sas::tests::sign_delegated(&format!("{grant}&{key}&sduoid=user"), "myqueue");
        let unbound = sas::tests::sign_delegated(&format!("{grant}&{key}"), "myqueue");
        let forged_sig = |sas: &str| {
            let (fields, _) = sas.split_once("&sig=").unwrap();
            format!("{fields}&sig={}%3D", "A".repeat(43))
        };
        let service_sas = "sv=2026-10-06&sp=raup&st=2026-11-22T00%3A00%3A00Z\
            &se=2026-11-23T00%3A00%3A00Z&spr=https%2Chttp\
            &sig=OxCNGzjOaDzj0ZT0SPbgS3%2BJKWc3Wl%2FKaXKcKzCQvTo%3D";
        let user = bearer(now_s, r#","oid":"user","tid":"home""#);
        let mut secure = context(Some("myqueue"));
        secure.secure_transport = true;
        let signature_mismatch = |outcome: &Result<AuthScheme, AuthFailure>| {
            matches!(outcome, Err(AuthFailure::SignatureMismatch { .. }))
        };
        type Expected = fn(&Result<AuthScheme, AuthFailure>) -> bool;
        let cases: [(String, Access, Expected); 11] = [
            // Unreadable: refused as it would be without the token.
            (
                bound.replace("&sig=", "&sig=!"),
                Access::PEEK_MESSAGES,
                |outcome| *outcome == Err(AuthFailure::MalformedSas("sig")),
            ),
            (
                format!("{grant}&{key}&sduoid=someone-else&sig=!").replace("skt=2026", "skt=x"),
                Access::PEEK_MESSAGES,
                |outcome| *outcome == Err(AuthFailure::MalformedSas("sig")),
            ),
            (
                bound.replace("skt=2026-11-22T00:00:00Z", "skt=yesterday"),
                Access::PEEK_MESSAGES,
                |outcome| *outcome == Err(AuthFailure::MalformedSas("skt")),
            ),
            (
                bound.replace("sv=2025-07-05&", ""),
                Access::PEEK_MESSAGES,
                |outcome| *outcome == Err(AuthFailure::MissingSasField("sv")),
            ),
            // Readable but forged, or another user's: the signature or the user fails.
            (
                forged_sig(&bound),
                Access::PEEK_MESSAGES,
                signature_mismatch,
            ),
            (
                forged_sig(&unbound),
                Access::PEEK_MESSAGES,
                signature_mismatch,
            ),
            (
                sas::tests::sign_delegated(
                    &format!("{grant}&{key}&sduoid=someone-else"),
                    "myqueue",
                ),
                Access::PEEK_MESSAGES,
                |outcome| *outcome == Err(AuthFailure::DelegatedUserMismatch),
            ),
            // Good: the SAS decides, and the token does not widen it.
            (bound.clone(), Access::PEEK_MESSAGES, |outcome| {
                *outcome == Ok(AuthScheme::UserDelegationSas)
            }),
            (unbound.clone(), Access::PUT_MESSAGE, |outcome| {
                *outcome == Err(AuthFailure::PermissionMismatch)
            }),
            (service_sas.to_string(), Access::PEEK_MESSAGES, |outcome| {
                *outcome == Ok(AuthScheme::ServiceSas)
            }),
            (service_sas.to_string(), Access::GET_QUEUE_ACL, |outcome| {
                *outcome == Err(AuthFailure::OperationNotAllowed)
            }),
        ];
        for (sas, access, expected) in cases {
            let mut headers = PEEK_HEADERS.to_vec();
            headers.push(("Authorization", user.as_str()));
            let request = request(
                "GET",
                &format!("/devstoreaccount1/myqueue/messages?peekonly=true&{sas}"),
                &headers,
            );
            let outcome = authenticator
                .authenticate(&request, &query_of(&request), &secure, access, &no_policy)
                .map(|principal| principal.scheme);
            assert!(expected(&outcome), "{sas} {access:?}: {outcome:?}");
        }
        // Get User Delegation Key takes the token alone: a readable SAS beside it grants
        // nothing and is left unused, an unreadable one is refused.
        let target = "/devstoreaccount1/?restype=service&comp=userdelegationkey";
        let mut at_account = context(None);
        at_account.secure_transport = true;
        for (sas, expected) in [
            (service_sas.to_string(), Ok(AuthScheme::Bearer)),
            (
                service_sas.replace("&sig=", "&sig=!"),
                Err(AuthFailure::MalformedSas("sig")),
            ),
        ] {
            let mut headers = PEEK_HEADERS.to_vec();
            headers.push(("Authorization", user.as_str()));
            let request = request("POST", &format!("{target}&{sas}"), &headers);
            let outcome = authenticator
                .authenticate(
                    &request,
                    &query_of(&request),
                    &at_account,
                    Access::GET_USER_DELEGATION_KEY,
                    &no_policy,
                )
                .map(|principal| principal.scheme);
            assert_eq!(outcome, expected, "{sas}");
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
}
