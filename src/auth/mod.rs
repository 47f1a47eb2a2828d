//! Authentication and authorisation of requests: SharedKey and SharedKeyLite signatures, account
//! and service shared access signatures (SAS), and the accounts whose keys sign them. Pure and
//! synchronous: time, the client's address and stored access policies are passed in.
//!
//! - `accounts`: accounts and keys (HMAC state prepared once), `AZURITE_ACCOUNTS` parsing.
//! - `collation`: the header order of SharedKey canonicalisation (not byte order).
//! - `iso8601`: the instants of SAS tokens and access policies.

pub mod accounts;
pub mod collation;
pub mod iso8601;

pub use accounts::{Account, Accounts, SigningKey};
pub use iso8601::parse_iso8601_ms;
