//! XML of Get User Delegation Key: the `KeyInfo` request body and the `UserDelegationKey`
//! answer, as the service's REST reference and the SDKs' models spell them.
//!
//! ```text
//! <KeyInfo><Start>…</Start><Expiry>…</Expiry><DelegatedUserTid>…</DelegatedUserTid></KeyInfo>
//! <UserDelegationKey><SignedOid/><SignedTid/><SignedStart/><SignedExpiry/><SignedService/>
//!   <SignedVersion/><SignedDelegatedUserTid/><Value/></UserDelegationKey>
//! ```

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::{BufMut, BytesMut};

use crate::auth::delegation::{UserDelegationKey, SIGNED_SERVICE_QUEUE};
use crate::error::StorageError;
use crate::time::{format_iso8601_7, parse_iso8601_ms};

use super::settings_xml::{names, set_once, text_only, walk, Visit};
use super::xml::{element, DECLARATION};

/// A `KeyInfo` body, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyInfo {
    /// `Start`, in ms since the Unix epoch; the key starts when asked for without one.
    pub start_ms: Option<u64>,
    /// `Expiry`, in ms since the Unix epoch.
    pub expiry_ms: u64,
    /// `DelegatedUserTid`: the tenant of a user of another tenant the key is for.
    pub delegated_user_tid: Option<String>,
}

/// Reads a Get User Delegation Key body. Not a `KeyInfo` document, or no `Expiry`:
/// `InvalidXmlDocument`; a time that is not ISO 8601: `InvalidXmlNodeValue`. Unknown elements
/// are ignored, as in the other documents.
pub fn key_info(body: &[u8]) -> Result<KeyInfo, StorageError> {
    let mut start_ms = None;
    let mut expiry_ms = None;
    let mut delegated_user_tid = None;
    walk(body, |visit| {
        match visit {
            Visit::Open { path, .. } => {
                if let [root] = names(path).as_slice() {
                    if *root != "KeyInfo" {
                        return Err(StorageError::InvalidXmlDocument);
                    }
                }
            }
            Visit::Close {
                path,
                text,
                has_children,
            } => {
                let time = || parse_iso8601_ms(text).ok_or(StorageError::InvalidXmlNodeValue);
                match names(path).as_slice() {
                    ["KeyInfo", "Start"] => {
                        text_only(has_children)?;
                        set_once(&mut start_ms, time()?)?;
                    }
                    ["KeyInfo", "Expiry"] => {
                        text_only(has_children)?;
                        set_once(&mut expiry_ms, time()?)?;
                    }
                    ["KeyInfo", "DelegatedUserTid"] => {
                        text_only(has_children)?;
                        let tenant = (!text.is_empty()).then(|| text.to_string());
                        set_once(&mut delegated_user_tid, tenant)?;
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    })?;
    Ok(KeyInfo {
        start_ms,
        expiry_ms: expiry_ms.ok_or(StorageError::InvalidXmlDocument)?,
        delegated_user_tid: delegated_user_tid.flatten(),
    })
}

/// Encodes the `UserDelegationKey` answer. Times are whole seconds, `2026-11-22T00:00:00Z`, as
/// the service writes them (and the JavaScript SDK writes them back in a SAS).
pub fn user_delegation_key_into(out: &mut BytesMut, key: &UserDelegationKey) {
    out.put_slice(DECLARATION);
    out.put_slice(b"<UserDelegationKey>");
    element(out, b"SignedOid", key.signed_oid.as_bytes());
    element(out, b"SignedTid", key.signed_tid.as_bytes());
    element(out, b"SignedStart", &iso8601_seconds(key.signed_start_ms));
    element(out, b"SignedExpiry", &iso8601_seconds(key.signed_expiry_ms));
    element(out, b"SignedService", SIGNED_SERVICE_QUEUE.as_bytes());
    element(out, b"SignedVersion", key.signed_version.as_bytes());
    if let Some(tenant) = &key.signed_delegated_user_tid {
        element(out, b"SignedDelegatedUserTid", tenant.as_bytes());
    }
    element(out, b"Value", BASE64.encode(key.value).as_bytes());
    out.put_slice(b"</UserDelegationKey>");
}

/// `2026-11-22T00:00:00Z`: ISO 8601 to the second.
fn iso8601_seconds(unix_ms: u64) -> [u8; 20] {
    let full = format_iso8601_7(unix_ms);
    let mut seconds = [b'Z'; 20];
    seconds[..19].copy_from_slice(&full[..19]);
    seconds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-22T00:00:00Z.
    const NOVEMBER_22_MS: u64 = 1_795_305_600_000;

    #[test]
    fn key_info_table() {
        let full = KeyInfo {
            start_ms: Some(NOVEMBER_22_MS),
            expiry_ms: NOVEMBER_22_MS + 3_600_000,
            delegated_user_tid: Some("ab1f708d-50f6-404c-a006-d71b2ac7a606".to_string()),
        };
        let cases: &[(&str, Result<KeyInfo, StorageError>)] = &[
            (
                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<KeyInfo><Start>2026-11-22T00:00:00Z\
                 </Start><Expiry>2026-11-22T01:00:00Z</Expiry><DelegatedUserTid>\
                 ab1f708d-50f6-404c-a006-d71b2ac7a606</DelegatedUserTid></KeyInfo>",
                Ok(full.clone()),
            ),
            (
                "<KeyInfo><Expiry>2026-11-22T01:00:00.5Z</Expiry><Other>x</Other></KeyInfo>",
                Ok(KeyInfo {
                    start_ms: None,
                    expiry_ms: NOVEMBER_22_MS + 3_600_500,
                    delegated_user_tid: None,
                }),
            ),
            (
                "<KeyInfo><Start>2026-11-22T00:00:00Z</Start></KeyInfo>",
                Err(StorageError::InvalidXmlDocument),
            ),
            ("", Err(StorageError::InvalidXmlDocument)),
            (
                "<Key><Expiry>2026-11-22T01:00:00Z</Expiry></Key>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (
                "<KeyInfo><Expiry>tomorrow</Expiry></KeyInfo>",
                Err(StorageError::InvalidXmlNodeValue),
            ),
            (
                "<KeyInfo><Expiry>2026-11-22T01:00:00Z</Expiry><Expiry>2026-11-22T01:00:00Z\
                 </Expiry></KeyInfo>",
                Err(StorageError::InvalidXmlDocument),
            ),
            (
                "<KeyInfo><Expiry><b>2026-11-22T01:00:00Z</b></Expiry></KeyInfo>",
                Err(StorageError::InvalidXmlDocument),
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(&key_info(body.as_bytes()), expected, "{body}");
        }
    }

    #[test]
    fn user_delegation_key_layout() {
        let key = UserDelegationKey {
            signed_oid: "oid".to_string(),
            signed_tid: "tid".to_string(),
            signed_start_ms: NOVEMBER_22_MS,
            signed_expiry_ms: NOVEMBER_22_MS + 3_600_000,
            signed_version: "2026-04-06".to_string(),
            signed_delegated_user_tid: None,
            value: [0; 32],
        };
        let mut out = BytesMut::new();
        user_delegation_key_into(&mut out, &key);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><UserDelegationKey><SignedOid>oid\
             </SignedOid><SignedTid>tid</SignedTid><SignedStart>2026-11-22T00:00:00Z\
             </SignedStart><SignedExpiry>2026-11-22T01:00:00Z</SignedExpiry><SignedService>q\
             </SignedService><SignedVersion>2026-04-06</SignedVersion><Value>\
             AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=</Value></UserDelegationKey>"
        );
        let mut out = BytesMut::new();
        user_delegation_key_into(
            &mut out,
            &UserDelegationKey {
                signed_delegated_user_tid: Some("other".to_string()),
                ..key
            },
        );
        assert!(std::str::from_utf8(&out).unwrap().contains(
            "</SignedVersion><SignedDelegatedUserTid>other</SignedDelegatedUserTid><Value>"
        ));
    }
}
