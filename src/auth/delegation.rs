//! User delegation keys (Get User Delegation Key, on the queue endpoint since service version
//! 2026-02-06) and the signatures made with them (a user delegation SAS, `sv` 2025-07-05 on).
//!
//! Azure issues a key to an Entra ID identity for a window of at most seven days and keeps it;
//! a SAS signed with it names the key by its fields (`skoid`, `sktid`, `skt`, `ske`, `sks`,
//! `skv`, `skdutid`). azq keeps nothing: a key's value is derived from the account key and
//! those fields, `HMAC-SHA256(account key, label, oid, tid, start, expiry, service, version,
//! delegated tenant)`, each length-prefixed, times in whole seconds since the epoch.
//! So verifying a SAS derives the key again from the fields it carries: a restart (with or
//! without persistence) invalidates no SAS already issued, any shard verifies any key, and a
//! SAS whose key fields were altered no longer verifies. Only the account key's holder can
//! derive a key, as only it could sign an account SAS. Every account key is tried, primary
//! first, as for any signature: a key issued before a rotation keeps working while the old
//! key is still listed.
//!
//! Pure: the time and the identity of the token that asked are passed in.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::accounts::{constant_time_equal, Account, SigningKey};

/// The oldest `sv` a queue user delegation SAS may carry: 2025-07-05, the version whose layout
/// (with `skdutid` and `sduoid`) the SDKs sign. @azure/storage-queue 12.30.0 signs a user
/// delegation SAS for any `sv` from 2025-07-05 on and refuses older ones, and its two live
/// user delegation tests sign with `sv=2025-07-05` against the service and succeed; the key
/// itself comes from Get User Delegation Key, on the queue endpoint since 2026-02-06 (the
/// version the Python and JavaScript SDKs brought it with). Both SDKs sign the one layout
/// `sas::write_string_to_sign` writes.
pub const USER_DELEGATION_SAS_VERSION_OLDEST: &str = "2025-07-05";

/// `SignedService` of the keys azq issues, and the `sks` a queue SAS must name: the queue
/// service (a key from the blob endpoint says `b`).
pub const SIGNED_SERVICE_QUEUE: &str = "q";

/// Binds a derived value to its purpose, so no other HMAC azq computes under an account key
/// (a SharedKey or SAS string-to-sign) can collide with it.
const DERIVATION_LABEL: &str = "azq user delegation key v1";

/// The fields that name a user delegation key, as `Get User Delegation Key` answers them and a
/// SAS repeats them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyFields<'a> {
    /// `SignedOid` / `skoid`: the Entra ID object the key was issued to.
    pub signed_oid: &'a str,
    /// `SignedTid` / `sktid`: that object's tenant.
    pub signed_tid: &'a str,
    /// `SignedStart` / `skt`, in ms since the Unix epoch (whole seconds are what count).
    pub signed_start_ms: u64,
    /// `SignedExpiry` / `ske`, in ms since the Unix epoch (whole seconds are what count).
    pub signed_expiry_ms: u64,
    /// `SignedService` / `sks`.
    pub signed_service: &'a str,
    /// `SignedVersion` / `skv`: the service version of the request that got the key.
    pub signed_version: &'a str,
    /// `SignedDelegatedUserTid` / `skdutid`: the tenant of the user the key delegates to,
    /// when one was asked for (`DelegatedUserTid`).
    pub signed_delegated_user_tid: Option<&'a str>,
}

/// A user delegation key as Get User Delegation Key answers it: its fields and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDelegationKey {
    /// `SignedOid`: the `oid` of the token that asked.
    pub signed_oid: String,
    /// `SignedTid`: the tenant of the token that asked.
    pub signed_tid: String,
    /// `SignedStart`, whole seconds, in ms since the Unix epoch.
    pub signed_start_ms: u64,
    /// `SignedExpiry`, whole seconds, in ms since the Unix epoch.
    pub signed_expiry_ms: u64,
    /// `SignedVersion`: the request's service version.
    pub signed_version: String,
    /// `SignedDelegatedUserTid`: the `DelegatedUserTid` asked for, if one was.
    pub signed_delegated_user_tid: Option<String>,
    /// `Value`: the key itself (sent base64).
    pub value: [u8; 32],
}

impl UserDelegationKey {
    /// Issues the key for the queue service of `account`, derived under its primary key; the
    /// times are cut to whole seconds, as the service answers them.
    pub fn issue(
        account: &Account,
        signed_oid: String,
        signed_tid: String,
        (start_ms, expiry_ms): (u64, u64),
        signed_version: String,
        signed_delegated_user_tid: Option<String>,
    ) -> UserDelegationKey {
        let mut key = UserDelegationKey {
            signed_oid,
            signed_tid,
            signed_start_ms: start_ms / 1000 * 1000,
            signed_expiry_ms: expiry_ms / 1000 * 1000,
            signed_version,
            signed_delegated_user_tid,
            value: [0; 32],
        };
        key.value = key_value(&account.keys()[0], &key.fields());
        key
    }

    /// The fields that name the key, which derive its value.
    pub fn fields(&self) -> KeyFields<'_> {
        KeyFields {
            signed_oid: &self.signed_oid,
            signed_tid: &self.signed_tid,
            signed_start_ms: self.signed_start_ms,
            signed_expiry_ms: self.signed_expiry_ms,
            signed_service: SIGNED_SERVICE_QUEUE,
            signed_version: &self.signed_version,
            signed_delegated_user_tid: self.signed_delegated_user_tid.as_deref(),
        }
    }
}

/// The value of the key named by `fields`, derived under the account key `key`.
/// Each field is written with its length first, so no two sets of fields make the same
/// message (an `oid` ending in a line break cannot take text from the `tid` after it).
pub fn key_value(key: &SigningKey, fields: &KeyFields<'_>) -> [u8; 32] {
    let mut message = String::with_capacity(256);
    for part in [
        DERIVATION_LABEL,
        fields.signed_oid,
        fields.signed_tid,
        &(fields.signed_start_ms / 1000).to_string(),
        &(fields.signed_expiry_ms / 1000).to_string(),
        fields.signed_service,
        fields.signed_version,
        fields.signed_delegated_user_tid.unwrap_or_default(),
    ] {
        message.push_str(&part.len().to_string());
        message.push(':');
        message.push_str(part);
        message.push('\n');
    }
    key.sign(message.as_bytes())
}

/// The index of the account key under whose derived user delegation key `signature` is the
/// HMAC-SHA256 of `string_to_sign`, or `None`. Every key is tried and compared in constant
/// time, as `Account::matching_key_index` does.
pub fn matching_key_index(
    account: &Account,
    fields: &KeyFields<'_>,
    string_to_sign: &[u8],
    signature: &[u8; 32],
) -> Option<usize> {
    let mut matched = None;
    for (index, key) in account.keys().iter().enumerate() {
        let equal = constant_time_equal(&sign(&key_value(key, fields), string_to_sign), signature);
        if equal && matched.is_none() {
            matched = Some(index);
        }
    }
    matched
}

/// The signature, base64 as a SAS's `sig` carries it, that a client makes over
/// `string_to_sign` with the value of the key named by `fields`, derived under the account key
/// `key`: what an SDK does with a key azq issued. For the tests and fuzz checks that sign as
/// clients do.
pub fn client_signature_base64(
    key: &SigningKey,
    fields: &KeyFields<'_>,
    string_to_sign: &[u8],
) -> String {
    BASE64.encode(sign(&key_value(key, fields), string_to_sign))
}

/// HMAC-SHA256 of `message` under a derived key, as a client signs a SAS with the key's value.
fn sign(derived: &[u8; 32], message: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(derived).expect("HMAC accepts any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::test_support::development_accounts;
    use crate::auth::Accounts;
    use crate::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};

    const FIELDS: KeyFields<'static> = KeyFields {
        signed_oid: "23657296-5cd5-45b0-a809-d972a7f4dfe1",
        signed_tid: "ab1f708d-50f6-404c-a006-d71b2ac7a606",
        signed_start_ms: 1_795_305_600_000,
        signed_expiry_ms: 1_795_309_200_000,
        signed_service: SIGNED_SERVICE_QUEUE,
        signed_version: "2026-04-06",
        signed_delegated_user_tid: None,
    };

    #[test]
    fn the_value_depends_on_every_field_and_on_whole_seconds_only() {
        let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
        let value = key_value(&key, &FIELDS);
        // Deterministic: the same fields always give the same key (a restart changes nothing).
        assert_eq!(key_value(&key, &FIELDS), value);
        // Milliseconds within the second do not count: clients send whole seconds, some
        // re-format them.
        let fraction = KeyFields {
            signed_start_ms: FIELDS.signed_start_ms + 999,
            ..FIELDS
        };
        assert_eq!(key_value(&key, &fraction), value);
        let changed = [
            KeyFields {
                signed_oid: "another",
                ..FIELDS
            },
            KeyFields {
                signed_tid: "another",
                ..FIELDS
            },
            KeyFields {
                signed_start_ms: FIELDS.signed_start_ms + 1000,
                ..FIELDS
            },
            KeyFields {
                signed_expiry_ms: FIELDS.signed_expiry_ms + 1000,
                ..FIELDS
            },
            KeyFields {
                signed_service: "b",
                ..FIELDS
            },
            KeyFields {
                signed_version: "2026-02-06",
                ..FIELDS
            },
            KeyFields {
                signed_delegated_user_tid: Some("tenant"),
                ..FIELDS
            },
        ];
        for fields in changed {
            assert_ne!(key_value(&key, &fields), value, "{fields:?}");
        }
        // An empty delegated tenant is no delegated tenant, as an empty SAS field is no field.
        let empty = KeyFields {
            signed_delegated_user_tid: Some(""),
            ..FIELDS
        };
        assert_eq!(key_value(&key, &empty), value);
        // Fields cannot run into each other: moving text across a line break changes it.
        let shifted = KeyFields {
            signed_oid: "a\nb",
            signed_tid: "c",
            ..FIELDS
        };
        let unshifted = KeyFields {
            signed_oid: "a",
            signed_tid: "b\nc",
            ..FIELDS
        };
        assert_ne!(key_value(&key, &shifted), key_value(&key, &unshifted));
        // Another account key derives another value.
        let other = SigningKey::from_base64("a2V5LW51bWJlci10d28=").unwrap();
        assert_ne!(key_value(&other, &FIELDS), value);
    }

    #[test]
    fn an_issued_key_is_the_one_its_fields_derive() {
        let accounts = development_accounts();
        let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
        let key = UserDelegationKey::issue(
            account,
            FIELDS.signed_oid.to_string(),
            FIELDS.signed_tid.to_string(),
            (FIELDS.signed_start_ms + 123, FIELDS.signed_expiry_ms + 999),
            FIELDS.signed_version.to_string(),
            None,
        );
        assert_eq!(key.signed_start_ms, FIELDS.signed_start_ms);
        assert_eq!(key.signed_expiry_ms, FIELDS.signed_expiry_ms);
        assert_eq!(key.fields(), FIELDS);
        assert_eq!(key.value, key_value(&account.keys()[0], &FIELDS));
    }

    #[test]
    fn signatures_verify_under_any_of_the_accounts_keys() {
        let second_key = "a2V5LW51bWJlci10d28=";
        let accounts = Accounts::from_env_value(&format!(
            "{DEVELOPMENT_ACCOUNT_NAME}:{second_key}:{DEVELOPMENT_ACCOUNT_KEY}"
        ))
        .unwrap();
        let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
        let development = development_accounts();
        let issued_under = development.get(DEVELOPMENT_ACCOUNT_NAME).unwrap().keys()[0].clone();
        let string_to_sign = b"r\n\n2026-11-23\n/queue/devstoreaccount1/q";
        let signature = sign(&key_value(&issued_under, &FIELDS), string_to_sign);
        // Issued under the development key, which is now the account's second key.
        assert_eq!(
            matching_key_index(account, &FIELDS, string_to_sign, &signature),
            Some(1)
        );
        let mut forged = signature;
        forged[0] ^= 1;
        assert_eq!(
            matching_key_index(account, &FIELDS, string_to_sign, &forged),
            None
        );
        let other_fields = KeyFields {
            signed_oid: "someone else",
            ..FIELDS
        };
        assert_eq!(
            matching_key_index(account, &other_fields, string_to_sign, &signature),
            None
        );
    }
}
