//! Raw-HTTP regression tests for differences from the real Azure Queue service that clients
//! written by others found (Azurite's portable queue tests, a raw-HTTP abuse suite) or that
//! replaying the service's recorded answers showed (`tests/recorded/replay.py`,
//! docs/PARITY.md). Each test is named after the behaviour it pins.

mod common;

use common::{
    assert_status, create_queue, elements, exchange, put_body, send, signed_request, Server,
};

#[test]
fn message_text_with_child_elements_is_refused_and_nothing_is_stored() {
    let server = Server::start(&[]);
    create_queue(&server, "nested");
    let messages = "/devstoreaccount1/nested/messages";
    for text in ["<b>nested</b>", "a<br/>b", "<MessageText>x</MessageText>"] {
        let response = send(
            &server,
            signed_request("POST", messages, &[], &put_body(text)),
        );
        assert_status(&response, 400, Some("InvalidXmlDocument"));
    }
    let response = send(
        &server,
        signed_request("GET", &format!("{messages}?peekonly=true"), &[], b""),
    );
    assert_status(&response, 200, None);
    assert_eq!(
        elements(&response.text(), "MessageText"),
        Vec::<&str>::new()
    );

    // Update Message refuses the same body and leaves the text as it was.
    let response = send(
        &server,
        signed_request("POST", messages, &[], &put_body("kept")),
    );
    assert_status(&response, 201, None);
    let response = send(&server, signed_request("GET", messages, &[], b""));
    let text = response.text();
    let id = elements(&text, "MessageId")[0].to_string();
    let receipt = elements(&text, "PopReceipt")[0]
        .replace('+', "%2B")
        .replace('/', "%2F");
    let response = send(
        &server,
        signed_request(
            "PUT",
            &format!("{messages}/{id}?popreceipt={receipt}&visibilitytimeout=0"),
            &[],
            &put_body("<b>replaced</b>"),
        ),
    );
    assert_status(&response, 400, Some("InvalidXmlDocument"));
    // The receipt still holds; an update without a body makes the message visible, text kept.
    let response = send(
        &server,
        signed_request(
            "PUT",
            &format!("{messages}/{id}?popreceipt={receipt}&visibilitytimeout=0"),
            &[],
            b"",
        ),
    );
    assert_status(&response, 204, None);
    let response = send(
        &server,
        signed_request("GET", &format!("{messages}?peekonly=true"), &[], b""),
    );
    assert_eq!(elements(&response.text(), "MessageText"), ["kept"]);
}

#[test]
fn queue_names_of_bad_length_get_the_services_own_message() {
    let server = Server::start(&[]);
    let long = "a".repeat(64);
    for name in ["ab", long.as_str()] {
        for (method, target) in [
            ("PUT", format!("/devstoreaccount1/{name}")),
            ("GET", format!("/devstoreaccount1/{name}?comp=metadata")),
            ("POST", format!("/devstoreaccount1/{name}/messages")),
        ] {
            let response = send(
                &server,
                signed_request(method, &target, &[], &put_body("m")),
            );
            assert_status(&response, 400, Some("OutOfRangeInput"));
            assert!(
                response.text().contains(
                    "<Message>The specified resource name length is not within the \
                     permissible limits.\nRequestId:"
                ),
                "{method} {target}: {}",
                response.text()
            );
        }
    }
    // Bad characters keep the service's wording, typo included (Azurite corrects it).
    let response = send(
        &server,
        signed_request("PUT", "/devstoreaccount1/bad_name", &[], b""),
    );
    assert_status(&response, 400, Some("InvalidResourceName"));
    assert!(
        response
            .text()
            .contains("<Message>The specifed resource name contains invalid characters."),
        "{}",
        response.text()
    );
}

/// The element names of `xml` in document order (start tags only).
fn element_names(xml: &str) -> Vec<&str> {
    xml.split('<')
        .skip(1)
        .filter(|tag| !tag.starts_with(['/', '?']))
        .map(|tag| tag.split([' ', '>', '/']).next().unwrap_or(""))
        .collect()
}

#[test]
fn service_properties_come_back_in_the_services_element_order() {
    // The service's recorded answers list Logging's children as Version, Read, Write, Delete
    // and a CorsRule's AllowedMethods before AllowedOrigins, whatever order they were set in
    // (the SDKs send Delete first and AllowedOrigins first).
    let server = Server::start(&[]);
    let sent = "<StorageServiceProperties><Logging><Version>1.0</Version><Delete>true</Delete><Read>false</Read><Write>true</Write><RetentionPolicy><Enabled>true</Enabled><Days>5</Days></RetentionPolicy></Logging><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders /><ExposedHeaders /><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";
    let target = "/devstoreaccount1/?restype=service&comp=properties";
    let response = send(&server, signed_request("PUT", target, &[], sent.as_bytes()));
    assert_status(&response, 202, None);
    let response = send(&server, signed_request("GET", target, &[], b""));
    assert_status(&response, 200, None);
    let text = response.text();
    let names = element_names(&text);
    let logging = names.iter().position(|name| *name == "Logging").unwrap();
    assert_eq!(
        names[logging..logging + 5],
        ["Logging", "Version", "Read", "Write", "Delete"],
        "{text}"
    );
    let rule = names.iter().position(|name| *name == "CorsRule").unwrap();
    assert_eq!(
        names[rule..],
        [
            "CorsRule",
            "AllowedMethods",
            "AllowedOrigins",
            "AllowedHeaders",
            "ExposedHeaders",
            "MaxAgeInSeconds"
        ],
        "{text}"
    );
    // Values are kept as set.
    assert_eq!(elements(&text, "Delete"), ["true"]);
    assert_eq!(elements(&text, "Read"), ["false"]);
}

#[test]
fn service_properties_the_service_refuses_change_nothing() {
    // Recorded answers: a self-closed root and retention beyond 365 days are both 400
    // InvalidXmlDocument on the service.
    let server = Server::start(&[]);
    let target = "/devstoreaccount1/?restype=service&comp=properties";
    let logging = |days: &str| {
        format!("<StorageServiceProperties><Logging><Version>1.0</Version><Delete>true</Delete><Read>true</Read><Write>true</Write><RetentionPolicy><Enabled>true</Enabled><Days>{days}</Days></RetentionPolicy></Logging></StorageServiceProperties>")
    };
    let response = send(
        &server,
        signed_request("PUT", target, &[], logging("7").as_bytes()),
    );
    assert_status(&response, 202, None);
    for body in [
        "<?xml version='1.0' encoding='utf-8'?>\n<StorageServiceProperties />".to_string(),
        logging("366"),
        logging("0"),
    ] {
        let response = send(&server, signed_request("PUT", target, &[], body.as_bytes()));
        assert_status(&response, 400, Some("InvalidXmlDocument"));
    }
    let response = send(&server, signed_request("GET", target, &[], b""));
    assert_eq!(elements(&response.text(), "Days"), ["7"]);
    // Opened and closed with nothing inside: nothing to change, accepted.
    let response = send(
        &server,
        signed_request(
            "PUT",
            target,
            &[],
            b"<StorageServiceProperties></StorageServiceProperties>",
        ),
    );
    assert_status(&response, 202, None);
}

#[test]
fn a_message_too_large_names_the_limit() {
    // Recorded answer of the service to a Put whose text exceeds 64 KiB: 413
    // RequestBodyTooLarge with <MaxLimit>65536</MaxLimit> after the message.
    let server = Server::start(&[]);
    create_queue(&server, "big");
    let response = send(
        &server,
        signed_request(
            "POST",
            "/devstoreaccount1/big/messages",
            &[],
            &put_body(&"x".repeat(65537)),
        ),
    );
    assert_status(&response, 413, Some("RequestBodyTooLarge"));
    assert!(
        response
            .text()
            .ends_with("</Message><MaxLimit>65536</MaxLimit></Error>"),
        "{}",
        response.text()
    );
}

#[test]
fn a_put_whose_lease_outlives_its_ttl_is_an_invalid_value() {
    // Recorded answer of the service to Put Message ?visibilitytimeout=30&messagettl=30:
    // 400 InvalidQueryParameterValue ("messagettl must be greater than visibilitytimeout").
    let server = Server::start(&[]);
    create_queue(&server, "timing");
    for query in [
        "visibilitytimeout=30&messagettl=30",
        "visibilitytimeout=31&messagettl=30",
    ] {
        let response = send(
            &server,
            signed_request(
                "POST",
                &format!("/devstoreaccount1/timing/messages?{query}"),
                &[],
                &put_body("m"),
            ),
        );
        assert_status(&response, 400, Some("InvalidQueryParameterValue"));
    }
    // Out of range stays out of range.
    let response = send(
        &server,
        signed_request(
            "POST",
            "/devstoreaccount1/timing/messages?visibilitytimeout=604801",
            &[],
            &put_body("m"),
        ),
    );
    assert_status(&response, 400, Some("OutOfRangeQueryParameterValue"));
}

#[test]
fn error_status_lines_carry_the_errors_message_as_the_service_writes_it() {
    // Recorded answers of the service: `HTTP/1.1 404 The specified queue does not exist.`, and
    // the standard phrase for successes (`201 Created`); the legacy SDKs' exception texts start
    // with the phrase.
    let server = Server::start(&[]);
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1/missing?comp=metadata", &[], b""),
    );
    assert_status(&response, 404, Some("QueueNotFound"));
    assert_eq!(response.reason, "The specified queue does not exist.");
    // HEAD answers carry it too (they have no body to say it in).
    let response = send(
        &server,
        signed_request("HEAD", "/devstoreaccount1/missing?comp=metadata", &[], b""),
    );
    assert_eq!(
        (response.status, response.reason.as_str()),
        (404, "The specified queue does not exist.")
    );
    let response = send(
        &server,
        signed_request("PUT", "/devstoreaccount1/bad_name", &[], b""),
    );
    assert_eq!(
        response.reason,
        "The specifed resource name contains invalid characters."
    );
    let mut forged = signed_request("PUT", "/devstoreaccount1/forged", &[], b"");
    let at = forged
        .windows(10)
        .position(|window| window == b"SharedKey ")
        .unwrap()
        + 30;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let response = send(&server, forged);
    assert_status(&response, 403, Some("AuthenticationFailed"));
    // The service's wording, recorded in its answers: "of Authorization header", without
    // "the" (Azurite adds it).
    assert_eq!(
        response.reason,
        "Server failed to authenticate the request. Make sure the value of Authorization header \
         is formed correctly including the signature."
    );
    // A request the parser refuses is answered the same way.
    let response = exchange(&server, b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n");
    assert_eq!(
        (response.status, response.reason.as_str()),
        (400, "The request could not be parsed as HTTP/1.1.")
    );
    // Successes keep the standard phrases.
    let response = send(
        &server,
        signed_request("PUT", "/devstoreaccount1/kept", &[], b""),
    );
    assert_eq!(
        (response.status, response.reason.as_str()),
        (201, "Created")
    );
    let response = send(
        &server,
        signed_request("DELETE", "/devstoreaccount1/kept", &[], b""),
    );
    assert_eq!(
        (response.status, response.reason.as_str()),
        (204, "No Content")
    );
}

#[test]
fn service_properties_take_booleans_written_as_the_legacy_sdks_write_them() {
    // azure-storage-queue 2.x writes `True` and `False`; the service's recorded answers accept
    // them (202) and read them back as `true` and `false`.
    let server = Server::start(&[]);
    let target = "/devstoreaccount1/?restype=service&comp=properties";
    let body = "<?xml version='1.0' encoding='utf-8'?>\n<StorageServiceProperties><Logging><Version>1.0</Version><Delete>True</Delete><Read>False</Read><Write>True</Write><RetentionPolicy><Enabled>False</Enabled></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>True</Enabled><IncludeAPIs>False</IncludeAPIs><RetentionPolicy><Enabled>True</Enabled><Days>5</Days></RetentionPolicy></HourMetrics></StorageServiceProperties>";
    let response = send(&server, signed_request("PUT", target, &[], body.as_bytes()));
    assert_status(&response, 202, None);
    let response = send(&server, signed_request("GET", target, &[], b""));
    let text = response.text();
    assert_eq!(elements(&text, "Delete"), ["true"], "{text}");
    assert_eq!(elements(&text, "Read"), ["false"], "{text}");
    assert_eq!(elements(&text, "IncludeAPIs"), ["false"], "{text}");
    assert_eq!(
        elements(&text, "Enabled"),
        ["false", "true", "true", "false", "false"],
        "{text}"
    );
    // Words that are not booleans stay refused.
    let refused = body.replace("<Delete>True</Delete>", "<Delete>yes</Delete>");
    let response = send(
        &server,
        signed_request("PUT", target, &[], refused.as_bytes()),
    );
    assert_status(&response, 400, Some("InvalidXmlNodeValue"));
}

#[test]
fn secondary_stats_signed_without_the_secondary_suffix_are_served() {
    // azure-storage-queue 2.1.0 signs `/devstoreaccount1-secondary/?restype=service&comp=stats`
    // with `/devstoreaccount1/devstoreaccount1/` as the canonicalised resource (its
    // emulator endpoint drops the suffix when signing); Azurite accepts it.
    let server = Server::start(&[]);
    let signed = signed_request(
        "GET",
        "/devstoreaccount1/?restype=service&comp=stats",
        &[],
        b"",
    );
    let text = String::from_utf8(signed).unwrap().replacen(
        "GET /devstoreaccount1/",
        "GET /devstoreaccount1-secondary/",
        1,
    );
    let response = send(&server, text.into_bytes());
    assert_status(&response, 200, None);
    assert_eq!(elements(&response.text(), "Status"), ["live"]);
    // The same signature does not open any other secondary resource.
    let signed = signed_request("GET", "/devstoreaccount1/?comp=list", &[], b"");
    let text = String::from_utf8(signed).unwrap().replacen(
        "GET /devstoreaccount1/?comp=list",
        "GET /devstoreaccount1-secondary/?restype=service&comp=stats",
        1,
    );
    let response = send(&server, text.into_bytes());
    assert_status(&response, 403, Some("AuthenticationFailed"));
}

#[test]
fn a_put_message_as_the_dotnet_sdk_12_4_sends_it_is_stored() {
    // Azure/Azurite#1687: Azurite answered Azure.Storage.Queues 12.4.2's SendMessageAsync with
    // a 500 after ten seconds. That SDK's generated client writes the body with
    // `XElement.ToString(SaveOptions.DisableFormatting)`: no XML declaration, no whitespace,
    // Content-Type application/xml, and these headers (from the request log). The
    // service stores it (201), and so does azq.
    let server = Server::start(&[]);
    create_queue(&server, "recording-import-jobs");
    let body = b"<QueueMessage><MessageText>eyJqb2JJZCI6NDJ9</MessageText></QueueMessage>";
    let request = common::Signer {
        version: "2018-11-09",
        ..common::Signer::development()
    }
    .request(
        "POST",
        "/devstoreaccount1/recording-import-jobs/messages",
        &[
            (
                "x-ms-client-request-id",
                "73a81446-fd1c-4c63-85a9-339e9edc6782",
            ),
            ("x-ms-return-client-request-id", "true"),
            (
                "User-Agent",
                "azsdk-net-Storage.Queues/12.4.2 (.NET 5.0.17; Microsoft Windows 10.0.19043)",
            ),
            (
                "traceparent",
                "00-cacbf14e8d4b924bbc4d82e05c4f9986-cb7fa79b8b2a3c4c-00",
            ),
            ("Content-Type", "application/xml"),
        ],
        body,
    );
    let response = send(&server, request);
    assert_status(&response, 201, None);
    assert_eq!(
        response.header("x-ms-client-request-id"),
        Some("73a81446-fd1c-4c63-85a9-339e9edc6782")
    );
    assert_eq!(elements(&response.text(), "MessageId").len(), 1);
    let response = send(
        &server,
        signed_request(
            "GET",
            "/devstoreaccount1/recording-import-jobs/messages?peekonly=true",
            &[],
            b"",
        ),
    );
    assert_eq!(
        elements(&response.text(), "MessageText"),
        ["eyJqb2JJZCI6NDJ9"]
    );
}
