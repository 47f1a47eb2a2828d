//! Routing: (method, host, path, query) → the account addressed and one `Operation` per REST
//! operation. Path-style (`/account/queue/messages/id`) and host-style
//! (`account.queue.host/queue/...`) URLs; the `-secondary` account suffix is recognised here.

use crate::auth::SECONDARY_ACCOUNT_SUFFIX;
use crate::error::StorageError;
use crate::http::{Method, Query};
use crate::operation::Operation;
use smallvec::SmallVec;

/// A request path's segments after the account, inline up to four (`queue/messages/{id}` is
/// three): splitting a path costs no allocation.
pub type Segments<'r> = SmallVec<[&'r str; 4]>;

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub struct Route<'r> {
    /// The account name without any `-secondary` suffix.
    pub account: &'r str,
    /// The request addressed the account's secondary (read-only) endpoint.
    pub secondary: bool,
    /// Whether the account came from the host name rather than the first path segment.
    pub host_style: bool,
    /// The REST operation the method, path and query name.
    pub operation: Operation,
    /// The queue segment as sent, not yet validated; `None` for account-level operations.
    pub queue: Option<&'r str>,
    /// The message segment of `/queue/messages/id` as sent; `None` on every other path.
    pub message_id: Option<&'r str>,
}

/// Resolves a request to its route. `is_account` says whether a name is a known account;
/// `host_style_enabled` is false under `--disableProductStyleUrl`.
pub fn route<'r>(
    method: Method,
    host: Option<&'r str>,
    path: &'r [u8],
    query: &Query<'_>,
    is_account: impl Fn(&str) -> bool,
    host_style_enabled: bool,
) -> Result<Route<'r>, StorageError> {
    let Addressed {
        account,
        secondary,
        host_style,
        resource,
    } = addressed(host, path, is_account, host_style_enabled)?;
    let resource = &resource[..];
    let (queue, message_id) = match resource {
        [] => (None, None),
        [queue] => (Some(*queue), None),
        [queue, "messages"] => (Some(*queue), None),
        [queue, "messages", id] => (Some(*queue), Some(*id)),
        _ => return Err(StorageError::InvalidUri),
    };
    let operation = if method == Method::Options {
        Operation::Preflight
    } else {
        match resource.len() {
            0 => service_operation(method, query)?,
            1 => queue_operation(method, query)?,
            2 => messages_operation(method, query)?,
            _ => message_operation(method)?,
        }
    };
    Ok(Route {
        account,
        secondary,
        host_style,
        operation,
        queue,
        message_id,
    })
}

/// The account a request addresses and the path segments below it, the first step of routing
/// on every port (the blob and table probes of `api::probe` share it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addressed<'r> {
    /// The account name without any `-secondary` suffix; a known account.
    pub account: &'r str,
    /// The request addressed the account's secondary endpoint.
    pub secondary: bool,
    /// Whether the account came from the host name rather than the first path segment.
    pub host_style: bool,
    /// The path segments after the account (a single trailing slash dropped), none empty.
    pub resource: Segments<'r>,
}

/// The account of a request (its host's first label when host-style URLs are enabled and that
/// label is an account, else the first path segment) and the segments after it: 400
/// `InvalidUri` for a path that is not one, 404 `ResourceNotFound` for an unknown account.
pub fn addressed<'r>(
    host: Option<&'r str>,
    path: &'r [u8],
    is_account: impl Fn(&str) -> bool,
    host_style_enabled: bool,
) -> Result<Addressed<'r>, StorageError> {
    let path = std::str::from_utf8(path).map_err(|_| StorageError::InvalidUri)?;
    let path = path.strip_prefix('/').ok_or(StorageError::InvalidUri)?;
    let mut segments: Segments<'_> = if path.is_empty() {
        Segments::new()
    } else {
        split_segments(path)
    };
    // A single trailing slash addresses the same resource (`/devstoreaccount1/?comp=list`).
    if segments.last() == Some(&"") {
        segments.pop();
    }

    let host_account = host
        .filter(|_| host_style_enabled)
        .and_then(host_style_account)
        .filter(|label| is_account(strip_secondary(label).0));
    let (account_label, resource) = match host_account {
        Some(label) => (label, segments),
        None => {
            if segments.is_empty() {
                return Err(StorageError::InvalidUri);
            }
            let first = segments.remove(0);
            (first, segments)
        }
    };
    let (account, secondary) = strip_secondary(account_label);
    if !is_account(account) {
        return Err(StorageError::ResourceNotFound);
    }
    if resource.iter().any(|segment| segment.is_empty()) {
        return Err(StorageError::InvalidUri);
    }
    Ok(Addressed {
        account,
        secondary,
        host_style: host_account.is_some(),
        resource,
    })
}

/// `path.split('/')`, found by a byte scan: `str::split` with a `char` pattern runs a searcher
/// (with `memchr`) per segment, about 150 instructions each on the request path. `/` is ASCII,
/// so every cut is at a character boundary.
fn split_segments(path: &str) -> Segments<'_> {
    let mut segments = Segments::new();
    let mut start = 0;
    for (at, &byte) in path.as_bytes().iter().enumerate() {
        if byte == b'/' {
            segments.push(&path[start..at]);
            start = at + 1;
        }
    }
    segments.push(&path[start..]);
    segments
}

/// The first DNS label of a host name with a dot (`acct.queue.localhost:10001` → `acct`);
/// `None` for IP literals and single-label names such as `localhost`.
fn host_style_account(host: &str) -> Option<&str> {
    let name = if host.starts_with('[') {
        return None; // An IPv6 literal.
    } else {
        host.rsplit_once(':').map_or(host, |(name, _port)| name)
    };
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return None;
    }
    let (label, rest) = name.split_once('.')?;
    (!label.is_empty() && !rest.is_empty()).then_some(label)
}

fn strip_secondary(label: &str) -> (&str, bool) {
    match label.strip_suffix(SECONDARY_ACCOUNT_SUFFIX) {
        Some(account) => (account, true),
        None => (label, false),
    }
}

fn service_operation(method: Method, query: &Query<'_>) -> Result<Operation, StorageError> {
    let comp = query.get("comp");
    let restype = query.get("restype");
    match (method, restype, comp) {
        (Method::Get, _, Some("list")) => Ok(Operation::ListQueues),
        (Method::Get, Some("service"), Some("properties")) => Ok(Operation::GetServiceProperties),
        (Method::Put, Some("service"), Some("properties")) => Ok(Operation::SetServiceProperties),
        (Method::Get, Some("service"), Some("stats")) => Ok(Operation::GetServiceStats),
        (Method::Post, Some("service"), Some("userdelegationkey")) => {
            Ok(Operation::GetUserDelegationKey)
        }
        (Method::Get | Method::Put, _, None) => Err(StorageError::MissingRequiredQueryParameter),
        (Method::Get | Method::Put, _, Some(_)) => Err(StorageError::InvalidQueryParameterValue),
        _ => Err(StorageError::UnsupportedHttpVerb),
    }
}

fn queue_operation(method: Method, query: &Query<'_>) -> Result<Operation, StorageError> {
    match (method, query.get("comp")) {
        (Method::Put, None) => Ok(Operation::CreateQueue),
        (Method::Delete, None) => Ok(Operation::DeleteQueue),
        (Method::Get | Method::Head, Some("metadata")) => Ok(Operation::GetQueueMetadata),
        (Method::Put, Some("metadata")) => Ok(Operation::SetQueueMetadata),
        (Method::Get | Method::Head, Some("acl")) => Ok(Operation::GetQueueAcl),
        (Method::Put, Some("acl")) => Ok(Operation::SetQueueAcl),
        (Method::Get | Method::Head, None) => Err(StorageError::MissingRequiredQueryParameter),
        (Method::Get | Method::Head | Method::Put | Method::Delete, Some(_)) => {
            Err(StorageError::InvalidQueryParameterValue)
        }
        _ => Err(StorageError::UnsupportedHttpVerb),
    }
}

fn messages_operation(method: Method, query: &Query<'_>) -> Result<Operation, StorageError> {
    match method {
        Method::Post => Ok(Operation::PutMessage),
        Method::Get => match query.get("peekonly") {
            None => Ok(Operation::GetMessages),
            Some(value) if value.eq_ignore_ascii_case("false") => Ok(Operation::GetMessages),
            Some(value) if value.eq_ignore_ascii_case("true") => Ok(Operation::PeekMessages),
            Some(_) => Err(StorageError::InvalidQueryParameterValue),
        },
        Method::Delete => Ok(Operation::ClearMessages),
        _ => Err(StorageError::UnsupportedHttpVerb),
    }
}

fn message_operation(method: Method) -> Result<Operation, StorageError> {
    match method {
        Method::Put => Ok(Operation::UpdateMessage),
        Method::Delete => Ok(Operation::DeleteMessage),
        _ => Err(StorageError::UnsupportedHttpVerb),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `split_segments` cuts where `str::split('/')` does (the naive oracle), empty segments
    /// and multi-byte characters included.
    #[test]
    fn segments_split_as_str_split_does() {
        for path in [
            "",
            "/",
            "a",
            "a/",
            "/a",
            "a/b/c",
            "a//b",
            "//",
            "é/ü/€",
            "acct/queue/messages",
            "a/b/c/d/e/f",
        ] {
            let expected: Vec<&str> = path.split('/').collect();
            assert_eq!(split_segments(path).to_vec(), expected, "{path:?}");
        }
    }

    #[test]
    fn every_operation_is_listed_at_its_index_with_a_distinct_name() {
        for (index, operation) in Operation::ALL.into_iter().enumerate() {
            assert_eq!(operation.index(), index);
            assert_eq!(format!("{operation:?}"), operation.name());
        }
    }

    fn resolve(method: Method, host: &str, target: &str) -> Result<Route<'static>, StorageError> {
        let target: &'static str = Box::leak(target.to_string().into_boxed_str());
        let host: &'static str = Box::leak(host.to_string().into_boxed_str());
        let (path, raw_query) = target.split_once('?').unwrap_or((target, ""));
        let query =
            Query::parse(raw_query.as_bytes()).ok_or(StorageError::InvalidQueryParameterValue)?;
        route(
            method,
            Some(host),
            path.as_bytes(),
            &query,
            |name| name == "devstoreaccount1",
            true,
        )
    }

    fn operation(method: Method, target: &str) -> Result<Operation, StorageError> {
        resolve(method, "127.0.0.1:10001", target).map(|route| route.operation)
    }

    #[test]
    fn operations_table() {
        use Method::*;
        use Operation::*;
        let cases: &[(Method, &str, Result<Operation, StorageError>)] = &[
            (Get, "/devstoreaccount1?comp=list", Ok(ListQueues)),
            (Get, "/devstoreaccount1/?comp=list&prefix=a", Ok(ListQueues)),
            (
                Get,
                "/devstoreaccount1/?restype=service&comp=properties",
                Ok(GetServiceProperties),
            ),
            (
                Put,
                "/devstoreaccount1/?restype=service&comp=properties",
                Ok(SetServiceProperties),
            ),
            (
                Get,
                "/devstoreaccount1-secondary/?restype=service&comp=stats",
                Ok(GetServiceStats),
            ),
            (
                Post,
                "/devstoreaccount1/?restype=service&comp=userdelegationkey",
                Ok(GetUserDelegationKey),
            ),
            (
                Get,
                "/devstoreaccount1/?restype=service&comp=userdelegationkey",
                Err(StorageError::InvalidQueryParameterValue),
            ),
            (Put, "/devstoreaccount1/q1", Ok(CreateQueue)),
            (Delete, "/devstoreaccount1/q1", Ok(DeleteQueue)),
            (
                Get,
                "/devstoreaccount1/q1?comp=metadata",
                Ok(GetQueueMetadata),
            ),
            (
                Head,
                "/devstoreaccount1/q1?comp=metadata",
                Ok(GetQueueMetadata),
            ),
            (
                Put,
                "/devstoreaccount1/q1?comp=metadata",
                Ok(SetQueueMetadata),
            ),
            (Get, "/devstoreaccount1/q1?comp=acl", Ok(GetQueueAcl)),
            (Put, "/devstoreaccount1/q1?comp=acl", Ok(SetQueueAcl)),
            (Post, "/devstoreaccount1/q1/messages", Ok(PutMessage)),
            (
                Get,
                "/devstoreaccount1/q1/messages?numofmessages=3",
                Ok(GetMessages),
            ),
            (
                Get,
                "/devstoreaccount1/q1/messages?peekonly=true",
                Ok(PeekMessages),
            ),
            (
                Get,
                "/devstoreaccount1/q1/messages?peekonly=TRUE",
                Ok(PeekMessages),
            ),
            (Delete, "/devstoreaccount1/q1/messages", Ok(ClearMessages)),
            (
                Put,
                "/devstoreaccount1/q1/messages/abc?popreceipt=x",
                Ok(UpdateMessage),
            ),
            (
                Delete,
                "/devstoreaccount1/q1/messages/abc?popreceipt=x",
                Ok(DeleteMessage),
            ),
            (Options, "/devstoreaccount1/q1", Ok(Preflight)),
            // Invalid inputs.
            (
                Get,
                "/nosuchaccount/q1?comp=metadata",
                Err(StorageError::ResourceNotFound),
            ),
            (Get, "/", Err(StorageError::InvalidUri)),
            (
                Get,
                "/devstoreaccount1/q1/other",
                Err(StorageError::InvalidUri),
            ),
            (
                Get,
                "/devstoreaccount1/q1/messages/a/b",
                Err(StorageError::InvalidUri),
            ),
            (
                Get,
                "/devstoreaccount1//messages",
                Err(StorageError::InvalidUri),
            ),
            (
                Post,
                "/devstoreaccount1/q1",
                Err(StorageError::UnsupportedHttpVerb),
            ),
            (
                Other,
                "/devstoreaccount1/q1",
                Err(StorageError::UnsupportedHttpVerb),
            ),
            (
                Get,
                "/devstoreaccount1/q1/messages/abc",
                Err(StorageError::UnsupportedHttpVerb),
            ),
            (
                Post,
                "/devstoreaccount1/?comp=list",
                Err(StorageError::UnsupportedHttpVerb),
            ),
            (
                Get,
                "/devstoreaccount1/",
                Err(StorageError::MissingRequiredQueryParameter),
            ),
            (
                Get,
                "/devstoreaccount1/q1",
                Err(StorageError::MissingRequiredQueryParameter),
            ),
            (
                Get,
                "/devstoreaccount1/q1?comp=bogus",
                Err(StorageError::InvalidQueryParameterValue),
            ),
            (
                Get,
                "/devstoreaccount1/q1/messages?peekonly=maybe",
                Err(StorageError::InvalidQueryParameterValue),
            ),
            (
                Get,
                "/devstoreaccount1/q1?comp=%zz",
                Err(StorageError::InvalidQueryParameterValue),
            ),
            (Get, "relative", Err(StorageError::InvalidUri)),
        ];
        for (method, target, expected) in cases {
            assert_eq!(&operation(*method, target), expected, "{method:?} {target}");
        }
    }

    #[test]
    fn path_style_parts() {
        let route = resolve(
            Method::Delete,
            "127.0.0.1:10001",
            "/devstoreaccount1/q1/messages/id1?popreceipt=r",
        )
        .unwrap();
        assert_eq!(route.account, "devstoreaccount1");
        assert_eq!(route.queue, Some("q1"));
        assert_eq!(route.message_id, Some("id1"));
        assert!(!route.secondary && !route.host_style);
    }

    #[test]
    fn host_style_and_secondary() {
        let route = resolve(Method::Put, "devstoreaccount1.queue.localhost:10001", "/q1").unwrap();
        assert!(route.host_style);
        assert_eq!(
            (route.account, route.queue, route.operation),
            ("devstoreaccount1", Some("q1"), Operation::CreateQueue)
        );

        let route = resolve(
            Method::Get,
            "devstoreaccount1-secondary.queue.localhost",
            "/?comp=list",
        )
        .unwrap();
        assert!(route.secondary && route.host_style);
        assert_eq!(route.account, "devstoreaccount1");

        // A dotted host whose first label is not an account falls back to path style.
        let route = resolve(
            Method::Put,
            "host.docker.internal:10001",
            "/devstoreaccount1/q1",
        )
        .unwrap();
        assert!(!route.host_style);
        assert_eq!(route.queue, Some("q1"));

        // IP literals and single labels are never host style.
        for host in ["127.0.0.1:10001", "localhost:10001", "[::1]:10001"] {
            assert_eq!(host_style_account(host), None, "{host}");
        }
    }

    #[test]
    fn host_style_disabled_uses_path() {
        let query = Query::parse(b"").unwrap();
        let route = route(
            Method::Put,
            Some("devstoreaccount1.queue.localhost"),
            b"/devstoreaccount1/q1",
            &query,
            |name| name == "devstoreaccount1",
            false,
        )
        .unwrap();
        assert!(!route.host_style);
        assert_eq!(route.queue, Some("q1"));
    }
}
