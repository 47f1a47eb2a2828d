//! `settings_xml`: arbitrary bytes as a Set Queue ACL or a Set Service Properties body through
//! `api::settings_xml`. The first byte picks the reader (even: ACL, odd: properties); the rest
//! is the body.
//!
//! Properties: no panic; only `InvalidXmlDocument` or `InvalidXmlNodeValue` as errors; whatever
//! is accepted is inside the limits `azq::limits` names (identifier count and length, unique ids,
//! permissions from `raup` in order, ISO 8601 dates, CORS rule count and text bytes, known CORS
//! methods, retention days); every accepted text is made of XML 1.0 characters, so the Get
//! response that carries it back is a document every client's parser reads; and what is
//! accepted, written by the Get encoder, reads back the same (ACL exactly; properties as the
//! complete settings they make of the defaults).

use azq::api::settings_xml::{
    service_properties_into, service_properties_update, signed_identifiers, signed_identifiers_into,
};
use azq::error::StorageError;
use azq::limits::{
    CORS_RULES_MAX, CORS_RULES_TEXT_BYTES_MAX, RETENTION_DAYS_MAX, SIGNED_IDENTIFIERS_MAX,
    SIGNED_IDENTIFIER_ID_CHARS_MAX,
};
use azq::queue::{
    CorsRule, Metrics, RetentionPolicy, ServiceProperties, ServicePropertiesUpdate,
    SignedIdentifier,
};
use azq::time::parse_iso8601_ms;
use bytes::BytesMut;

const CORS_METHODS: [&str; 8] = [
    "DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH",
];

/// The `settings_xml` property on one input (see the module doc); panics when it breaks.
pub fn check(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        check_acl(body);
    } else {
        check_properties(body);
    }
}

fn assert_body_error(error: StorageError, body: &[u8]) {
    assert!(
        matches!(
            error,
            StorageError::InvalidXmlDocument | StorageError::InvalidXmlNodeValue
        ),
        "unexpected error {error:?} for {:?}",
        String::from_utf8_lossy(body)
    );
}

/// Whether every character of `text` may appear in an XML 1.0 document (escaped or not).
fn is_xml_text(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}'
    })
}

fn check_acl(body: &[u8]) {
    let identifiers = match signed_identifiers(body) {
        Ok(identifiers) => identifiers,
        Err(error) => return assert_body_error(error, body),
    };
    assert!(identifiers.len() <= SIGNED_IDENTIFIERS_MAX);
    for (at, identifier) in identifiers.iter().enumerate() {
        let chars = identifier.id.chars().count();
        assert!((1..=SIGNED_IDENTIFIER_ID_CHARS_MAX).contains(&chars));
        assert!(is_xml_text(&identifier.id), "id {:?}", identifier.id);
        assert!(
            identifiers[..at]
                .iter()
                .all(|other| other.id != identifier.id),
            "repeated id {:?}",
            identifier.id
        );
        let Some(policy) = &identifier.access_policy else {
            continue;
        };
        for date in [&policy.start, &policy.expiry].into_iter().flatten() {
            assert!(parse_iso8601_ms(date).is_some(), "date {date:?} accepted");
        }
        if let Some(permission) = &policy.permission {
            let mut remaining = "raup".chars();
            assert!(
                permission
                    .chars()
                    .all(|letter| remaining.by_ref().any(|allowed| allowed == letter)),
                "permission {permission:?} accepted"
            );
        }
    }
    let mut encoded = BytesMut::new();
    signed_identifiers_into(&mut encoded, &identifiers);
    assert_acl_reads_back(&encoded, &identifiers);
}

fn assert_acl_reads_back(encoded: &[u8], identifiers: &[SignedIdentifier]) {
    match signed_identifiers(encoded) {
        Ok(read) => assert_eq!(
            read,
            identifiers,
            "ACL read back differently from {:?}",
            String::from_utf8_lossy(encoded)
        ),
        Err(error) => panic!(
            "encoded ACL refused with {error:?}: {:?}",
            String::from_utf8_lossy(encoded)
        ),
    }
}

fn check_properties(body: &[u8]) {
    let update = match service_properties_update(body) {
        Ok(update) => update,
        Err(error) => return assert_body_error(error, body),
    };
    assert_update_in_limits(&update);
    let properties = update.applied_to(&ServiceProperties::default());
    let mut encoded = BytesMut::new();
    service_properties_into(&mut encoded, &properties);
    match service_properties_update(&encoded) {
        Ok(read) => {
            // The encoder writes every element, so the update read back is complete.
            assert!(
                read.logging.is_some()
                    && read.hour_metrics.is_some()
                    && read.minute_metrics.is_some()
                    && read.cors.is_some(),
                "an element is missing from {:?}",
                String::from_utf8_lossy(&encoded)
            );
            let other_base = ServiceProperties {
                cors: vec![rule_for_base()],
                ..ServiceProperties::default()
            };
            assert_eq!(
                read.applied_to(&other_base),
                properties,
                "properties read back differently from {:?}",
                String::from_utf8_lossy(&encoded)
            );
        }
        Err(error) => panic!(
            "encoded properties refused with {error:?}: {:?}",
            String::from_utf8_lossy(&encoded)
        ),
    }
}

/// A rule no read-back may keep: if the encoded document lost its `Cors` element, applying it
/// to a base holding this rule would show it.
fn rule_for_base() -> CorsRule {
    CorsRule {
        allowed_origins: "base".to_string(),
        allowed_methods: "GET".to_string(),
        allowed_headers: String::new(),
        exposed_headers: String::new(),
        max_age_s: 1,
    }
}

fn assert_update_in_limits(update: &ServicePropertiesUpdate) {
    if let Some(logging) = &update.logging {
        assert!(!logging.version.is_empty() && is_xml_text(&logging.version));
        assert_retention_in_limits(&logging.retention_policy);
    }
    for metrics in [&update.hour_metrics, &update.minute_metrics]
        .into_iter()
        .flatten()
    {
        assert_metrics_in_limits(metrics);
    }
    if let Some(rules) = &update.cors {
        assert!(rules.len() <= CORS_RULES_MAX, "{} rules", rules.len());
        let mut text_bytes = 0;
        for rule in rules {
            for text in [
                &rule.allowed_origins,
                &rule.allowed_methods,
                &rule.allowed_headers,
                &rule.exposed_headers,
            ] {
                assert!(is_xml_text(text), "CORS text {text:?}");
                text_bytes += text.len();
            }
            assert!(
                rule.allowed_methods
                    .split(',')
                    .all(|method| CORS_METHODS.contains(&method.trim())),
                "methods {:?}",
                rule.allowed_methods
            );
            assert!(rule.max_age_s <= u64::from(u32::MAX));
        }
        assert!(
            text_bytes <= CORS_RULES_TEXT_BYTES_MAX,
            "{text_bytes} bytes"
        );
    }
}

fn assert_metrics_in_limits(metrics: &Metrics) {
    assert!(!metrics.version.is_empty() && is_xml_text(&metrics.version));
    assert_retention_in_limits(&metrics.retention_policy);
}

fn assert_retention_in_limits(retention: &RetentionPolicy) {
    if let Some(days) = retention.days {
        assert!((1..=RETENTION_DAYS_MAX).contains(&days), "{days} days");
    }
}
