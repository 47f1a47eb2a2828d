//! XML of the settings operations: `SignedIdentifiers` (Get/Set Queue ACL),
//! `StorageServiceProperties` (Get/Set Service Properties) and `StorageServiceStats`.
//!
//! Bodies are read with quick-xml's streaming reader through `walk` (`delegation_xml` uses it
//! too), which reports each element as it opens and closes with its path from the root; the
//! parsers keep only the fields they know and ignore unknown elements, as Azure's deserialiser
//! does. Values are validated here, so
//! a bad body is a 400 before any state changes. Encoding writes straight into the output buffer
//! in the order the service answers in, which its recorded answers show (`Logging`: Version,
//! Read, Write, Delete; `CorsRule`: AllowedMethods before AllowedOrigins) and which differs from
//! the order the SDKs send: what a client sets comes back with the same values.

use bytes::{BufMut, BytesMut};
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::error::StorageError;
use crate::limits::{
    ANALYTICS_VERSION_BYTES_MAX, CORS_RULES_MAX, CORS_RULES_TEXT_BYTES_MAX, RETENTION_DAYS_MAX,
    SIGNED_IDENTIFIERS_MAX, SIGNED_IDENTIFIER_ID_CHARS_MAX, XML_DEPTH_MAX,
};
use crate::queue::{
    AccessPolicy, CorsRule, Logging, Metrics, RetentionPolicy, ServiceProperties,
    ServicePropertiesUpdate, SignedIdentifier,
};
use crate::time::{parse_iso8601_ms, rfc1123};

use super::xml::{element, has_non_xml_char, DECLARATION};

/// The letters a stored access policy may grant, in the only order Azure accepts them.
const QUEUE_PERMISSION_LETTERS: &str = "raup";
/// The methods a CORS rule may allow.
const CORS_METHODS: [&str; 8] = [
    "DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH",
];

/// One step of a walk through a document.
pub(super) enum Visit<'a> {
    /// An element opened; `path` holds its name and its ancestors', root first.
    Open {
        path: &'a [String],
        /// Written `<name />`: it closes at once.
        self_closing: bool,
    },
    /// An element closed. `text` is its unescaped text; empty for an element with children.
    Close {
        path: &'a [String],
        text: &'a str,
        /// Whether child elements appeared in it: a value element holding markup is refused
        /// (`text_only`), never read as the empty text it would otherwise look like.
        has_children: bool,
    },
}

/// Walks `body` element by element. Fails with `InvalidXmlDocument` when the document is not
/// well formed, has no root or a second one, nests deeper than `XML_DEPTH_MAX`, mixes text
/// and child elements, or holds a character XML 1.0 forbids (quick-xml passes those through;
/// an accepted value is echoed by the Get operations, so it must be one a client can read).
pub(super) fn walk(
    body: &[u8],
    mut visit: impl FnMut(Visit<'_>) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let mut reader = Reader::from_reader(body);
    let mut path: Vec<String> = Vec::new();
    // Per open element: whether a child element has appeared in it.
    let mut has_children: Vec<bool> = Vec::new();
    let mut text = String::new();
    let mut root_seen = false;
    loop {
        let (name, closes_at_once) = match reader.read_event() {
            Ok(Event::Start(start)) => (start.name().as_ref().to_vec(), false),
            Ok(Event::Empty(empty)) => (empty.name().as_ref().to_vec(), true),
            Ok(Event::End(_)) => {
                // quick-xml has checked that the end tag names the open element.
                let had_children = has_children.pop() == Some(true);
                if had_children && !is_blank(&text) || has_non_xml_char(text.as_bytes()) {
                    return Err(StorageError::InvalidXmlDocument);
                }
                let element_text = if is_blank(&text) { "" } else { &text };
                visit(Visit::Close {
                    path: &path,
                    text: element_text,
                    has_children: had_children,
                })?;
                text.clear();
                path.pop();
                continue;
            }
            Ok(Event::Text(raw)) => {
                let unescaped = raw
                    .unescape()
                    .map_err(|_| StorageError::InvalidXmlDocument)?;
                if path.is_empty() {
                    if !is_blank(&unescaped) {
                        return Err(StorageError::InvalidXmlDocument);
                    }
                } else {
                    text.push_str(&unescaped);
                }
                continue;
            }
            Ok(Event::CData(raw)) => {
                if path.is_empty() {
                    return Err(StorageError::InvalidXmlDocument);
                }
                let piece =
                    std::str::from_utf8(&raw).map_err(|_| StorageError::InvalidXmlDocument)?;
                text.push_str(piece);
                continue;
            }
            Ok(Event::Eof) => break,
            Ok(Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_)) => continue,
            Err(_) => return Err(StorageError::InvalidXmlDocument),
        };
        // An element starts: its parent may hold whitespace before it, nothing else.
        if (path.is_empty() && root_seen) || !is_blank(&text) || path.len() >= XML_DEPTH_MAX {
            return Err(StorageError::InvalidXmlDocument);
        }
        text.clear();
        if let Some(parent) = has_children.last_mut() {
            *parent = true;
        }
        root_seen = true;
        path.push(String::from_utf8(name).map_err(|_| StorageError::InvalidXmlDocument)?);
        visit(Visit::Open {
            path: &path,
            self_closing: closes_at_once,
        })?;
        if closes_at_once {
            visit(Visit::Close {
                path: &path,
                text: "",
                has_children: false,
            })?;
            path.pop();
        } else {
            has_children.push(false);
        }
    }
    if !path.is_empty() || !root_seen {
        return Err(StorageError::InvalidXmlDocument);
    }
    Ok(())
}

fn is_blank(text: &str) -> bool {
    text.bytes().all(|byte| byte.is_ascii_whitespace())
}

/// Whether the element at `elements` holds other elements rather than text: the root, or one
/// named in `containers` below it.
fn is_container(elements: &[&str], containers: &[&str]) -> bool {
    match elements {
        [_root] => true,
        [_root, .., name] => containers.contains(name),
        [] => false,
    }
}

/// Elements that hold a value hold text only: one with child elements (`<Id><b>x</b></Id>`)
/// is `InvalidXmlDocument`, as Azure's reader refuses markup where it expects text.
pub(super) fn text_only(has_children: bool) -> Result<(), StorageError> {
    if has_children {
        Err(StorageError::InvalidXmlDocument)
    } else {
        Ok(())
    }
}

/// Elements that hold other elements have no text of their own.
fn no_text(text: &str) -> Result<(), StorageError> {
    if text.is_empty() {
        Ok(())
    } else {
        Err(StorageError::InvalidXmlDocument)
    }
}

pub(super) fn names(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

/// Stores `value` in a field that must appear once.
pub(super) fn set_once<T>(field: &mut Option<T>, value: T) -> Result<(), StorageError> {
    if field.replace(value).is_some() {
        return Err(StorageError::InvalidXmlDocument);
    }
    Ok(())
}

/// Reads a Set Queue ACL body. An empty body clears the queue's policies (the Python SDK sends
/// none for an empty dict). More than `SIGNED_IDENTIFIERS_MAX` identifiers, repeated ones,
/// permissions outside `raup` (or out of that order): `InvalidXmlDocument`; an empty or too long
/// `Id` or a date that is not ISO 8601: `InvalidXmlNodeValue`.
pub fn signed_identifiers(body: &[u8]) -> Result<Vec<SignedIdentifier>, StorageError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let mut identifiers: Vec<SignedIdentifier> = Vec::new();
    let mut id: Option<String> = None;
    let mut policy: Option<AccessPolicy> = None;
    walk(body, |visit| {
        match visit {
            Visit::Open { path, .. } => match names(path).as_slice() {
                [root] if *root != "SignedIdentifiers" => {
                    return Err(StorageError::InvalidXmlDocument)
                }
                ["SignedIdentifiers", "SignedIdentifier"] => {
                    if identifiers.len() == SIGNED_IDENTIFIERS_MAX {
                        return Err(StorageError::InvalidXmlDocument);
                    }
                    id = None;
                    policy = None;
                }
                ["SignedIdentifiers", "SignedIdentifier", "AccessPolicy"] => {
                    set_once(&mut policy, AccessPolicy::default())?;
                }
                _ => {}
            },
            Visit::Close {
                path,
                text,
                has_children,
            } => {
                let optional = (!text.is_empty()).then(|| text.to_string());
                let elements = names(path);
                if is_container(&elements, &["SignedIdentifier", "AccessPolicy"]) {
                    no_text(text)?;
                }
                match elements.as_slice() {
                    ["SignedIdentifiers", "SignedIdentifier", "Id"] => {
                        text_only(has_children)?;
                        let chars = text.chars().count();
                        if chars == 0 || chars > SIGNED_IDENTIFIER_ID_CHARS_MAX {
                            return Err(StorageError::InvalidXmlNodeValue);
                        }
                        set_once(&mut id, text.to_string())?;
                    }
                    ["SignedIdentifiers", "SignedIdentifier", "AccessPolicy", field] => {
                        let Some(policy) = policy.as_mut() else {
                            return Err(StorageError::InvalidXmlDocument);
                        };
                        if matches!(*field, "Start" | "Expiry" | "Permission") {
                            text_only(has_children)?;
                        }
                        match *field {
                            "Start" | "Expiry" => {
                                if optional
                                    .as_deref()
                                    .is_some_and(|date| parse_iso8601_ms(date).is_none())
                                {
                                    return Err(StorageError::InvalidXmlNodeValue);
                                }
                                let slot = if *field == "Start" {
                                    &mut policy.start
                                } else {
                                    &mut policy.expiry
                                };
                                if let Some(date) = optional {
                                    set_once(slot, date)?;
                                }
                            }
                            "Permission" => {
                                if !is_ordered_subset(text, QUEUE_PERMISSION_LETTERS) {
                                    return Err(StorageError::InvalidXmlDocument);
                                }
                                if let Some(letters) = optional {
                                    set_once(&mut policy.permission, letters)?;
                                }
                            }
                            _ => {}
                        }
                    }
                    ["SignedIdentifiers", "SignedIdentifier"] => {
                        let id = id.take().ok_or(StorageError::InvalidXmlDocument)?;
                        if identifiers.iter().any(|existing| existing.id == id) {
                            return Err(StorageError::InvalidXmlDocument);
                        }
                        // The service keeps no policy without fields (Get Queue ACL answers
                        // none): neither does azq, so what it reads is what it answers.
                        identifiers.push(SignedIdentifier {
                            id,
                            access_policy: policy.take().filter(|policy| !policy.is_empty()),
                        });
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    })?;
    Ok(identifiers)
}

/// Whether `text` is made of letters of `alphabet`, each at most once, in the alphabet's order.
fn is_ordered_subset(text: &str, alphabet: &str) -> bool {
    let mut remaining = alphabet.chars();
    text.chars()
        .all(|letter| remaining.by_ref().any(|allowed| allowed == letter))
}

/// Encodes Get Queue ACL's body.
pub fn signed_identifiers_into(out: &mut BytesMut, identifiers: &[SignedIdentifier]) {
    out.put_slice(DECLARATION);
    if identifiers.is_empty() {
        out.put_slice(b"<SignedIdentifiers />");
        return;
    }
    out.put_slice(b"<SignedIdentifiers>");
    for identifier in identifiers {
        out.put_slice(b"<SignedIdentifier>");
        element(out, b"Id", identifier.id.as_bytes());
        // The service keeps a policy's fields, not the element: an `AccessPolicy` sent with
        // none of them comes back as no `AccessPolicy` at all (the JavaScript SDK's recorded
        // "setAccessPolicy should work when permissions, expiry and start undefined"), and the
        // SDK reads an empty one as a policy whose permissions are undefined. The reader keeps
        // none; an empty one can still come from a log written before it.
        let policy = identifier.access_policy.as_ref();
        if let Some(policy) = policy.filter(|policy| !policy.is_empty()) {
            out.put_slice(b"<AccessPolicy>");
            for (name, value) in [
                (&b"Start"[..], &policy.start),
                (b"Expiry", &policy.expiry),
                (b"Permission", &policy.permission),
            ] {
                if let Some(value) = value {
                    element(out, name, value.as_bytes());
                }
            }
            out.put_slice(b"</AccessPolicy>");
        }
        out.put_slice(b"</SignedIdentifier>");
    }
    out.put_slice(b"</SignedIdentifiers>");
}

/// A `RetentionPolicy` as it is read.
#[derive(Default)]
struct RetentionDraft {
    enabled: Option<bool>,
    days: Option<u32>,
}

impl RetentionDraft {
    fn finish(self) -> Result<RetentionPolicy, StorageError> {
        Ok(RetentionPolicy {
            enabled: self.enabled.ok_or(StorageError::InvalidXmlDocument)?,
            days: self.days,
        })
    }
}

/// `Logging`, `HourMetrics` or `MinuteMetrics` as it is read: the fields of both shapes.
#[derive(Default)]
struct AnalyticsDraft {
    version: Option<String>,
    delete: Option<bool>,
    read: Option<bool>,
    write: Option<bool>,
    enabled: Option<bool>,
    include_apis: Option<bool>,
    retention: Option<RetentionDraft>,
}

impl AnalyticsDraft {
    fn logging(self) -> Result<Logging, StorageError> {
        let missing = StorageError::InvalidXmlDocument;
        Ok(Logging {
            version: self.version.ok_or(missing)?,
            delete: self.delete.ok_or(missing)?,
            read: self.read.ok_or(missing)?,
            write: self.write.ok_or(missing)?,
            retention_policy: self.retention.ok_or(missing)?.finish()?,
        })
    }

    fn metrics(self) -> Result<Metrics, StorageError> {
        let missing = StorageError::InvalidXmlDocument;
        Ok(Metrics {
            version: self.version.ok_or(missing)?,
            enabled: self.enabled.ok_or(missing)?,
            include_apis: self.include_apis,
            retention_policy: self.retention.ok_or(missing)?.finish()?,
        })
    }
}

/// A `CorsRule` as it is read.
#[derive(Default)]
struct CorsRuleDraft {
    allowed_origins: Option<String>,
    allowed_methods: Option<String>,
    allowed_headers: Option<String>,
    exposed_headers: Option<String>,
    max_age_s: Option<u64>,
}

impl CorsRuleDraft {
    fn finish(self) -> Result<CorsRule, StorageError> {
        let missing = StorageError::InvalidXmlDocument;
        Ok(CorsRule {
            allowed_origins: self.allowed_origins.ok_or(missing)?,
            allowed_methods: self.allowed_methods.ok_or(missing)?,
            allowed_headers: self.allowed_headers.unwrap_or_default(),
            exposed_headers: self.exposed_headers.unwrap_or_default(),
            max_age_s: self.max_age_s.ok_or(missing)?,
        })
    }
}

/// Reads a Set Service Properties body into the elements it changes. A required element that
/// is missing, a repeated one, more than `CORS_RULES_MAX` rules, retention days outside
/// 1..=`RETENTION_DAYS_MAX` or a self-closed root: `InvalidXmlDocument`; a value out of its
/// domain (a boolean, a number that does not read, a CORS method, a negative max age, CORS text
/// beyond `CORS_RULES_TEXT_BYTES_MAX`): `InvalidXmlNodeValue`.
pub fn service_properties_update(body: &[u8]) -> Result<ServicePropertiesUpdate, StorageError> {
    let mut update = ServicePropertiesUpdate::default();
    let mut analytics: Option<AnalyticsDraft> = None;
    let mut rules: Option<Vec<CorsRuleDraft>> = None;
    walk(body, |visit| {
        match visit {
            Visit::Open { path, self_closing } => match names(path).as_slice() {
                [root] if *root != "StorageServiceProperties" => {
                    return Err(StorageError::InvalidXmlDocument)
                }
                // The service refuses `<StorageServiceProperties />` (its reader finds no
                // content node: recorded 400 InvalidXmlDocument); the open-and-close form
                // with nothing inside changes nothing.
                [_] if self_closing => return Err(StorageError::InvalidXmlDocument),
                [_, "Logging" | "HourMetrics" | "MinuteMetrics"] => {
                    analytics = Some(AnalyticsDraft::default());
                }
                [_, "Logging" | "HourMetrics" | "MinuteMetrics", "RetentionPolicy"] => {
                    if let Some(draft) = analytics.as_mut() {
                        set_once(&mut draft.retention, RetentionDraft::default())?;
                    }
                }
                [_, "Cors"] => set_once(&mut rules, Vec::new())?,
                [_, "Cors", "CorsRule"] => {
                    let rules = rules.as_mut().ok_or(StorageError::InvalidXmlDocument)?;
                    if rules.len() == CORS_RULES_MAX {
                        return Err(StorageError::InvalidXmlDocument);
                    }
                    rules.push(CorsRuleDraft::default());
                }
                _ => {}
            },
            Visit::Close {
                path,
                text,
                has_children,
            } => {
                let elements = names(path);
                let containers = [
                    "Logging",
                    "HourMetrics",
                    "MinuteMetrics",
                    "RetentionPolicy",
                    "Cors",
                    "CorsRule",
                ];
                if is_container(&elements, &containers) {
                    no_text(text)?;
                }
                match elements.as_slice() {
                    [_, section @ ("Logging" | "HourMetrics" | "MinuteMetrics")] => {
                        let draft = analytics.take().ok_or(StorageError::InvalidXmlDocument)?;
                        match *section {
                            "Logging" => set_once(&mut update.logging, draft.logging()?)?,
                            "HourMetrics" => set_once(&mut update.hour_metrics, draft.metrics()?)?,
                            _ => set_once(&mut update.minute_metrics, draft.metrics()?)?,
                        }
                    }
                    [_, "Logging" | "HourMetrics" | "MinuteMetrics", field] => {
                        let draft = analytics.as_mut().ok_or(StorageError::InvalidXmlDocument)?;
                        const VALUES: [&str; 6] = [
                            "Version",
                            "Delete",
                            "Read",
                            "Write",
                            "Enabled",
                            "IncludeAPIs",
                        ];
                        if VALUES.contains(field) {
                            text_only(has_children)?;
                        }
                        match *field {
                            "Version" => {
                                if text.is_empty() || text.len() > ANALYTICS_VERSION_BYTES_MAX {
                                    return Err(StorageError::InvalidXmlNodeValue);
                                }
                                set_once(&mut draft.version, text.to_string())?;
                            }
                            "Delete" => set_once(&mut draft.delete, boolean(text)?)?,
                            "Read" => set_once(&mut draft.read, boolean(text)?)?,
                            "Write" => set_once(&mut draft.write, boolean(text)?)?,
                            "Enabled" => set_once(&mut draft.enabled, boolean(text)?)?,
                            "IncludeAPIs" => set_once(&mut draft.include_apis, boolean(text)?)?,
                            _ => {}
                        }
                    }
                    [_, "Logging" | "HourMetrics" | "MinuteMetrics", "RetentionPolicy", field] => {
                        let retention = analytics
                            .as_mut()
                            .and_then(|draft| draft.retention.as_mut())
                            .ok_or(StorageError::InvalidXmlDocument)?;
                        if matches!(*field, "Enabled" | "Days") {
                            text_only(has_children)?;
                        }
                        match *field {
                            "Enabled" => set_once(&mut retention.enabled, boolean(text)?)?,
                            "Days" => {
                                let days = text
                                    .trim()
                                    .parse::<i64>()
                                    .map_err(|_| StorageError::InvalidXmlNodeValue)?;
                                // Out of range is a document error on the service ("Retention
                                // days must be greater than 0 and less than or equal to 365
                                // days", recorded with InvalidXmlDocument).
                                let days = u32::try_from(days)
                                    .ok()
                                    .filter(|days| (1..=RETENTION_DAYS_MAX).contains(days))
                                    .ok_or(StorageError::InvalidXmlDocument)?;
                                set_once(&mut retention.days, days)?;
                            }
                            _ => {}
                        }
                    }
                    [_, "Cors", "CorsRule", field] => {
                        let rule = rules
                            .as_mut()
                            .and_then(|rules| rules.last_mut())
                            .ok_or(StorageError::InvalidXmlDocument)?;
                        const VALUES: [&str; 5] = [
                            "AllowedOrigins",
                            "AllowedMethods",
                            "AllowedHeaders",
                            "ExposedHeaders",
                            "MaxAgeInSeconds",
                        ];
                        if VALUES.contains(field) {
                            text_only(has_children)?;
                        }
                        let value = text.to_string();
                        match *field {
                            "AllowedOrigins" => set_once(&mut rule.allowed_origins, value)?,
                            "AllowedMethods" => {
                                let known = |method: &str| CORS_METHODS.contains(&method.trim());
                                if !value.split(',').all(known) {
                                    return Err(StorageError::InvalidXmlNodeValue);
                                }
                                set_once(&mut rule.allowed_methods, value)?;
                            }
                            "AllowedHeaders" => set_once(&mut rule.allowed_headers, value)?,
                            "ExposedHeaders" => set_once(&mut rule.exposed_headers, value)?,
                            "MaxAgeInSeconds" => {
                                let max_age_s = text
                                    .trim()
                                    .parse::<u32>()
                                    .map_err(|_| StorageError::InvalidXmlNodeValue)?;
                                set_once(&mut rule.max_age_s, u64::from(max_age_s))?;
                            }
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    })?;
    if let Some(drafts) = rules {
        let rules = drafts
            .into_iter()
            .map(CorsRuleDraft::finish)
            .collect::<Result<Vec<_>, _>>()?;
        let text_bytes: usize = rules
            .iter()
            .map(|rule| {
                rule.allowed_origins.len()
                    + rule.allowed_methods.len()
                    + rule.allowed_headers.len()
                    + rule.exposed_headers.len()
            })
            .sum();
        if text_bytes > CORS_RULES_TEXT_BYTES_MAX {
            return Err(StorageError::InvalidXmlNodeValue);
        }
        update.cors = Some(rules);
    }
    Ok(update)
}

/// An `xs:boolean`: `true`, `false`, `1` or `0`.
/// A boolean as the service reads it: `true`/`false` in any case (the legacy SDKs write `True`
/// and `False`, which the service's recorded answers accept), or `1`/`0`.
fn boolean(text: &str) -> Result<bool, StorageError> {
    match text.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        text if text.eq_ignore_ascii_case("true") => Ok(true),
        text if text.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(StorageError::InvalidXmlNodeValue),
    }
}

fn boolean_element(out: &mut BytesMut, name: &[u8], value: bool) {
    element(out, name, if value { &b"true"[..] } else { b"false" });
}

fn retention_into(out: &mut BytesMut, retention: &RetentionPolicy) {
    out.put_slice(b"<RetentionPolicy>");
    boolean_element(out, b"Enabled", retention.enabled);
    if let Some(days) = retention.days {
        element(out, b"Days", days.to_string().as_bytes());
    }
    out.put_slice(b"</RetentionPolicy>");
}

fn metrics_into(out: &mut BytesMut, name: &[u8], metrics: &Metrics) {
    out.put_u8(b'<');
    out.put_slice(name);
    out.put_u8(b'>');
    element(out, b"Version", metrics.version.as_bytes());
    boolean_element(out, b"Enabled", metrics.enabled);
    if let Some(include_apis) = metrics.include_apis {
        boolean_element(out, b"IncludeAPIs", include_apis);
    }
    retention_into(out, &metrics.retention_policy);
    out.put_slice(b"</");
    out.put_slice(name);
    out.put_u8(b'>');
}

/// Appends `<name>text</name>`, or `<name />` for empty text, as Azure writes empty lists.
fn list_element(out: &mut BytesMut, name: &[u8], text: &str) {
    if text.is_empty() {
        out.put_u8(b'<');
        out.put_slice(name);
        out.put_slice(b" />");
    } else {
        element(out, name, text.as_bytes());
    }
}

/// Encodes Get Service Properties' body.
pub fn service_properties_into(out: &mut BytesMut, properties: &ServiceProperties) {
    out.put_slice(DECLARATION);
    out.put_slice(b"<StorageServiceProperties><Logging>");
    let logging = &properties.logging;
    element(out, b"Version", logging.version.as_bytes());
    boolean_element(out, b"Read", logging.read);
    boolean_element(out, b"Write", logging.write);
    boolean_element(out, b"Delete", logging.delete);
    retention_into(out, &logging.retention_policy);
    out.put_slice(b"</Logging>");
    metrics_into(out, b"HourMetrics", &properties.hour_metrics);
    metrics_into(out, b"MinuteMetrics", &properties.minute_metrics);
    if properties.cors.is_empty() {
        out.put_slice(b"<Cors />");
    } else {
        out.put_slice(b"<Cors>");
        for rule in &properties.cors {
            out.put_slice(b"<CorsRule>");
            list_element(out, b"AllowedMethods", &rule.allowed_methods);
            list_element(out, b"AllowedOrigins", &rule.allowed_origins);
            list_element(out, b"AllowedHeaders", &rule.allowed_headers);
            list_element(out, b"ExposedHeaders", &rule.exposed_headers);
            element(
                out,
                b"MaxAgeInSeconds",
                rule.max_age_s.to_string().as_bytes(),
            );
            out.put_slice(b"</CorsRule>");
        }
        out.put_slice(b"</Cors>");
    }
    out.put_slice(b"</StorageServiceProperties>");
}

/// Encodes Get Service Stats' body: an emulator's secondary is always live and in sync.
pub fn service_stats_into(out: &mut BytesMut, now_ms: u64) {
    out.put_slice(DECLARATION);
    out.put_slice(b"<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>");
    out.put_slice(&rfc1123(now_ms));
    out.put_slice(b"</LastSyncTime></GeoReplication></StorageServiceStats>");
}

#[cfg(test)]
mod tests;
