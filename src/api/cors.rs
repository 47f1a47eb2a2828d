//! CORS, as Azure Storage does it: a preflight (`OPTIONS`) is answered from the account's rules
//! without authentication, and an actual request whose `Origin` a rule allows gets the
//! `Access-Control-*` headers that let a browser read the response. Rules are tried in order and
//! the first that matches decides.
//!
//! Azure's answers ("CORS support for the Azure Storage services"):
//! - preflight allowed: 200 with the request's origin, method and headers echoed, the rule's
//!   max age and `Access-Control-Allow-Credentials: true`; refused: 403 `CorsPreflightFailure`;
//!   without `Origin` or `Access-Control-Request-Method`: 400 `InvalidHeaderValue`, "A required
//!   CORS header is not present." (the page says 400; code and text are the service's status
//!   entry for it, which Azurite copies);
//! - actual request matched by a rule that allows every origin (`*`), with or without an
//!   `Origin` header: `Access-Control-Allow-Origin: *` and the exposed headers, and nothing
//!   else, since the answer does not depend on the origin (the page's Vary table, rows "No Yes
//!   Yes" and "Yes Yes Yes"). Browsers read `Access-Control-Expose-Headers` as a list of names,
//!   so a rule's prefix patterns (`x-ms-meta-*`) are expanded into the response's own headers
//!   that match them; plain names are listed whether or not the response has them (as Azure
//!   and Azurite do);
//! - matched by the exact origin: that origin, the exposed headers, credentials allowed and,
//!   for GET and HEAD, `Vary: Origin`;
//! - not matched (or no `Origin` and no `*` rule) while the account has rules: for GET and HEAD
//!   only `Vary: Origin`, so that a cache does not hand this answer to an origin a rule would
//!   allow; for other methods nothing.
//!
//! `Vary` goes on GET and HEAD answers only: "for requests using methods other than GET/HEAD,
//! the storage services will not set the Vary header, since responses to these methods are not
//! cached by user agents" (the page's Vary section). Azurite sets it for every method; azq
//! follows the page.

use crate::error::StorageError;
use crate::http::ResponseWriter;
use crate::queue::CorsRule;

/// The CORS headers of one response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorsHeaders {
    /// A preflight a rule allows.
    Preflight {
        /// The preflight's `Origin`, echoed even when the rule allows every origin.
        allow_origin: String,
        /// The preflight's `Access-Control-Request-Method`, echoed.
        allow_methods: String,
        /// The requested headers, when the preflight named any.
        allow_headers: Option<String>,
        /// The rule's `MaxAgeInSeconds`: how long the browser may cache this answer.
        max_age_s: u64,
    },
    /// An actual request a rule allows.
    Allowed {
        /// The request's origin, or `*` for a rule that allows every origin.
        allow_origin: String,
        /// The rule's `ExposedHeaders`, as set: names and prefix patterns, comma-separated.
        expose_headers: String,
        /// Matched by the exact origin: credentials allowed.
        exact_origin: bool,
        /// `Vary: Origin`: matched by the exact origin, on a GET or HEAD.
        vary_on_origin: bool,
    },
    /// No rule allows the GET or HEAD request, but the account has rules.
    VaryOnly,
}

impl CorsHeaders {
    /// Writes the headers into a response being built. Call after every other header: the
    /// exposed headers are chosen among those already written.
    pub fn write(&self, writer: &mut ResponseWriter<'_>) {
        match self {
            CorsHeaders::Preflight {
                allow_origin,
                allow_methods,
                allow_headers,
                max_age_s,
            } => {
                writer.header("Access-Control-Allow-Origin", allow_origin.as_bytes());
                writer.header("Access-Control-Allow-Methods", allow_methods.as_bytes());
                if let Some(allow_headers) = allow_headers {
                    writer.header("Access-Control-Allow-Headers", allow_headers.as_bytes());
                }
                writer.header_decimal("Access-Control-Max-Age", *max_age_s);
                writer.header("Access-Control-Allow-Credentials", b"true");
            }
            CorsHeaders::Allowed {
                allow_origin,
                expose_headers,
                exact_origin,
                vary_on_origin,
            } => {
                let exposed = exposed_headers(expose_headers, writer.header_names());
                writer.header("Access-Control-Allow-Origin", allow_origin.as_bytes());
                if !exposed.is_empty() {
                    writer.header("Access-Control-Expose-Headers", &exposed);
                }
                if *exact_origin {
                    writer.header("Access-Control-Allow-Credentials", b"true");
                }
                if *vary_on_origin {
                    writer.header("Vary", b"Origin");
                }
            }
            CorsHeaders::VaryOnly => writer.header("Vary", b"Origin"),
        }
    }
}

/// Evaluates a preflight. `origin`, `method` and `headers` are the request's `Origin`,
/// `Access-Control-Request-Method` and `Access-Control-Request-Headers`.
pub fn preflight(
    origin: Option<&str>,
    method: Option<&str>,
    headers: Option<&str>,
    rules: &[CorsRule],
) -> Result<CorsHeaders, StorageError> {
    let (Some(origin), Some(method)) = (origin, method) else {
        return Err(StorageError::CorsRequiredHeaderMissing);
    };
    let rule = rules
        .iter()
        .find(|rule| {
            origin_match(rule, Some(origin)).is_some()
                && method_allowed(rule, method)
                && headers.is_none_or(|headers| headers_allowed(rule, headers))
        })
        .ok_or(StorageError::CorsPreflightFailure)?;
    Ok(CorsHeaders::Preflight {
        allow_origin: origin.to_string(),
        allow_methods: method.to_string(),
        allow_headers: headers.map(str::to_string),
        max_age_s: rule.max_age_s,
    })
}

/// The CORS headers of an actual request with `origin` (its `Origin` header, if any) and
/// `method`; `None` when the account has no rules, or none applies and the method is not one
/// whose answers are cached (GET, HEAD).
pub fn actual_request(
    origin: Option<&str>,
    method: &str,
    rules: &[CorsRule],
) -> Option<CorsHeaders> {
    if rules.is_empty() {
        return None;
    }
    let cacheable = matches!(method, "GET" | "HEAD");
    let matched = rules.iter().find_map(|rule| {
        let exact_origin = origin_match(rule, origin)?;
        method_allowed(rule, method).then(|| CorsHeaders::Allowed {
            allow_origin: match origin {
                Some(origin) if exact_origin => origin.to_string(),
                _ => "*".to_string(),
            },
            expose_headers: rule.exposed_headers.clone(),
            exact_origin,
            vary_on_origin: exact_origin && cacheable,
        })
    });
    matched.or(cacheable.then_some(CorsHeaders::VaryOnly))
}

/// Whether `rule` allows `origin`: `Some(true)` by name (compared exactly, as Azure does),
/// `Some(false)` through `*` (which alone allows a request without `Origin`), `None` not at all.
fn origin_match(rule: &CorsRule, origin: Option<&str>) -> Option<bool> {
    let allowed = || rule.allowed_origins.split(',').map(str::trim);
    if origin.is_some_and(|origin| allowed().any(|allowed| allowed == origin)) {
        Some(true)
    } else if allowed().any(|allowed| allowed == "*") {
        Some(false)
    } else {
        None
    }
}

fn method_allowed(rule: &CorsRule, method: &str) -> bool {
    rule.allowed_methods
        .split(',')
        .any(|allowed| allowed.trim() == method)
}

/// The value of `Access-Control-Expose-Headers` for a rule's comma-separated `rules`: each
/// response header (of `names`, in order) that a prefix pattern (`x-ms-*`, or `*` for all) or a
/// plain name matches, ignoring ASCII case, then each plain name no response header matched.
fn exposed_headers<'n>(rules: &str, names: impl Iterator<Item = &'n [u8]>) -> Vec<u8> {
    let rules = || {
        rules
            .split(',')
            .map(str::trim)
            .filter(|rule| !rule.is_empty())
    };
    let matches = |rule: &str, name: &[u8]| match rule.strip_suffix('*') {
        Some(prefix) => name
            .get(..prefix.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes())),
        None => name.eq_ignore_ascii_case(rule.as_bytes()),
    };
    let mut exposed: Vec<&[u8]> = names
        .filter(|name| rules().any(|rule| matches(rule, name)))
        .collect();
    for rule in rules().filter(|rule| !rule.ends_with('*')) {
        if !exposed.iter().any(|name| matches(rule, name)) {
            exposed.push(rule.as_bytes());
        }
    }
    exposed.join(&b","[..])
}

/// Whether every header in the comma-separated `headers` is allowed: by name (ignoring case),
/// by a prefix rule such as `x-ms-meta-*`, or by `*`.
fn headers_allowed(rule: &CorsRule, headers: &str) -> bool {
    headers
        .split(',')
        .map(str::trim)
        .filter(|header| !header.is_empty())
        .all(|header| {
            rule.allowed_headers
                .split(',')
                .map(str::trim)
                .filter(|allowed| !allowed.is_empty())
                .any(|allowed| match allowed.strip_suffix('*') {
                    Some(prefix) => header
                        .get(..prefix.len())
                        .is_some_and(|start| start.eq_ignore_ascii_case(prefix)),
                    None => header.eq_ignore_ascii_case(allowed),
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &str, methods: &str, headers: &str) -> CorsRule {
        CorsRule {
            allowed_origins: origins.to_string(),
            allowed_methods: methods.to_string(),
            allowed_headers: headers.to_string(),
            exposed_headers: "x-ms-meta-*".to_string(),
            max_age_s: 60,
        }
    }

    /// Origin, Access-Control-Request-Method, Access-Control-Request-Headers, expected answer.
    type PreflightCase<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        Result<CorsHeaders, StorageError>,
    );

    #[test]
    fn preflight_table() {
        let rules = [
            rule(
                "https://a.example, https://b.example",
                "GET,PUT",
                "x-ms-meta-*,content-type",
            ),
            rule("*", "DELETE", ""),
        ];
        let allowed = |origin: &str, method: &str, headers: Option<&str>| {
            Ok(CorsHeaders::Preflight {
                allow_origin: origin.to_string(),
                allow_methods: method.to_string(),
                allow_headers: headers.map(str::to_string),
                max_age_s: 60,
            })
        };
        let cases: &[PreflightCase] = &[
            (
                Some("https://a.example"),
                Some("PUT"),
                None,
                allowed("https://a.example", "PUT", None),
            ),
            (
                Some("https://b.example"),
                Some("GET"),
                Some("X-MS-META-colour, Content-Type"),
                allowed(
                    "https://b.example",
                    "GET",
                    Some("X-MS-META-colour, Content-Type"),
                ),
            ),
            (
                Some("https://c.example"),
                Some("DELETE"),
                None,
                allowed("https://c.example", "DELETE", None),
            ),
            (
                Some("https://a.example"),
                Some("GET"),
                Some(""),
                allowed("https://a.example", "GET", Some("")),
            ),
            // Refused: unknown origin, method, header; origins compare exactly.
            (
                Some("https://c.example"),
                Some("GET"),
                None,
                Err(StorageError::CorsPreflightFailure),
            ),
            (
                Some("https://a.example"),
                Some("POST"),
                None,
                Err(StorageError::CorsPreflightFailure),
            ),
            (
                Some("https://a.example"),
                Some("put"),
                None,
                Err(StorageError::CorsPreflightFailure),
            ),
            (
                Some("https://A.example"),
                Some("GET"),
                None,
                Err(StorageError::CorsPreflightFailure),
            ),
            (
                Some("https://a.example"),
                Some("GET"),
                Some("x-custom"),
                Err(StorageError::CorsPreflightFailure),
            ),
            (
                Some("https://c.example"),
                Some("DELETE"),
                Some("x-custom"),
                Err(StorageError::CorsPreflightFailure),
            ),
            // Missing required headers.
            (
                None,
                Some("GET"),
                None,
                Err(StorageError::CorsRequiredHeaderMissing),
            ),
            (
                Some("https://a.example"),
                None,
                None,
                Err(StorageError::CorsRequiredHeaderMissing),
            ),
        ];
        for (origin, method, headers, expected) in cases {
            assert_eq!(
                &preflight(*origin, *method, *headers, &rules),
                expected,
                "{origin:?} {method:?} {headers:?}"
            );
        }
        assert_eq!(
            preflight(Some("https://a.example"), Some("GET"), None, &[]),
            Err(StorageError::CorsPreflightFailure)
        );
    }

    #[test]
    fn actual_request_table() {
        let rules = [
            rule("https://a.example", "GET,PUT", ""),
            rule("*", "GET,HEAD,DELETE", ""),
        ];
        let exact = |vary_on_origin| {
            Some(CorsHeaders::Allowed {
                allow_origin: "https://a.example".to_string(),
                expose_headers: "x-ms-meta-*".to_string(),
                exact_origin: true,
                vary_on_origin,
            })
        };
        let any = Some(CorsHeaders::Allowed {
            allow_origin: "*".to_string(),
            expose_headers: "x-ms-meta-*".to_string(),
            exact_origin: false,
            vary_on_origin: false,
        });
        let vary = Some(CorsHeaders::VaryOnly);
        // Origin, method, expected: the Vary table of "CORS support for the Azure Storage
        // services" for GET and HEAD, and no Vary for other methods.
        let cases = [
            // Exact origin: credentials, and Vary only where answers are cached.
            (Some("https://a.example"), "GET", exact(true)),
            (Some("https://a.example"), "PUT", exact(false)),
            // The exact rule does not allow HEAD or DELETE; the wildcard one does.
            (Some("https://a.example"), "HEAD", any.clone()),
            (Some("https://a.example"), "DELETE", any.clone()),
            (Some("https://z.example"), "GET", any.clone()),
            // No rule matches: Vary on GET and HEAD, nothing otherwise.
            (Some("https://z.example"), "PUT", None),
            (Some("https://z.example"), "POST", None),
            // No Origin: a rule for every origin still matches (row "No Yes Yes").
            (None, "GET", any.clone()),
            (None, "DELETE", any),
            (None, "PUT", None),
        ];
        for (origin, method, expected) in cases {
            assert_eq!(
                actual_request(origin, method, &rules),
                expected,
                "{origin:?} {method}"
            );
        }
        // Rules, but none for every origin: Vary with or without Origin (row "No Yes No No").
        let exact_only = [rule("https://a.example", "GET,PUT", "")];
        assert_eq!(actual_request(None, "GET", &exact_only), vary);
        assert_eq!(actual_request(None, "HEAD", &exact_only), vary);
        assert_eq!(
            actual_request(Some("https://z.example"), "GET", &exact_only),
            vary
        );
        assert_eq!(actual_request(None, "PUT", &exact_only), None);
        // No rules: no CORS headers at all.
        for origin in [Some("https://a.example"), None] {
            assert_eq!(actual_request(origin, "GET", &[]), None);
        }
    }

    #[test]
    fn exposed_headers_expand_patterns_into_the_response_headers() {
        let names: [&[u8]; 4] = [
            b"x-ms-request-id",
            b"x-ms-approximate-messages-count",
            b"x-ms-meta-Colour",
            b"Date",
        ];
        let exposed =
            |rules: &str| String::from_utf8(exposed_headers(rules, names.iter().copied())).unwrap();
        assert_eq!(exposed(""), "");
        assert_eq!(exposed("x-ms-meta-*"), "x-ms-meta-Colour");
        assert_eq!(
            exposed("X-MS-*"),
            "x-ms-request-id,x-ms-approximate-messages-count,x-ms-meta-Colour"
        );
        assert_eq!(
            exposed("*"),
            "x-ms-request-id,x-ms-approximate-messages-count,x-ms-meta-Colour,Date"
        );
        // Plain names: the response's spelling when it has the header, else the rule's.
        assert_eq!(
            exposed(" date , x-custom,x-ms-meta-*"),
            "x-ms-meta-Colour,Date,x-custom"
        );
        assert_eq!(exposed("x-ms-client-*"), "");
    }
}
