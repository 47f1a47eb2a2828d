//! Tests of `api::settings_xml`: the ACL and service-properties documents as the SDKs send
//! them, and invalid ones.

use super::*;

/// What the Python SDK (azure-storage-queue 12.18.1) sends for two policies.
const SDK_ACL: &str = "<?xml version='1.0' encoding='utf-8'?>\n<SignedIdentifiers><SignedIdentifier><Id>pol1</Id><AccessPolicy><Start>2026-11-22T00:17:36Z</Start><Expiry>2026-11-23T00:17:36Z</Expiry><Permission>rp</Permission></AccessPolicy></SignedIdentifier><SignedIdentifier><Id>pol2</Id><AccessPolicy><Permission>a</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";

/// What the Python SDK sends for every element of the service properties.
const SDK_PROPERTIES: &str = "<?xml version='1.0' encoding='utf-8'?>\n<StorageServiceProperties><Logging><Version>1.0</Version><Delete>false</Delete><Read>true</Read><Write>true</Write><RetentionPolicy><Enabled>true</Enabled><Days>5</Days></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>7</Days></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors><CorsRule><AllowedOrigins>https://a.example,https://b.example</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders>x-ms-meta-*</AllowedHeaders><ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>500</MaxAgeInSeconds></CorsRule><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders /><ExposedHeaders /><MaxAgeInSeconds>0</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";

/// The body without the SDK's declaration, which uses single quotes; ours uses double.
fn without_declaration(sent: &str) -> &str {
    sent.split_once('\n').map_or(sent, |(_, rest)| rest)
}

fn encoded_acl(identifiers: &[SignedIdentifier]) -> String {
    let mut out = BytesMut::new();
    signed_identifiers_into(&mut out, identifiers);
    String::from_utf8(out[DECLARATION.len()..].to_vec()).unwrap()
}

fn encoded_properties(properties: &ServiceProperties) -> String {
    let mut out = BytesMut::new();
    service_properties_into(&mut out, properties);
    String::from_utf8(out[DECLARATION.len()..].to_vec()).unwrap()
}

#[test]
fn sdk_acl_round_trips_exactly() {
    let identifiers = signed_identifiers(SDK_ACL.as_bytes()).unwrap();
    assert_eq!(identifiers.len(), 2);
    assert_eq!(
        identifiers[0]
            .access_policy
            .as_ref()
            .unwrap()
            .start
            .as_deref(),
        Some("2026-11-22T00:17:36Z")
    );
    assert_eq!(encoded_acl(&identifiers), without_declaration(SDK_ACL));
}

#[test]
fn acl_table() {
    let acl = |inner: &str| format!("<SignedIdentifiers>{inner}</SignedIdentifiers>");
    let identifier = |id: &str, policy: &str| {
        format!("<SignedIdentifier><Id>{id}</Id>{policy}</SignedIdentifier>")
    };
    let policy = |inner: &str| format!("<AccessPolicy>{inner}</AccessPolicy>");
    let five = (0..5)
        .map(|index| identifier(&format!("p{index}"), ""))
        .collect::<String>();
    let six = (0..6)
        .map(|index| identifier(&format!("p{index}"), ""))
        .collect::<String>();
    let ok = |count: usize| Ok(count);
    let cases: Vec<(String, Result<usize, StorageError>)> = vec![
        (String::new(), ok(0)),
        ("  \r\n".to_string(), ok(0)),
        ("<SignedIdentifiers />".to_string(), ok(0)),
        (acl(""), ok(0)),
        (acl(&five), ok(5)),
        (acl(&identifier(&"x".repeat(64), "")), ok(1)),
        (acl(&identifier("é".repeat(64).as_str(), "")), ok(1)),
        (
            acl(&identifier(
                "p",
                &policy("<Start>2026-11-22T00:17:36.1234567Z</Start><Expiry>2026-11-23</Expiry><Permission>raup</Permission>"),
            )),
            ok(1),
        ),
        (acl(&identifier("p", &policy(""))), ok(1)),
        (acl(&identifier("p", "<AccessPolicy />")), ok(1)),
        (acl(&identifier("p", "<Unknown>x</Unknown>")), ok(1)),
        // Invalid inputs.
        (acl(&six), Err(StorageError::InvalidXmlDocument)),
        ("<Other />".to_string(), Err(StorageError::InvalidXmlDocument)),
        ("not xml".to_string(), Err(StorageError::InvalidXmlDocument)),
        ("<SignedIdentifiers>".to_string(), Err(StorageError::InvalidXmlDocument)),
        (
            "<SignedIdentifiers></Other>".to_string(),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            "<SignedIdentifiers /><SignedIdentifiers />".to_string(),
            Err(StorageError::InvalidXmlDocument),
        ),
        (acl("text"), Err(StorageError::InvalidXmlDocument)),
        (
            acl("<SignedIdentifier><AccessPolicy /></SignedIdentifier>"),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&(identifier("p", "") + &identifier("p", ""))),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl("<SignedIdentifier><Id>a</Id><Id>b</Id></SignedIdentifier>"),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier(&"x".repeat(65), "")),
            Err(StorageError::InvalidXmlNodeValue),
        ),
        (acl(&identifier("", "")), Err(StorageError::InvalidXmlNodeValue)),
        (
            acl(&identifier("p", &policy("<Permission>rw</Permission>"))),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("p", &policy("<Permission>pr</Permission>"))),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("p", &policy("<Permission>rr</Permission>"))),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("p", &policy("<Start>yesterday</Start>"))),
            Err(StorageError::InvalidXmlNodeValue),
        ),
        (
            acl(&identifier("p", &policy("<Expiry>2026-02-30T00:00:00Z</Expiry>"))),
            Err(StorageError::InvalidXmlNodeValue),
        ),
        (
            acl(&identifier("p", &policy("<Expiry>2026-11-23T00:00:00.12345678Z</Expiry>"))),
            Err(StorageError::InvalidXmlNodeValue),
        ),
        (
            acl(&identifier("p", &(policy("") + &policy("")))),
            Err(StorageError::InvalidXmlDocument),
        ),
        // Characters no XML 1.0 document may hold, raw, as references or in CDATA.
        (
            acl(&identifier("a\u{1}b", "")),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("&#xFFFE;", "")),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("<![CDATA[\u{0}]]>", "")),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("p", &policy("<Start>\u{FFFF}</Start>"))),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl("<b><c><d><e><f><g><h><i /></h></g></f></e></d></c></b>"),
            Err(StorageError::InvalidXmlDocument),
        ),
        // Markup where a value belongs is refused, not read as an empty value.
        (
            acl(&identifier("<b>p</b>", "")),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("p", &policy("<Permission><b>r</b></Permission>"))),
            Err(StorageError::InvalidXmlDocument),
        ),
        (
            acl(&identifier("p", &policy("<Start><x /></Start>"))),
            Err(StorageError::InvalidXmlDocument),
        ),
        // Unknown elements may hold anything.
        (
            acl(&identifier("p", &policy("<Unknown><x>1</x></Unknown>"))),
            ok(1),
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(
            signed_identifiers(body.as_bytes()).map(|identifiers| identifiers.len()),
            expected,
            "{body}"
        );
    }
}

#[test]
fn acl_escapes_and_omits_absent_fields() {
    let identifiers = vec![
        SignedIdentifier {
            id: "a<&>".to_string(),
            access_policy: None,
        },
        SignedIdentifier {
            id: "b".to_string(),
            access_policy: Some(AccessPolicy {
                expiry: Some("2026-11-23T00:00:00.5Z".to_string()),
                ..AccessPolicy::default()
            }),
        },
    ];
    let text = encoded_acl(&identifiers);
    assert_eq!(
        text,
        "<SignedIdentifiers><SignedIdentifier><Id>a&lt;&amp;&gt;</Id></SignedIdentifier><SignedIdentifier><Id>b</Id><AccessPolicy><Expiry>2026-11-23T00:00:00.5Z</Expiry></AccessPolicy></SignedIdentifier></SignedIdentifiers>"
    );
    assert_eq!(
        signed_identifiers(text.as_bytes()).unwrap(),
        identifiers,
        "reads back what it writes"
    );
    assert_eq!(encoded_acl(&[]), "<SignedIdentifiers />");
}

/// The JavaScript SDK's recorded "setAccessPolicy should work when permissions, expiry and start
/// undefined": set with `<AccessPolicy/>`, the service answers the identifier alone; set with a
/// permission only, it answers that field alone.
#[test]
fn an_empty_access_policy_is_answered_as_none_as_the_service_does() {
    let empty = "<SignedIdentifiers><SignedIdentifier><Id>MTIz</Id><AccessPolicy/>\
        </SignedIdentifier></SignedIdentifiers>";
    let with_empty_fields = "<SignedIdentifiers><SignedIdentifier><Id>MTIz</Id><AccessPolicy>\
        <Start></Start><Expiry/><Permission></Permission></AccessPolicy></SignedIdentifier>\
        </SignedIdentifiers>";
    for sent in [empty, with_empty_fields] {
        let read = signed_identifiers(sent.as_bytes()).unwrap();
        assert_eq!(read[0].access_policy, None, "{sent}");
        assert_eq!(
            encoded_acl(&read),
            "<SignedIdentifiers><SignedIdentifier><Id>MTIz</Id></SignedIdentifier>\
             </SignedIdentifiers>",
            "{sent}"
        );
    }
    // One from a log written before the reader dropped empty policies is answered alike.
    let logged = [SignedIdentifier {
        id: "MTIz".to_string(),
        access_policy: Some(AccessPolicy::default()),
    }];
    assert_eq!(
        encoded_acl(&logged),
        "<SignedIdentifiers><SignedIdentifier><Id>MTIz</Id></SignedIdentifier></SignedIdentifiers>"
    );
    let partial = "<SignedIdentifiers><SignedIdentifier><Id>MTIz</Id><AccessPolicy>\
        <Permission>raup</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    assert_eq!(
        encoded_acl(&signed_identifiers(partial.as_bytes()).unwrap()),
        partial
    );
}

/// `SDK_PROPERTIES` as the service answers it: the same values, `Logging` and `CorsRule`
/// children in the service's order (recorded answers of Get Queue Service Properties).
const SERVICE_PROPERTIES_ANSWER: &str = "<StorageServiceProperties><Logging><Version>1.0</Version><Read>true</Read><Write>true</Write><Delete>false</Delete><RetentionPolicy><Enabled>true</Enabled><Days>5</Days></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>7</Days></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors><CorsRule><AllowedMethods>GET,PUT</AllowedMethods><AllowedOrigins>https://a.example,https://b.example</AllowedOrigins><AllowedHeaders>x-ms-meta-*</AllowedHeaders><ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>500</MaxAgeInSeconds></CorsRule><CorsRule><AllowedMethods>GET</AllowedMethods><AllowedOrigins>*</AllowedOrigins><AllowedHeaders /><ExposedHeaders /><MaxAgeInSeconds>0</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";

#[test]
fn sdk_service_properties_come_back_in_the_services_order() {
    let update = service_properties_update(SDK_PROPERTIES.as_bytes()).unwrap();
    let properties = update.applied_to(&ServiceProperties::default());
    assert_eq!(properties.cors.len(), 2);
    assert_eq!(properties.hour_metrics.include_apis, Some(true));
    assert_eq!(properties.minute_metrics.include_apis, None);
    assert_eq!(encoded_properties(&properties), SERVICE_PROPERTIES_ANSWER);
    // The answer reads back to the same properties.
    let again = service_properties_update(SERVICE_PROPERTIES_ANSWER.as_bytes()).unwrap();
    assert_eq!(again.applied_to(&ServiceProperties::default()), properties);
}

#[test]
fn default_service_properties_encoding() {
    assert_eq!(
        encoded_properties(&ServiceProperties::default()),
        "<StorageServiceProperties><Logging><Version>1.0</Version><Read>false</Read><Write>false</Write><Delete>false</Delete><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors /></StorageServiceProperties>"
    );
}

#[test]
fn partial_service_properties() {
    let update =
        service_properties_update(b"<StorageServiceProperties><Cors /></StorageServiceProperties>")
            .unwrap();
    assert_eq!(
        update,
        ServicePropertiesUpdate {
            cors: Some(Vec::new()),
            ..ServicePropertiesUpdate::default()
        }
    );
    let update =
        service_properties_update(b"<StorageServiceProperties></StorageServiceProperties>")
            .unwrap();
    assert_eq!(update, ServicePropertiesUpdate::default());
    // The self-closed root is what the service refuses (recorded answer).
    assert_eq!(
        service_properties_update(
            b"<?xml version='1.0' encoding='utf-8'?>\n<StorageServiceProperties />"
        ),
        Err(StorageError::InvalidXmlDocument)
    );
}

#[test]
fn service_properties_table() {
    let properties =
        |inner: &str| format!("<StorageServiceProperties>{inner}</StorageServiceProperties>");
    let rule = |origins: &str, methods: &str, max_age: &str| {
        format!("<CorsRule><AllowedOrigins>{origins}</AllowedOrigins><AllowedMethods>{methods}</AllowedMethods><MaxAgeInSeconds>{max_age}</MaxAgeInSeconds></CorsRule>")
    };
    let cors = |rules: &str| properties(&format!("<Cors>{rules}</Cors>"));
    let logging = |retention: &str| {
        properties(&format!("<Logging><Version>1.0</Version><Delete>true</Delete><Read>0</Read><Write>1</Write><RetentionPolicy>{retention}</RetentionPolicy></Logging>"))
    };
    let metrics = |inner: &str| properties(&format!("<MinuteMetrics>{inner}</MinuteMetrics>"));
    let five = rule("*", "GET", "1").repeat(5);
    let six = rule("*", "GET", "1").repeat(6);
    let long_origin = format!("https://{}.example", "a".repeat(CORS_RULES_TEXT_BYTES_MAX));
    let cases: Vec<(String, Result<(), StorageError>)> = vec![
        (cors(&five), Ok(())),
        (cors(&rule("https://a.example", "DELETE,GET,HEAD,MERGE,POST,OPTIONS,PUT,PATCH", "86400")), Ok(())),
        (logging("<Enabled>true</Enabled><Days>365</Days>"), Ok(())),
        (logging("<Enabled>false</Enabled>"), Ok(())),
        (metrics("<Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>false</IncludeAPIs><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"), Ok(())),
        (properties("<DefaultServiceVersion>2026-10-06</DefaultServiceVersion>"), Ok(())),
        (metrics("<Version>1.0</Version><Enabled>false</Enabled><Unknown><x /></Unknown><RetentionPolicy><Enabled>false</Enabled><Other><y /></Other></RetentionPolicy>"), Ok(())),
        (cors(&rule("*", "GET", "1").replace("</CorsRule>", "<Extra><x /></Extra></CorsRule>")), Ok(())),
        // Invalid inputs.
        (String::new(), Err(StorageError::InvalidXmlDocument)),
        ("<SignedIdentifiers />".to_string(), Err(StorageError::InvalidXmlDocument)),
        (cors(&six), Err(StorageError::InvalidXmlDocument)),
        (cors("<CorsRule><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule>"), Err(StorageError::InvalidXmlDocument)),
        (cors("<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods></CorsRule>"), Err(StorageError::InvalidXmlDocument)),
        (cors(&rule("*", "GET,FETCH", "1")), Err(StorageError::InvalidXmlNodeValue)),
        (cors(&rule("*", "get", "1")), Err(StorageError::InvalidXmlNodeValue)),
        (cors(&rule("*", "GET", "-1")), Err(StorageError::InvalidXmlNodeValue)),
        (cors(&rule("*", "GET", "soon")), Err(StorageError::InvalidXmlNodeValue)),
        (cors(&rule(&long_origin, "GET", "1")), Err(StorageError::InvalidXmlNodeValue)),
        (properties("<Cors /><Cors />"), Err(StorageError::InvalidXmlDocument)),
        // Retention out of range is a document error, as the service records it.
        (logging("<Enabled>true</Enabled><Days>0</Days>"), Err(StorageError::InvalidXmlDocument)),
        (logging("<Enabled>true</Enabled><Days>366</Days>"), Err(StorageError::InvalidXmlDocument)),
        (logging("<Enabled>true</Enabled><Days>-1</Days>"), Err(StorageError::InvalidXmlDocument)),
        (logging("<Enabled>true</Enabled><Days>many</Days>"), Err(StorageError::InvalidXmlNodeValue)),
        (logging("<Enabled>maybe</Enabled>"), Err(StorageError::InvalidXmlNodeValue)),
        (logging("<Days>3</Days>"), Err(StorageError::InvalidXmlDocument)),
        (properties("<Logging><Version>1.0</Version></Logging>"), Err(StorageError::InvalidXmlDocument)),
        (metrics("<Version>1.0</Version><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"), Err(StorageError::InvalidXmlDocument)),
        (metrics("<Version></Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"), Err(StorageError::InvalidXmlNodeValue)),
        (metrics(&format!("<Version>{}</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>", "v".repeat(ANALYTICS_VERSION_BYTES_MAX))), Ok(())),
        // Found by review: three unbounded versions, set by separate requests, made a settings
        // record longer than the log's reader accepts.
        (
            metrics(&format!("<Version>{}</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>", "v".repeat(ANALYTICS_VERSION_BYTES_MAX + 1))),
            Err(StorageError::InvalidXmlNodeValue),
        ),
        (
            properties(&format!("<Logging><Version>{}</Version><Delete>false</Delete><Read>false</Read><Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>", "v".repeat(360_000))),
            Err(StorageError::InvalidXmlNodeValue),
        ),
        (properties("<Logging>text</Logging>"), Err(StorageError::InvalidXmlDocument)),
        (properties("text"), Err(StorageError::InvalidXmlDocument)),
        (cors("<CorsRule>text</CorsRule>"), Err(StorageError::InvalidXmlDocument)),
        (cors(&format!("{}tail", rule("*", "GET", "1"))), Err(StorageError::InvalidXmlDocument)),
        (cors(&rule("https://a.example&#x1;", "GET", "1")), Err(StorageError::InvalidXmlDocument)),
        // Markup where a value belongs is refused, not read as an empty value.
        (cors(&rule("<b>*</b>", "GET", "1")), Err(StorageError::InvalidXmlDocument)),
        (cors(&rule("*", "GET", "1").replace("</CorsRule>", "<AllowedHeaders><x /></AllowedHeaders></CorsRule>")), Err(StorageError::InvalidXmlDocument)),
        (metrics("<Version><v>1.0</v></Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"), Err(StorageError::InvalidXmlDocument)),
        (logging("<Enabled><e>true</e></Enabled><Days>3</Days>"), Err(StorageError::InvalidXmlDocument)),
        (metrics("<Version>1.\u{0}</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"), Err(StorageError::InvalidXmlDocument)),
    ];
    for (body, expected) in cases {
        assert_eq!(
            service_properties_update(body.as_bytes()).map(|_| ()),
            expected,
            "{body}"
        );
    }
}

#[test]
fn ordered_subset_table() {
    for (text, expected) in [
        ("", true),
        ("r", true),
        ("raup", true),
        ("rp", true),
        ("up", true),
        ("pr", false),
        ("rr", false),
        ("x", false),
        ("R", false),
    ] {
        assert_eq!(is_ordered_subset(text, "raup"), expected, "{text}");
    }
}

#[test]
fn service_stats_layout() {
    let mut out = BytesMut::new();
    service_stats_into(&mut out, 1_795_305_600_000);
    assert_eq!(
        &out[DECLARATION.len()..],
        &b"<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>Sun, 22 Nov 2026 00:00:00 GMT</LastSyncTime></GeoReplication></StorageServiceStats>"[..]
    );
}
