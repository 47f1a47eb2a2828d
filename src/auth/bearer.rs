//! Bearer tokens (`Authorization: Bearer <JWT>`) as Azurite's `--oauth basic` checks them: the
//! token must be a JWT whose claims name a storage audience, an Azure AD issuer (v1 `sts.*` or
//! v2 `login.*` hosts; the tenant is not checked) and a lifetime that holds now, within
//! `BEARER_CLOCK_SKEW_S`. **The signature is not verified**: an emulator has no tenant's keys,
//! so any well-formed token with the right claims is accepted (Azurite does the same). Pure:
//! the time is passed in.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64_URL;
use base64::Engine;
use serde_json::Value;

use crate::limits::BEARER_CLOCK_SKEW_S;

/// Which bearer tokens are accepted, as `--oauth` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OAuthLevel {
    /// Azurite's `basic`: a well-formed JWT with a storage audience, an Azure AD issuer and a
    /// current lifetime; the signature is not verified.
    Basic,
}

impl OAuthLevel {
    /// Reads `basic`.
    pub fn parse(text: &str) -> Option<OAuthLevel> {
        match text {
            "basic" => Some(OAuthLevel::Basic),
            _ => None,
        }
    }
}

/// The scheme word of the `Authorization` header.
pub const BEARER_PREFIX: &str = "Bearer ";

/// Audiences every storage token may carry: the storage resource and its application ID.
const STORAGE_AUDIENCES: [&str; 2] = [
    "https://storage.azure.com",
    "e406a681-f3d4-42a8-90b6-c2b029497af1",
];

/// The queue endpoint suffixes of Azure's clouds, after `https://{account}.queue.core.`.
const QUEUE_ENDPOINT_SUFFIXES: [&str; 4] = [
    "windows.net",
    "chinacloudapi.cn",
    "usgovcloudapi.net",
    "cloudapi.de",
];

/// Issuers accepted, by prefix (the tenant follows): Azure AD v1 (`sts.*`) and v2 (`login.*`)
/// in the public, China, US Government and German clouds, and Microsoft's pre-production one.
const ISSUER_PREFIXES: [&str; 9] = [
    "https://sts.windows.net/",
    "https://sts.chinacloudapi.cn/",
    "https://sts.microsoftonline.de/",
    "https://sts.windows-ppe.net/",
    "https://login.microsoftonline.com/",
    "https://login.chinacloudapi.cn/",
    "https://login.microsoftonline.us/",
    "https://login.microsoftonline.de/",
    "https://login.windows-ppe.net/",
];

/// Why a bearer token was refused; the client sees 401 `InvalidAuthenticationInfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenProblem {
    /// Not three base64url parts, or a part that is not a JSON object.
    Malformed,
    /// No `aud`, or one that is not a storage audience for this account.
    Audience,
    /// No `iss`, or one that is not an Azure AD issuer.
    Issuer,
    /// No numeric `nbf` or `exp`.
    NoLifetime,
    /// `nbf` is still ahead, beyond the clock skew.
    NotYetValid,
    /// `exp` has passed, beyond the clock skew.
    Expired,
}

impl TokenProblem {
    /// The reason, in the words of Azure's `AuthenticationErrorDetail` for it (the audience,
    /// issuer and lifetime texts are the service's; a token that is not a JWT gets azq's).
    pub fn reason(self) -> &'static str {
        match self {
            TokenProblem::Malformed => "The token is not a well-formed JWT.",
            TokenProblem::Audience => "Audience validation failed. Audience did not match.",
            TokenProblem::Issuer => "Issuer validation failed. Issuer did not match.",
            TokenProblem::NoLifetime => {
                "Lifetime validation failed. The token is missing an Expiration Time."
            }
            TokenProblem::NotYetValid => "Lifetime validation failed. The token is not yet valid.",
            TokenProblem::Expired => "Lifetime validation failed. The token is expired.",
        }
    }
}

/// Who a token says its bearer is: the Entra ID object and tenant (claims `oid` and `tid`, the
/// tenant also read from a v1 or v2 issuer), as a user delegation key records them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// `oid`: the user's or service principal's object ID.
    pub object_id: Option<String>,
    /// `tid`, else the tenant segment of `iss`.
    pub tenant_id: Option<String>,
}

/// The identity a token's claims name; `None` when it is not a JWT. Claims are read as they
/// are, whether or not the token is valid (`verify` decides that).
pub fn identity(token: &str) -> Option<Identity> {
    let claims = claims(token).ok()?;
    let text = |name: &str| {
        claims
            .get(name)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
            .map(str::to_string)
    };
    let issuer_tenant = || {
        let issuer = text("iss")?;
        let after = ISSUER_PREFIXES
            .iter()
            .find_map(|prefix| issuer.strip_prefix(prefix))?;
        let tenant = after.split('/').next()?;
        (!tenant.is_empty()).then(|| tenant.to_string())
    };
    Some(Identity {
        object_id: text("oid"),
        tenant_id: text("tid").or_else(issuer_tenant),
    })
}

/// Whether `text` is a GUID in its usual form (`8-4-4-4-12` hex digits), as Entra ID tenant
/// and object IDs are.
pub fn is_guid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(group, length)| {
            group.len() == length && group.bytes().all(|byte| byte.is_ascii_hexdigit())
        })
}

/// Checks the claims of `token` (the text after `Bearer `) for a request to `account`, whose
/// `Host` header was `authority` (the emulator's own account URL is an audience too), at
/// `now_ms`.
pub fn verify(
    token: &str,
    account: &str,
    authority: Option<&str>,
    now_ms: u64,
) -> Result<(), TokenProblem> {
    let claims = claims(token)?;
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let seconds = |name: &str| claims.get(name).and_then(Value::as_f64);
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(audience)) => vec![audience.as_str()],
        Some(Value::Array(audiences)) => audiences.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !audiences
        .iter()
        .any(|audience| audience_matches(audience, account, authority))
    {
        return Err(TokenProblem::Audience);
    }
    let issuer = text("iss").ok_or(TokenProblem::Issuer)?;
    if !ISSUER_PREFIXES
        .iter()
        .any(|prefix| issuer.starts_with(prefix) && issuer.len() > prefix.len())
    {
        return Err(TokenProblem::Issuer);
    }
    let (Some(not_before_s), Some(expires_s)) = (seconds("nbf"), seconds("exp")) else {
        return Err(TokenProblem::NoLifetime);
    };
    let now_s = (now_ms / 1000) as f64;
    let skew_s = BEARER_CLOCK_SKEW_S as f64;
    if now_s + skew_s < not_before_s {
        return Err(TokenProblem::NotYetValid);
    }
    if now_s - skew_s > expires_s {
        return Err(TokenProblem::Expired);
    }
    Ok(())
}

/// The payload of a JWT `header.payload.signature` (signature unchecked, possibly empty), once
/// the header and the payload read as JSON objects.
fn claims(token: &str) -> Result<serde_json::Map<String, Value>, TokenProblem> {
    let mut parts = token.trim().split('.');
    let (Some(header), Some(payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenProblem::Malformed);
    };
    let object = |part: &str| -> Result<serde_json::Map<String, Value>, TokenProblem> {
        let bytes = BASE64_URL
            .decode(part.trim_end_matches('='))
            .map_err(|_| TokenProblem::Malformed)?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(TokenProblem::Malformed),
        }
    };
    object(header)?;
    object(payload)
}

/// Whether `audience` is one a token for `account` may carry: the storage resource, the
/// account's queue endpoint in any Azure cloud, or its URL on this emulator (`authority`).
fn audience_matches(audience: &str, account: &str, authority: Option<&str>) -> bool {
    let audience = audience.strip_suffix('/').unwrap_or(audience);
    if STORAGE_AUDIENCES.contains(&audience) {
        return true;
    }
    let Some(url) = audience.strip_prefix("https://") else {
        return false;
    };
    if let Some((named, suffix)) = url.split_once(".queue.core.") {
        return named == account && QUEUE_ENDPOINT_SUFFIXES.contains(&suffix);
    }
    match (authority, url.split_once('/')) {
        (Some(authority), Some((host, named))) => host == authority && named == account,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unsigned JWT with `claims`.
    fn token(claims: &str) -> String {
        format!(
            "{}.{}.",
            BASE64_URL.encode(br#"{"alg":"none","typ":"JWT"}"#),
            BASE64_URL.encode(claims.as_bytes())
        )
    }

    const NOW_S: u64 = 1_800_000_000;

    fn claims_with(audience: &str, issuer: &str, not_before_s: i64, expires_s: i64) -> String {
        format!(
            r#"{{"aud":"{audience}","iss":"{issuer}","iat":{not_before_s},"nbf":{not_before_s},"exp":{expires_s},"oid":"x"}}"#
        )
    }

    fn check(claims: &str) -> Result<(), TokenProblem> {
        verify(
            &token(claims),
            "devstoreaccount1",
            Some("127.0.0.1:10001"),
            NOW_S * 1000,
        )
    }

    #[test]
    fn claims_table() {
        let now = NOW_S as i64;
        let v1 = "https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/";
        let v2 = "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0";
        let skew = BEARER_CLOCK_SKEW_S as i64;
        let cases: &[(String, Result<(), TokenProblem>)] = &[
            (
                claims_with("https://storage.azure.com", v1, now - 60, now + 3600),
                Ok(()),
            ),
            (
                claims_with("https://storage.azure.com/", v2, now - 60, now + 3600),
                Ok(()),
            ),
            (
                claims_with("e406a681-f3d4-42a8-90b6-c2b029497af1", v1, now, now + 1),
                Ok(()),
            ),
            (
                claims_with(
                    "https://devstoreaccount1.queue.core.windows.net",
                    v1,
                    now,
                    now + 1,
                ),
                Ok(()),
            ),
            (
                claims_with(
                    "https://devstoreaccount1.queue.core.chinacloudapi.cn/",
                    v2,
                    now,
                    now + 1,
                ),
                Ok(()),
            ),
            (
                claims_with("https://127.0.0.1:10001/devstoreaccount1", v2, now, now + 1),
                Ok(()),
            ),
            // Within the clock skew either side.
            (
                claims_with("https://storage.azure.com", v1, now + skew, now + 3600),
                Ok(()),
            ),
            (
                claims_with("https://storage.azure.com", v1, now - 7200, now - skew),
                Ok(()),
            ),
            (
                claims_with("https://storage.azure.com", v1, now + skew + 1, now + 3600),
                Err(TokenProblem::NotYetValid),
            ),
            (
                claims_with("https://storage.azure.com", v1, now - 7200, now - skew - 1),
                Err(TokenProblem::Expired),
            ),
            (
                claims_with(
                    "https://otheraccount.queue.core.windows.net",
                    v1,
                    now,
                    now + 1,
                ),
                Err(TokenProblem::Audience),
            ),
            (
                claims_with(
                    "https://devstoreaccount1.blob.core.windows.net",
                    v1,
                    now,
                    now + 1,
                ),
                Err(TokenProblem::Audience),
            ),
            (
                claims_with("https://127.0.0.1:10001/otheraccount", v1, now, now + 1),
                Err(TokenProblem::Audience),
            ),
            (
                claims_with("https://vault.azure.net", v1, now, now + 1),
                Err(TokenProblem::Audience),
            ),
            (
                claims_with(
                    "https://storage.azure.com",
                    "https://evil.example/",
                    now,
                    now + 1,
                ),
                Err(TokenProblem::Issuer),
            ),
            (
                claims_with(
                    "https://storage.azure.com",
                    "https://sts.windows.net/",
                    now,
                    now + 1,
                ),
                Err(TokenProblem::Issuer),
            ),
            (
                format!(
                    r#"{{"aud":"https://storage.azure.com","iss":"{v1}","exp":{}}}"#,
                    now + 1
                ),
                Err(TokenProblem::NoLifetime),
            ),
            (
                format!(
                    r#"{{"aud":["x","https://storage.azure.com"],"iss":"{v1}","nbf":{now},"exp":{}}}"#,
                    now + 1
                ),
                Ok(()),
            ),
            (
                format!(r#"{{"iss":"{v1}","nbf":{now},"exp":{now}}}"#),
                Err(TokenProblem::Audience),
            ),
            ("[1,2]".to_string(), Err(TokenProblem::Malformed)),
        ];
        for (claims, expected) in cases {
            assert_eq!(check(claims), *expected, "{claims}");
        }
    }

    #[test]
    fn identity_from_claims_or_issuer() {
        let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47";
        let cases = [
            (
                format!(r#"{{"oid":"o","tid":"{tenant}","iss":"https://sts.windows.net/x/"}}"#),
                Some("o"),
                Some(tenant),
            ),
            (
                format!(r#"{{"iss":"https://login.microsoftonline.com/{tenant}/v2.0"}}"#),
                None,
                Some(tenant),
            ),
            (
                format!(r#"{{"iss":"https://sts.windows.net/{tenant}/"}}"#),
                None,
                Some(tenant),
            ),
            (
                r#"{"iss":"https://evil.example/t/","oid":""}"#.to_string(),
                None,
                None,
            ),
        ];
        for (claims, object_id, tenant_id) in cases {
            assert_eq!(
                identity(&token(&claims)),
                Some(Identity {
                    object_id: object_id.map(str::to_string),
                    tenant_id: tenant_id.map(str::to_string),
                }),
                "{claims}"
            );
        }
        assert_eq!(identity("not a jwt"), None);
    }

    #[test]
    fn guid_table() {
        assert!(is_guid("72f988bf-86f1-41af-91ab-2d7cd011db47"));
        assert!(is_guid("00000000-0000-0000-0000-000000000000"));
        for text in [
            "",
            "common",
            "72f988bf86f141af91ab2d7cd011db47",
            "72f988bf-86f1-41af-91ab-2d7cd011db4",
            "72f988bf-86f1-41af-91ab-2d7cd011db47-",
            "72f988bg-86f1-41af-91ab-2d7cd011db47",
        ] {
            assert!(!is_guid(text), "{text}");
        }
    }

    #[test]
    fn malformed_tokens_table() {
        let good = token(&claims_with(
            "https://storage.azure.com",
            "https://sts.windows.net/t/",
            NOW_S as i64,
            NOW_S as i64 + 60,
        ));
        assert_eq!(verify(&good, "a", None, NOW_S * 1000), Ok(()));
        let payload = good.split('.').nth(1).unwrap().to_string();
        for bad in [
            String::new(),
            "abc".to_string(),
            "a.b".to_string(),
            format!("{good}.extra"),
            format!("!!!.{payload}."),
            format!("{}.{payload}.", BASE64_URL.encode(b"not json")),
            format!(
                "{}.{}.",
                BASE64_URL.encode(b"{}"),
                BASE64_URL.encode(b"\"text\"")
            ),
        ] {
            assert_eq!(
                verify(&bad, "a", None, NOW_S * 1000),
                Err(TokenProblem::Malformed),
                "{bad:?}"
            );
        }
    }
}
