//! Raw-HTTP tests of access to the real server: SharedKeyLite, host-style URLs, several accounts,
//! the read-only secondary endpoint and its statistics, stored access policies across shards,
//! service properties and CORS. Requests are signed with the server's own auth module, as the
//! SDKs would sign them.

mod common;

use common::{
    assert_status, create_queue, elements, exchange, put_body, send, service_sas, signed_request,
    unsigned_request, Server, Signer,
};

use azq::auth::shared_key::SharedKeyScheme;

/// A CORS setting: one rule for one origin and one for every origin.
const CORS_PROPERTIES: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties><Cors><CorsRule><AllowedOrigins>https://app.example</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders>x-ms-meta-*,content-type</AllowedHeaders><ExposedHeaders>x-ms-request-id,x-ms-meta-*,X-MS-APPROXIMATE-*,x-custom</ExposedHeaders><MaxAgeInSeconds>600</MaxAgeInSeconds></CorsRule><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>DELETE</AllowedMethods><AllowedHeaders /><ExposedHeaders /><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";

#[test]
fn shared_key_lite_signs_requests() {
    let server = Server::start(&[]);
    let lite = Signer {
        scheme: SharedKeyScheme::SharedKeyLite,
        ..Signer::development()
    };
    let response = send(
        &server,
        lite.request("PUT", "/devstoreaccount1/lite", &[], b""),
    );
    assert_status(&response, 201, None);
    let response = send(
        &server,
        lite.request(
            "POST",
            "/devstoreaccount1/lite/messages",
            &[("Content-Type", "application/xml")],
            &put_body("hello lite"),
        ),
    );
    assert_status(&response, 201, None);
    let response = send(
        &server,
        lite.request(
            "GET",
            "/devstoreaccount1/lite/messages?peekonly=true&numofmessages=2",
            &[],
            b"",
        ),
    );
    assert_status(&response, 200, None);
    assert_eq!(elements(&response.text(), "MessageText"), ["hello lite"]);
    // SharedKeyLite signs only `comp` of the query: a metadata request proves it.
    let response = send(
        &server,
        lite.request("GET", "/devstoreaccount1/lite?comp=metadata", &[], b""),
    );
    assert_status(&response, 200, None);

    let wrong_key = Signer {
        key: "d3Jvbmcga2V5IGZvciB0ZXN0aW5nIG9ubHk=",
        ..lite
    };
    let response = send(
        &server,
        wrong_key.request("GET", "/devstoreaccount1/lite?comp=metadata", &[], b""),
    );
    assert_status(&response, 403, Some("AuthenticationFailed"));
}

#[test]
fn host_style_urls_take_the_account_from_the_host() {
    let server = Server::start(&["--shards", "2"]);
    let host = format!("devstoreaccount1.queue.localhost:{}", server.port);
    let host_style = Signer {
        host: &host,
        ..Signer::development()
    };
    let response = send(&server, host_style.request("PUT", "/hostqueue", &[], b""));
    assert_status(&response, 201, None);
    let response = send(
        &server,
        host_style.request("GET", "/?comp=list&prefix=hostqueue", &[], b""),
    );
    assert_status(&response, 200, None);
    let text = response.text();
    assert_eq!(elements(&text, "Name"), ["hostqueue"]);
    assert!(
        text.contains(&format!("ServiceEndpoint=\"http://{host}/\"")),
        "{text}"
    );
    // The same queue through a path-style URL.
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1/hostqueue?comp=metadata", &[], b""),
    );
    assert_status(&response, 200, None);
}

#[test]
fn disabled_product_style_urls_take_the_account_from_the_path() {
    let server = Server::start(&["--disableProductStyleUrl"]);
    let host = format!("devstoreaccount1.queue.localhost:{}", server.port);
    let host_style = Signer {
        host: &host,
        ..Signer::development()
    };
    // `/pathqueue` now names an account, and there is no such account.
    let response = send(&server, host_style.request("PUT", "/pathqueue", &[], b""));
    assert_status(&response, 404, Some("ResourceNotFound"));
    let response = send(
        &server,
        host_style.request("PUT", "/devstoreaccount1/pathqueue", &[], b""),
    );
    assert_status(&response, 201, None);
}

#[test]
fn accounts_from_azurite_accounts_are_isolated() {
    let first_key = "Zmlyc3QgYWNjb3VudCBrZXkgb25l";
    let second_key = "Zmlyc3QgYWNjb3VudCBrZXkgdHdv";
    let other_key = "c2Vjb25kIGFjY291bnQga2V5";
    let accounts = format!("acctone:{first_key}:{second_key};accttwo:{other_key}");
    let server = Server::start_with_env(
        &["--shards", "2"],
        &[("AZURITE_ACCOUNTS", accounts.as_str())],
    );
    let first = Signer {
        account: "acctone",
        key: first_key,
        ..Signer::development()
    };
    let first_by_second_key = Signer {
        key: second_key,
        ..first
    };
    let other = Signer {
        account: "accttwo",
        key: other_key,
        ..Signer::development()
    };

    let response = send(
        &server,
        first.request("PUT", "/acctone/shared-name", &[], b""),
    );
    assert_status(&response, 201, None);
    // Both keys of an account work.
    let response = send(
        &server,
        first_by_second_key.request("GET", "/acctone/shared-name?comp=metadata", &[], b""),
    );
    assert_status(&response, 200, None);
    // The other account sees none of the first one's queues and can make its own namesake.
    let response = send(
        &server,
        other.request("GET", "/accttwo?comp=list", &[], b""),
    );
    assert_status(&response, 200, None);
    assert!(elements(&response.text(), "Name").is_empty());
    let response = send(
        &server,
        other.request("GET", "/accttwo/shared-name?comp=metadata", &[], b""),
    );
    assert_status(&response, 404, Some("QueueNotFound"));
    let response = send(
        &server,
        other.request("PUT", "/accttwo/shared-name", &[], b""),
    );
    assert_status(&response, 201, None);
    // Its key does not open the first account, not even by naming it.
    let response = send(
        &server,
        other.request("DELETE", "/acctone/shared-name", &[], b""),
    );
    assert_status(&response, 403, Some("AuthenticationFailed"));
    let intruder = Signer {
        account: "acctone",
        ..other
    };
    let response = send(
        &server,
        intruder.request("DELETE", "/acctone/shared-name", &[], b""),
    );
    assert_status(&response, 403, Some("AuthenticationFailed"));
    // The development account is gone.
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1?comp=list", &[], b""),
    );
    assert_status(&response, 404, Some("ResourceNotFound"));
    // Service properties are per account too.
    let response = send(
        &server,
        first.request(
            "PUT",
            "/acctone/?restype=service&comp=properties",
            &[("Content-Type", "application/xml")],
            CORS_PROPERTIES.as_bytes(),
        ),
    );
    assert_status(&response, 202, None);
    let response = send(
        &server,
        other.request("GET", "/accttwo/?restype=service&comp=properties", &[], b""),
    );
    assert_status(&response, 200, None);
    assert!(response.text().contains("<Cors />"), "{}", response.text());
}

#[test]
fn secondary_endpoint_is_read_only_and_serves_stats() {
    let server = Server::start(&["--shards", "2"]);
    create_queue(&server, "replicated");
    let response = send(
        &server,
        signed_request(
            "POST",
            "/devstoreaccount1/replicated/messages",
            &[],
            &put_body("on the primary"),
        ),
    );
    assert_status(&response, 201, None);

    for target in [
        "/devstoreaccount1-secondary/replicated?comp=metadata",
        "/devstoreaccount1-secondary/replicated/messages?peekonly=true",
        "/devstoreaccount1-secondary/replicated?comp=acl",
        "/devstoreaccount1-secondary?comp=list",
        "/devstoreaccount1-secondary/?restype=service&comp=properties",
    ] {
        let response = send(&server, signed_request("GET", target, &[], b""));
        assert_status(&response, 200, None);
    }
    for (method, target) in [
        ("PUT", "/devstoreaccount1-secondary/other"),
        ("DELETE", "/devstoreaccount1-secondary/replicated"),
        ("POST", "/devstoreaccount1-secondary/replicated/messages"),
        ("GET", "/devstoreaccount1-secondary/replicated/messages"),
        ("DELETE", "/devstoreaccount1-secondary/replicated/messages"),
        (
            "PUT",
            "/devstoreaccount1-secondary/replicated?comp=metadata",
        ),
    ] {
        let body = if method == "POST" {
            put_body("nope")
        } else {
            Vec::new()
        };
        let response = send(&server, signed_request(method, target, &[], &body));
        assert_status(&response, 403, Some("InsufficientAccountPermissions"));
    }
    // Nothing changed on the primary: the message is still there and visible.
    let response = send(
        &server,
        signed_request(
            "GET",
            "/devstoreaccount1/replicated/messages?peekonly=true",
            &[],
            b"",
        ),
    );
    assert_eq!(
        elements(&response.text(), "MessageText"),
        ["on the primary"]
    );

    // Statistics: only on the secondary, host-style too.
    let response = send(
        &server,
        signed_request(
            "GET",
            "/devstoreaccount1-secondary/?restype=service&comp=stats",
            &[],
            b"",
        ),
    );
    assert_status(&response, 200, None);
    let text = response.text();
    assert_eq!(elements(&text, "Status"), ["live"]);
    let last_sync = elements(&text, "LastSyncTime");
    assert!(
        last_sync.len() == 1 && last_sync[0].ends_with(" GMT"),
        "{text}"
    );
    let host = format!("devstoreaccount1-secondary.queue.localhost:{}", server.port);
    let secondary_host = Signer {
        host: &host,
        ..Signer::development()
    };
    let response = send(
        &server,
        secondary_host.request("GET", "/?restype=service&comp=stats", &[], b""),
    );
    assert_status(&response, 200, None);
    let response = send(
        &server,
        signed_request(
            "GET",
            "/devstoreaccount1/?restype=service&comp=stats",
            &[],
            b"",
        ),
    );
    assert_status(&response, 400, Some("InvalidQueryParameterValue"));
}

#[test]
fn cors_preflight_is_answered_from_the_rules_without_authentication() {
    let server = Server::start(&["--shards", "2"]);
    let preflight = |origin: Option<&str>, method: Option<&str>, headers: Option<&str>| {
        let mut raw = "OPTIONS /devstoreaccount1/anyqueue/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            .to_string();
        for (name, value) in [
            ("Origin", origin),
            ("Access-Control-Request-Method", method),
            ("Access-Control-Request-Headers", headers),
        ] {
            if let Some(value) = value {
                raw.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        raw.push_str("\r\n");
        exchange(&server, raw.as_bytes())
    };
    // No rules yet: refused.
    let response = preflight(Some("https://app.example"), Some("PUT"), None);
    assert_status(&response, 403, Some("CorsPreflightFailure"));

    let response = send(
        &server,
        signed_request(
            "PUT",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[("Content-Type", "application/xml")],
            CORS_PROPERTIES.as_bytes(),
        ),
    );
    assert_status(&response, 202, None);

    // Allowed, on whichever shard the connection lands.
    for _ in 0..8 {
        let response = preflight(
            Some("https://app.example"),
            Some("PUT"),
            Some("x-ms-meta-colour,Content-Type"),
        );
        assert_status(&response, 200, None);
        assert_eq!(
            response.header("Access-Control-Allow-Origin"),
            Some("https://app.example")
        );
        assert_eq!(response.header("Access-Control-Allow-Methods"), Some("PUT"));
        assert_eq!(
            response.header("Access-Control-Allow-Headers"),
            Some("x-ms-meta-colour,Content-Type")
        );
        assert_eq!(response.header("Access-Control-Max-Age"), Some("600"));
        assert_eq!(
            response.header("Access-Control-Allow-Credentials"),
            Some("true")
        );
        assert_eq!(response.header("Content-Length"), Some("0"));
    }
    let response = preflight(Some("https://elsewhere.example"), Some("DELETE"), None);
    assert_status(&response, 200, None);
    assert_eq!(response.header("Access-Control-Max-Age"), Some("5"));

    // Refused: an origin, method or header no rule allows.
    for (origin, method, headers) in [
        ("https://elsewhere.example", "PUT", None),
        ("https://app.example", "POST", None),
        ("https://app.example", "GET", Some("x-custom")),
    ] {
        let response = preflight(Some(origin), Some(method), headers);
        assert_status(&response, 403, Some("CorsPreflightFailure"));
        assert_eq!(response.header("Access-Control-Allow-Origin"), None);
    }
    // Malformed: a required header is missing. The service's code and text for it.
    for response in [
        preflight(None, Some("PUT"), None),
        preflight(Some("https://app.example"), None, None),
    ] {
        assert_status(&response, 400, Some("InvalidHeaderValue"));
        assert!(
            response
                .text()
                .contains("<Message>A required CORS header is not present.\n"),
            "{}",
            response.text()
        );
    }
}

#[test]
fn actual_requests_get_cors_headers_when_a_rule_matches() {
    let server = Server::start(&[]);
    let response = send(
        &server,
        signed_request(
            "PUT",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[("Content-Type", "application/xml")],
            CORS_PROPERTIES.as_bytes(),
        ),
    );
    assert_status(&response, 202, None);
    create_queue(&server, "corsqueue");
    let target = "/devstoreaccount1/corsqueue?comp=metadata";
    let response = send(
        &server,
        signed_request("PUT", target, &[("x-ms-meta-Colour", "blue")], b""),
    );
    assert_status(&response, 204, None);

    let response = send(
        &server,
        signed_request("GET", target, &[("Origin", "https://app.example")], b""),
    );
    assert_status(&response, 200, None);
    assert_eq!(
        response.header("Access-Control-Allow-Origin"),
        Some("https://app.example")
    );
    // Patterns become the response's own header names (a browser reads only names); a plain
    // name is listed whether or not the response has it.
    assert_eq!(
        response.header("Access-Control-Expose-Headers"),
        Some("x-ms-request-id,x-ms-approximate-messages-count,x-ms-meta-Colour,x-custom")
    );
    assert_eq!(
        response.header("Access-Control-Allow-Credentials"),
        Some("true")
    );
    assert_eq!(response.header("Vary"), Some("Origin"));

    // Errors carry them too, so the browser can read why.
    let response = send(
        &server,
        signed_request(
            "GET",
            "/devstoreaccount1/missing?comp=metadata",
            &[("Origin", "https://app.example")],
            b"",
        ),
    );
    assert_status(&response, 404, Some("QueueNotFound"));
    assert_eq!(
        response.header("Access-Control-Allow-Origin"),
        Some("https://app.example")
    );

    // The wildcard rule allows DELETE from anywhere: `*`, nothing that varies by origin.
    let response = send(
        &server,
        signed_request(
            "DELETE",
            "/devstoreaccount1/corsqueue/messages",
            &[("Origin", "https://elsewhere.example")],
            b"",
        ),
    );
    assert_status(&response, 204, None);
    assert_eq!(response.header("Access-Control-Allow-Origin"), Some("*"));
    assert_eq!(response.header("Access-Control-Allow-Credentials"), None);
    assert_eq!(response.header("Vary"), None);

    // The same without Origin: the rule allows every origin, so it matches.
    let response = send(
        &server,
        signed_request("DELETE", "/devstoreaccount1/corsqueue/messages", &[], b""),
    );
    assert_status(&response, 204, None);
    assert_eq!(response.header("Access-Control-Allow-Origin"), Some("*"));
    assert_eq!(response.header("Vary"), None);

    // No rule matches a GET: only Vary. No Origin (and no rule for every origin that allows
    // GET): the same.
    for headers in [&[("Origin", "https://elsewhere.example")][..], &[]] {
        let response = send(&server, signed_request("GET", target, headers, b""));
        assert_status(&response, 200, None);
        assert_eq!(response.header("Access-Control-Allow-Origin"), None);
        assert_eq!(response.header("Vary"), Some("Origin"));
    }

    // Methods other than GET and HEAD never get Vary: answers to them are not cached.
    let response = send(
        &server,
        signed_request("PUT", target, &[("Origin", "https://app.example")], b""),
    );
    assert_status(&response, 204, None);
    assert_eq!(
        response.header("Access-Control-Allow-Origin"),
        Some("https://app.example")
    );
    assert_eq!(response.header("Vary"), None);
    for headers in [&[("Origin", "https://elsewhere.example")][..], &[]] {
        let response = send(&server, signed_request("PUT", target, headers, b""));
        assert_status(&response, 204, None);
        assert_eq!(response.header("Access-Control-Allow-Origin"), None);
        assert_eq!(response.header("Vary"), None);
    }
}

#[test]
fn a_rule_for_every_origin_answers_requests_without_origin() {
    // Azure's Vary table, row "Origin absent, rules, a rule allowing every origin matches":
    // Access-Control-Allow-Origin `*` and the exposed headers, no Vary (Azurite's CORS test
    // "Request Match rule exists that allows all origins (*)" checks the same).
    let server = Server::start(&[]);
    let properties = "<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders /><ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>60</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>";
    let service = "/devstoreaccount1/?restype=service&comp=properties";
    let response = send(
        &server,
        signed_request("PUT", service, &[], properties.as_bytes()),
    );
    assert_status(&response, 202, None);
    for headers in [&[("Origin", "https://anywhere.example")][..], &[]] {
        let response = send(&server, signed_request("GET", service, headers, b""));
        assert_status(&response, 200, None);
        assert_eq!(response.header("Access-Control-Allow-Origin"), Some("*"));
        assert!(
            response
                .header("Access-Control-Expose-Headers")
                .is_some_and(|exposed| exposed.contains("x-ms-request-id")),
            "{:?}",
            response.headers
        );
        assert_eq!(response.header("Vary"), None);
        assert_eq!(response.header("Access-Control-Allow-Credentials"), None);
    }
}

#[test]
fn stored_access_policies_are_the_account_owners_alone() {
    // "Only the account owner may call this operation" (Get/Set Queue ACL): a SAS of any kind,
    // however broad, is refused with AuthorizationFailure (the service's SAS error table:
    // "attempting to modify an access control list"), and the policies stay as they were.
    let server = Server::start(&[]);
    create_queue(&server, "ownedqueue");
    let acl = "<SignedIdentifiers><SignedIdentifier><Id>kept</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    let target = "/devstoreaccount1/ownedqueue?comp=acl";
    let response = send(&server, signed_request("PUT", target, &[], acl.as_bytes()));
    assert_status(&response, 204, None);
    // `service_sas` signs an account SAS too when the fields carry `ss` and `srt`.
    let account_sas = service_sas(
        "ownedqueue",
        &[
            ("sv", "2026-10-06"),
            ("ss", "bfqt"),
            ("srt", "sco"),
            ("sp", "rwdlacup"),
            ("se", "2099-01-01T00:00:00Z"),
        ],
    );
    let service_sas = service_sas(
        "ownedqueue",
        &[
            ("sv", "2026-10-06"),
            ("sp", "raup"),
            ("se", "2099-01-01T00:00:00Z"),
        ],
    );
    for token in [&account_sas, &service_sas] {
        // The same token does work where it may: Get Queue Metadata.
        let response = send(
            &server,
            unsigned_request(
                "GET",
                &format!("/devstoreaccount1/ownedqueue?comp=metadata&{token}"),
                b"",
            ),
        );
        assert_status(&response, 200, None);
        let with_sas = format!("{target}&{token}");
        for method in ["GET", "HEAD"] {
            let response = send(&server, unsigned_request(method, &with_sas, b""));
            assert_status(&response, 403, Some("AuthorizationFailure"));
        }
        let response = send(
            &server,
            unsigned_request("PUT", &with_sas, b"<SignedIdentifiers />"),
        );
        assert_status(&response, 403, Some("AuthorizationFailure"));
        assert_eq!(
            response.reason,
            "This request is not authorized to perform this operation."
        );
    }
    let response = send(&server, signed_request("GET", target, &[], b""));
    assert_status(&response, 200, None);
    assert_eq!(elements(&response.text(), "Id"), ["kept"]);
}

#[test]
fn stored_policy_reaches_every_shard_and_dies_with_its_queue() {
    let server = Server::start(&["--shards", "2"]);
    create_queue(&server, "policyqueue");
    let acl = "<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers><SignedIdentifier><Id>readers</Id><AccessPolicy><Start>2020-01-01T00:00:00Z</Start><Expiry>2099-01-01T00:00:00.0000000Z</Expiry><Permission>rp</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>";
    let response = send(
        &server,
        signed_request(
            "PUT",
            "/devstoreaccount1/policyqueue?comp=acl",
            &[("Content-Type", "application/xml")],
            acl.as_bytes(),
        ),
    );
    assert_status(&response, 204, None);
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1/policyqueue?comp=acl", &[], b""),
    );
    assert_status(&response, 200, None);
    assert_eq!(
        response.text(),
        acl,
        "Get Queue ACL gives back exactly what was set"
    );

    let token = service_sas("policyqueue", &[("sv", "2026-10-06"), ("si", "readers")]);
    let peek = format!("/devstoreaccount1/policyqueue/messages?peekonly=true&{token}");
    // Connections land on both shards; each authorizes from its own copy.
    for _ in 0..10 {
        let response = send(&server, unsigned_request("GET", &peek, b""));
        assert_status(&response, 200, None);
    }
    // The policy grants r and p, not a.
    let put = format!("/devstoreaccount1/policyqueue/messages?{token}");
    let response = send(&server, unsigned_request("POST", &put, &put_body("x")));
    assert_status(&response, 403, Some("AuthorizationPermissionMismatch"));
    // A field in both the SAS and the policy is refused.
    let conflicting = service_sas(
        "policyqueue",
        &[("sv", "2026-10-06"), ("sp", "r"), ("si", "readers")],
    );
    let response = send(
        &server,
        unsigned_request(
            "GET",
            &format!("/devstoreaccount1/policyqueue/messages?peekonly=true&{conflicting}"),
            b"",
        ),
    );
    assert_status(&response, 403, Some("AuthenticationFailed"));

    // Delete and create again: the new queue has no policies, on any shard.
    let response = send(
        &server,
        signed_request("DELETE", "/devstoreaccount1/policyqueue", &[], b""),
    );
    assert_status(&response, 204, None);
    create_queue(&server, "policyqueue");
    for _ in 0..10 {
        let response = send(&server, unsigned_request("GET", &peek, b""));
        assert_status(&response, 403, Some("AuthenticationFailed"));
    }
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1/policyqueue?comp=acl", &[], b""),
    );
    assert_eq!(elements(&response.text(), "Id"), Vec::<&str>::new());
}

#[test]
fn invalid_settings_bodies_change_nothing() {
    let server = Server::start(&["--shards", "2"]);
    create_queue(&server, "strict");
    let set_acl = |body: &str| {
        send(
            &server,
            signed_request(
                "PUT",
                "/devstoreaccount1/strict?comp=acl",
                &[("Content-Type", "application/xml")],
                body.as_bytes(),
            ),
        )
    };
    let identifier = |id: &str, permission: &str| {
        format!("<SignedIdentifier><Id>{id}</Id><AccessPolicy><Permission>{permission}</Permission></AccessPolicy></SignedIdentifier>")
    };
    let response = set_acl(&format!(
        "<SignedIdentifiers>{}</SignedIdentifiers>",
        identifier("kept", "r")
    ));
    assert_status(&response, 204, None);
    let six = (0..6)
        .map(|index| identifier(&format!("p{index}"), "r"))
        .collect::<String>();
    for (body, code) in [
        (
            format!("<SignedIdentifiers>{six}</SignedIdentifiers>"),
            "InvalidXmlDocument",
        ),
        (
            format!("<SignedIdentifiers>{}</SignedIdentifiers>", identifier("p", "rw")),
            "InvalidXmlDocument",
        ),
        (
            format!(
                "<SignedIdentifiers>{}</SignedIdentifiers>",
                identifier(&"x".repeat(65), "r")
            ),
            "InvalidXmlNodeValue",
        ),
        (
            "<SignedIdentifiers><SignedIdentifier><Id>p</Id><AccessPolicy><Start>tomorrow</Start></AccessPolicy></SignedIdentifier></SignedIdentifiers>".to_string(),
            "InvalidXmlNodeValue",
        ),
        ("<SignedIdentifiers>".to_string(), "InvalidXmlDocument"),
        // An id no XML 1.0 document may carry: Get Queue ACL could never give it back.
        (
            format!("<SignedIdentifiers>{}</SignedIdentifiers>", identifier("a&#x1;", "r")),
            "InvalidXmlDocument",
        ),
        // Markup where a value belongs, which a lenient reader would take as an empty value.
        (
            format!("<SignedIdentifiers>{}</SignedIdentifiers>", identifier("p", "<b>r</b>")),
            "InvalidXmlDocument",
        ),
    ] {
        let response = set_acl(&body);
        assert_status(&response, 400, Some(code));
    }
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1/strict?comp=acl", &[], b""),
    );
    assert_eq!(elements(&response.text(), "Id"), ["kept"]);

    // Set Queue ACL on a missing queue.
    let response = send(
        &server,
        signed_request(
            "PUT",
            "/devstoreaccount1/missing?comp=acl",
            &[],
            b"<SignedIdentifiers />",
        ),
    );
    assert_status(&response, 404, Some("QueueNotFound"));

    // Service properties: more than five CORS rules.
    let rule = "<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule>";
    let response = send(
        &server,
        signed_request(
            "PUT",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[],
            format!(
                "<StorageServiceProperties><Cors>{}</Cors></StorageServiceProperties>",
                rule.repeat(6)
            )
            .as_bytes(),
        ),
    );
    assert_status(&response, 400, Some("InvalidXmlDocument"));
    let response = send(
        &server,
        signed_request(
            "GET",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[],
            b"",
        ),
    );
    assert!(response.text().contains("<Cors />"), "{}", response.text());
}

#[test]
fn a_service_sas_managing_its_queue_is_an_authorization_failure() {
    // Azure/Azurite#662: the service answers a queue service SAS that creates a queue with
    // 403 AuthorizationFailure (Azurite: AuthorizationPermissionMismatch). No service SAS
    // permission (r, a, u, p) covers creating, deleting or clearing a queue or setting its
    // metadata; nothing changes.
    let server = Server::start(&[]);
    create_queue(&server, "managed");
    let token = |queue: &str| {
        service_sas(
            queue,
            &[
                ("sv", "2026-10-06"),
                ("sp", "raup"),
                ("se", "2099-01-01T00:00:00Z"),
            ],
        )
    };
    let cases = [
        (
            "PUT",
            format!("/devstoreaccount1/created?{}", token("created")),
        ),
        (
            "DELETE",
            format!("/devstoreaccount1/managed?{}", token("managed")),
        ),
        (
            "PUT",
            format!(
                "/devstoreaccount1/managed?comp=metadata&{}",
                token("managed")
            ),
        ),
        (
            "DELETE",
            format!("/devstoreaccount1/managed/messages?{}", token("managed")),
        ),
    ];
    for (method, target) in cases {
        let response = send(&server, unsigned_request(method, &target, b""));
        assert_status(&response, 403, Some("AuthorizationFailure"));
    }
    // What the token's permissions cover still works; the queue it could not create does not
    // exist.
    let response = send(
        &server,
        unsigned_request(
            "POST",
            &format!("/devstoreaccount1/managed/messages?{}", token("managed")),
            &put_body("allowed"),
        ),
    );
    assert_status(&response, 201, None);
    let response = send(
        &server,
        signed_request("GET", "/devstoreaccount1/created?comp=metadata", &[], b""),
    );
    assert_status(&response, 404, Some("QueueNotFound"));
}

#[test]
fn authentication_failures_carry_the_services_detail() {
    // Azure adds <AuthenticationErrorDetail> after <Message> to 403 AuthenticationFailed, in
    // these words; it is the first thing a developer reads when a signature fails.
    let server = Server::start(&[]);
    create_queue(&server, "detailed");
    let detail = |response: &common::Response| {
        assert_status(response, 403, Some("AuthenticationFailed"));
        elements(&response.text(), "AuthenticationErrorDetail")
            .first()
            .map(|detail| detail.to_string())
            .unwrap_or_else(|| panic!("no detail: {}", response.text()))
    };
    // SharedKey: the signature found and the string azq signed.
    let mut forged = signed_request("GET", "/devstoreaccount1/detailed?comp=metadata", &[], b"");
    let text = String::from_utf8(forged.clone()).unwrap();
    let signature = text
        .split("SharedKey devstoreaccount1:")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .unwrap()
        .to_string();
    let forged_signature = format!("A{}", &signature[1..]);
    let forged_signature = if forged_signature == signature {
        format!("B{}", &signature[1..])
    } else {
        forged_signature
    };
    forged = text.replace(&signature, &forged_signature).into_bytes();
    let found = detail(&send(&server, forged));
    assert!(
        found.starts_with(&format!(
            "The MAC signature found in the HTTP request '{forged_signature}' is not the same \
             as any computed signature. Server used following string to sign: 'GET\n"
        )) && found.ends_with("\n/devstoreaccount1/devstoreaccount1/detailed\ncomp:metadata'."),
        "{found}"
    );
    // A SAS whose signature does not match: the string to sign.
    let token = service_sas(
        "detailed",
        &[
            ("sv", "2026-10-06"),
            ("sp", "r"),
            ("se", "2099-01-01T00:00:00Z"),
        ],
    )
    .replace("sp=r", "sp=raup");
    let response = send(
        &server,
        unsigned_request(
            "GET",
            &format!("/devstoreaccount1/detailed/messages?peekonly=true&{token}"),
            b"",
        ),
    );
    assert_eq!(
        detail(&response),
        "Signature did not match. String to sign used was raup\n\n\
         2099-01-01T00:00:00Z\n/queue/devstoreaccount1/detailed\n\n\n\n2026-10-06"
    );
    // An expired SAS: the time frame, with the current time.
    let token = service_sas(
        "detailed",
        &[
            ("sv", "2026-10-06"),
            ("sp", "r"),
            ("st", "2020-01-01T00:00:00Z"),
            ("se", "2020-01-02T00:00:00Z"),
        ],
    );
    let response = send(
        &server,
        unsigned_request(
            "GET",
            &format!("/devstoreaccount1/detailed/messages?peekonly=true&{token}"),
            b"",
        ),
    );
    let found = detail(&response);
    assert!(
        found.starts_with(
            "Signature not valid in the specified time frame: Start [Wed, 01 Jan 2020 00:00:00 \
             GMT] - Expiry [Thu, 02 Jan 2020 00:00:00 GMT] - Current ["
        ),
        "{found}"
    );
    // A SAS without its expiry names the field.
    let token = service_sas("detailed", &[("sv", "2026-10-06"), ("sp", "r")]);
    let response = send(
        &server,
        unsigned_request(
            "GET",
            &format!("/devstoreaccount1/detailed/messages?peekonly=true&{token}"),
            b"",
        ),
    );
    assert_eq!(detail(&response), "se is mandatory. Cannot be empty");
    // Authorization codes other than AuthenticationFailed carry no detail.
    let token = service_sas(
        "detailed",
        &[
            ("sv", "2026-10-06"),
            ("sp", "r"),
            ("se", "2099-01-01T00:00:00Z"),
        ],
    );
    let response = send(
        &server,
        unsigned_request(
            "POST",
            &format!("/devstoreaccount1/detailed/messages?{token}"),
            &put_body("no"),
        ),
    );
    assert_status(&response, 403, Some("AuthorizationPermissionMismatch"));
    assert!(!response.text().contains("AuthenticationErrorDetail"));
}
