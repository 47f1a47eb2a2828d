//! The storage accounts azq serves and their keys, decoded and prepared for HMAC-SHA256 once at
//! start-up: each request then clones a prepared MAC instead of hashing the key again.
//!
//! Also parses the Azurite `AZURITE_ACCOUNTS` environment value, so azq drops in where
//! azurite-queue ran.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The Azurite development account, used when `AZURITE_ACCOUNTS` is not set.
pub const DEVELOPMENT_ACCOUNT_NAME: &str = "devstoreaccount1";
/// The development account's well-known key (base64), public by design.
pub const DEVELOPMENT_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Shortest account name Azure allows.
pub const ACCOUNT_NAME_BYTES_MIN: usize = 3;
/// Longest account name Azure allows.
pub const ACCOUNT_NAME_BYTES_MAX: usize = 24;
/// Keys one account may hold: Azure gives every account two, so that they can be rotated.
pub const KEYS_PER_ACCOUNT_MAX: usize = 2;

/// One account key with its HMAC-SHA256 state already keyed.
///
/// Keying HMAC hashes the key into the inner and outer pads; doing that once here and cloning the
/// result per signature saves two SHA-256 block compressions on every request.
#[derive(Clone)]
pub struct SigningKey {
    prepared: Hmac<Sha256>,
}

impl SigningKey {
    /// Decodes a base64 account key (standard alphabet, padded) and prepares it.
    pub fn from_base64(key_base64: &str) -> Result<SigningKey, String> {
        let key = BASE64
            .decode(key_base64.trim())
            .map_err(|error| format!("the key is not valid base64 ({error})"))?;
        if key.is_empty() {
            return Err("the key is empty".to_string());
        }
        // HMAC accepts keys of any length, so this cannot fail; the error arm keeps the
        // constructor total instead of panicking.
        let prepared = Hmac::<Sha256>::new_from_slice(&key)
            .map_err(|_| "the key has an invalid length".to_string())?;
        Ok(SigningKey { prepared })
    }

    /// HMAC-SHA256 of `message` under this key.
    pub fn sign(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.prepared.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// HMAC-SHA256 of `message` under this key, base64-encoded as it travels in a request.
    pub fn sign_base64(&self, message: &[u8]) -> String {
        BASE64.encode(self.sign(message))
    }
}

impl std::fmt::Debug for SigningKey {
    /// Never prints key material, not even derived state.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("SigningKey(..)")
    }
}

/// One storage account: its name and one or two keys, any of which authorises a request.
#[derive(Clone, Debug)]
pub struct Account {
    name: String,
    keys: Vec<SigningKey>,
}

impl Account {
    /// The account name as clients spell it in URLs and `Authorization` headers.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The account's keys, primary first.
    pub fn keys(&self) -> &[SigningKey] {
        &self.keys
    }

    /// The index of the key under which `signature` is the HMAC-SHA256 of `message`, or `None`.
    /// Every key is tried and every comparison runs in constant time, so the time taken says
    /// nothing about how close a forged signature came, nor which key it was aimed at.
    pub fn matching_key_index(&self, message: &[u8], signature: &[u8; 32]) -> Option<usize> {
        let mut matched = None;
        for (index, key) in self.keys.iter().enumerate() {
            let equal = constant_time_equal(&key.sign(message), signature);
            if equal && matched.is_none() {
                matched = Some(index);
            }
        }
        matched
    }

    /// Whether `key` is one of the account's keys (compared by what each signs, in constant
    /// time): a console sign-in's proof, and how the server tells an account whose key is the
    /// public development key.
    pub fn has_key(&self, key: &SigningKey) -> bool {
        const PROBE: &[u8] = b"azq: is this one of the account's keys?";
        self.matching_key_index(PROBE, &key.sign(PROBE)).is_some()
    }

    /// Whether one of its keys is the public development key (Azurite's, in every SDK's
    /// documentation): anyone can then act as the account.
    pub fn has_public_key(&self) -> bool {
        SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).is_ok_and(|key| self.has_key(&key))
    }
}

/// Compares two MACs without an early exit: the time taken does not depend on where they
/// first differ, so an attacker cannot guess a signature byte by byte.
pub fn constant_time_equal(left: &[u8; 32], right: &[u8; 32]) -> bool {
    let mut difference = 0u8;
    for (left_byte, right_byte) in left.iter().zip(right) {
        difference |= left_byte ^ right_byte;
    }
    // Keeps the optimiser from turning the fold back into a short-circuiting comparison.
    std::hint::black_box(difference) == 0
}

/// Every account the server knows.
///
/// A plain vector searched linearly: a server holds one account or a handful, and comparing a
/// few short names is faster than hashing one.
#[derive(Clone, Debug)]
pub struct Accounts {
    accounts: Vec<Account>,
}

impl Accounts {
    /// Builds the accounts from `(name, [base64 key, …])` pairs, as held in
    /// `settings::Config::accounts`. Fails with a message naming the account when a name or key
    /// is invalid, a name repeats, an account has no key or more than two, or the list is empty.
    pub fn new(accounts: &[(String, Vec<String>)]) -> Result<Accounts, String> {
        if accounts.is_empty() {
            return Err("no storage account is configured".to_string());
        }
        let mut built: Vec<Account> = Vec::with_capacity(accounts.len());
        for (name, keys_base64) in accounts {
            validate_account_name(name)?;
            if built.iter().any(|account| account.name == *name) {
                return Err(format!("account `{name}` is listed twice"));
            }
            if keys_base64.is_empty() || keys_base64.len() > KEYS_PER_ACCOUNT_MAX {
                return Err(format!(
                    "account `{name}` must have one or {KEYS_PER_ACCOUNT_MAX} keys, not {}",
                    keys_base64.len()
                ));
            }
            let keys = keys_base64
                .iter()
                .enumerate()
                .map(|(index, key)| {
                    SigningKey::from_base64(key)
                        .map_err(|error| format!("key {} of account `{name}`: {error}", index + 1))
                })
                .collect::<Result<Vec<_>, _>>()?;
            built.push(Account {
                name: name.clone(),
                keys,
            });
        }
        Ok(Accounts { accounts: built })
    }

    /// Builds the accounts from an Azurite `AZURITE_ACCOUNTS` value (see `parse_env_value`).
    pub fn from_env_value(value: &str) -> Result<Accounts, String> {
        Accounts::new(&parse_env_value(value)?)
    }

    /// Every account's name, in the order given.
    pub fn names(&self) -> Vec<String> {
        self.accounts
            .iter()
            .map(|account| account.name().to_string())
            .collect()
    }

    /// The account named `name` (exact, case-sensitive: account names are lowercase).
    pub fn get(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|account| account.name == name)
    }
}

/// Splits an Azurite `AZURITE_ACCOUNTS` value, `acct1:key1[:key2];acct2:key`, into
/// `(name, [base64 key, …])` pairs for `settings::Config::accounts`. Whitespace around names and
/// keys is trimmed and empty entries (a trailing `;`) are skipped. Keys are not decoded here;
/// `Accounts::new` does that and reports bad base64.
pub fn parse_env_value(value: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut accounts = Vec::new();
    for entry in value.split(';').map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        let mut fields = entry.split(':').map(str::trim);
        // `split` always yields at least one field.
        let name = fields.next().unwrap_or_default();
        let keys: Vec<String> = fields.map(str::to_string).collect();
        if keys.is_empty() {
            return Err(format!(
                "AZURITE_ACCOUNTS entry `{name}` has no key (expected `name:key1[:key2]`)"
            ));
        }
        if keys.iter().any(String::is_empty) {
            return Err(format!("AZURITE_ACCOUNTS entry `{name}` has an empty key"));
        }
        accounts.push((name.to_string(), keys));
    }
    if accounts.is_empty() {
        return Err("AZURITE_ACCOUNTS names no account".to_string());
    }
    Ok(accounts)
}

/// Azure's rule: 3 to 24 lowercase letters and digits. It also guarantees that a `-secondary`
/// suffix can never be part of a real name.
fn validate_account_name(name: &str) -> Result<(), String> {
    let length_ok = (ACCOUNT_NAME_BYTES_MIN..=ACCOUNT_NAME_BYTES_MAX).contains(&name.len());
    let characters_ok = name
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit());
    if length_ok && characters_ok {
        Ok(())
    } else {
        Err(format!(
            "account name `{name}` must be {ACCOUNT_NAME_BYTES_MIN} to {ACCOUNT_NAME_BYTES_MAX} lowercase letters and digits"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};

    const KEY_A: &str = "a2V5LW51bWJlci1vbmU="; // "key-number-one"
    const KEY_B: &str = "a2V5LW51bWJlci10d28="; // "key-number-two"

    /// Accounts expected after parsing, with their number of keys (`None`: absent).
    type KeyCounts<'a> = &'a [(&'a str, Option<usize>)];

    fn key_counts(accounts: &Accounts, names: &[&str]) -> Vec<Option<usize>> {
        names
            .iter()
            .map(|name| accounts.get(name).map(|account| account.keys().len()))
            .collect()
    }

    #[test]
    fn development_account_from_config_pairs() {
        let accounts = Accounts::new(&[(
            DEVELOPMENT_ACCOUNT_NAME.to_string(),
            vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
        )])
        .unwrap();
        let account = accounts.get(DEVELOPMENT_ACCOUNT_NAME).unwrap();
        assert_eq!(account.name(), DEVELOPMENT_ACCOUNT_NAME);
        assert_eq!(account.keys().len(), 1);
        assert!(accounts.get("devstoreaccount2").is_none());
        assert!(accounts.get("DEVSTOREACCOUNT1").is_none());
    }

    #[test]
    fn env_value_valid_table() {
        let cases: &[(&str, KeyCounts)] = &[
            (&format!("acct1:{KEY_A}"), &[("acct1", Some(1))]),
            (&format!("acct1:{KEY_A}:{KEY_B}"), &[("acct1", Some(2))]),
            (
                &format!("acct1:{KEY_A}:{KEY_B};acct2:{KEY_B}"),
                &[("acct1", Some(2)), ("acct2", Some(1)), ("acct3", None)],
            ),
            (&format!("acct1:{KEY_A};"), &[("acct1", Some(1))]),
            (
                &format!("  acct1 : {KEY_A} ; acct2:{KEY_B} ;\n"),
                &[("acct1", Some(1)), ("acct2", Some(1))],
            ),
        ];
        for (value, expected) in cases {
            let accounts = Accounts::from_env_value(value)
                .unwrap_or_else(|error| panic!("{value:?}: {error}"));
            let names: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
            let counts: Vec<Option<usize>> = expected.iter().map(|(_, count)| *count).collect();
            assert_eq!(key_counts(&accounts, &names), counts, "{value:?}");
        }
    }

    #[test]
    fn env_value_invalid_table() {
        let cases: &[(&str, &str)] = &[
            ("", "names no account"),
            (" ; ;", "names no account"),
            ("acct1", "has no key"),
            ("acct1:", "empty key"),
            (&format!("acct1:{KEY_A}:"), "empty key"),
            ("acct1:not*base64", "not valid base64"),
            ("acct1:YWJj=", "not valid base64"),
            (&format!("Acct1:{KEY_A}"), "lowercase letters and digits"),
            (&format!("ab:{KEY_A}"), "lowercase letters and digits"),
            (&format!("acct-1:{KEY_A}"), "lowercase letters and digits"),
            (&format!(":{KEY_A}"), "lowercase letters and digits"),
            (&format!("acct1:{KEY_A};acct1:{KEY_B}"), "listed twice"),
            (&format!("acct1:{KEY_A}:{KEY_B}:{KEY_A}"), "one or 2 keys"),
        ];
        for (value, message) in cases {
            let error = Accounts::from_env_value(value).unwrap_err();
            assert!(error.contains(message), "{value:?}: {error}");
        }
    }

    #[test]
    fn empty_configuration_is_rejected() {
        assert!(Accounts::new(&[]).is_err());
        assert!(Accounts::new(&[("acct1".to_string(), vec![])]).is_err());
    }

    #[test]
    fn constant_time_equal_table() {
        let base = [0x5a_u8; 32];
        assert!(constant_time_equal(&base, &base));
        assert!(constant_time_equal(&[0; 32], &[0; 32]));
        for position in [0, 1, 15, 30, 31] {
            for flipped_bit in [0x01, 0x80] {
                let mut other = base;
                other[position] ^= flipped_bit;
                assert!(
                    !constant_time_equal(&base, &other),
                    "{position} {flipped_bit}"
                );
                assert!(
                    !constant_time_equal(&other, &base),
                    "{position} {flipped_bit}"
                );
            }
        }
        assert!(!constant_time_equal(&[0; 32], &[0xff; 32]));
    }

    #[test]
    fn matching_key_index_tries_every_key() {
        let accounts = Accounts::from_env_value(&format!("acct1:{KEY_A}:{KEY_B}")).unwrap();
        let account = accounts.get("acct1").unwrap();
        let message = b"string to sign";
        let by_first = account.keys()[0].sign(message);
        let by_second = account.keys()[1].sign(message);
        assert_eq!(account.matching_key_index(message, &by_first), Some(0));
        assert_eq!(account.matching_key_index(message, &by_second), Some(1));
        assert_eq!(account.matching_key_index(b"other", &by_first), None);
        let mut forged = by_second;
        forged[31] ^= 1;
        assert_eq!(account.matching_key_index(message, &forged), None);
    }

    #[test]
    fn signing_key_matches_plain_hmac() {
        // HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog"), RFC-style vector.
        let key = SigningKey::from_base64("a2V5").unwrap();
        let expected = "97yD9DBThCSxMpjmqm+xQ+9NWaFJRhdZl0edvC0aPNg=";
        let message = b"The quick brown fox jumps over the lazy dog";
        assert_eq!(key.sign_base64(message), expected);
        // A second use of the same prepared key gives the same answer: the clone isolates state.
        assert_eq!(key.sign_base64(message), expected);
        assert_eq!(format!("{key:?}"), "SigningKey(..)");
    }
}
