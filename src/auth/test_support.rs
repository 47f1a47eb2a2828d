//! What the auth tests share: the development account and a body-less `Request`.

use bytes::Bytes;

use super::Accounts;
use crate::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use crate::http::request::Request;

/// A body-less request (`Request::from_parts` with an empty body).
pub fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> Request {
    Request::from_parts(method, target, headers, Bytes::new())
}

/// The Azurite development account alone.
pub fn development_accounts() -> Accounts {
    Accounts::new(&[(
        DEVELOPMENT_ACCOUNT_NAME.to_string(),
        vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
    )])
    .unwrap()
}
