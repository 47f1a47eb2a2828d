//! The control plane (`/_azq/`) as an attacker would try it, against the real server over TCP
//! on both backends (issue 41): with an account whose key is private, nothing under `/_azq/`
//! but health and metrics shows its queue names, counts or messages without proof of its key
//! (none, another account's key, a forged signature, a bearer token, a forged, foreign or
//! expired session, a SAS without the permission); with its key (SharedKey, an account SAS or
//! the console's session) it shows that account and the open ones only; admin actions obey the
//! same rule and leave other accounts' state untouched. Then the browser attacks: a
//! DNS-rebinding `Host`, a cross-site form POST and `fetch`, a same-site page on another port,
//! a blind POST without a JSON type, and a preflight, each 403 (or no CORS grant) with nothing
//! changed. The development account alone stays open as before, and the start-up line says
//! who the console is open to.

mod common;

use std::time::Duration;

use azq::auth::{SigningKey, DEVELOPMENT_ACCOUNT_KEY};
use base64::Engine as _;
use common::{assert_status, backends, elements, put_body, send, Server, Signer};
use hmac::Mac as _;

/// A private account and another one, both with keys nobody else has.
const SECRET: &str = "secretacct";
const SECRET_KEY: &str = "c2VjcmV0IGtleSBvZiB0aGUgcGF5cm9sbCBhY2NvdW50LCBub3QgcHVibGlj";
const OTHER: &str = "otheracct";
const OTHER_KEY: &str = "YW5vdGhlciBhY2NvdW50J3Mga2V5LCBhbHNvIHByaXZhdGUgYW5kIGxvbmc=";
/// The text the attacker is after.
const PAYROLL: &str = "the payroll file is at s3://x";

fn accounts_env() -> String {
    format!("{SECRET}:{SECRET_KEY};{OTHER}:{OTHER_KEY};devstoreaccount1:{DEVELOPMENT_ACCOUNT_KEY}")
}

fn signer<'a>(account: &'a str, key: &'a str) -> Signer<'a> {
    Signer {
        account,
        key,
        ..Signer::development()
    }
}

/// A raw request to 127.0.0.1 with `headers` (a body gets its length).
fn raw(method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    raw_to("127.0.0.1", method, target, headers, body)
}

fn raw_to(host: &str, method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut text = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    text.into_bytes()
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn get(server: &Server, target: &str, headers: &[(&str, &str)]) -> common::Response {
    send(server, raw("GET", target, headers, ""))
}

/// Creates `queue` in `account` and puts `text`, signed with the account's key.
fn fill(server: &Server, account: &str, key: &str, queue: &str, text: &str) {
    let signer = signer(account, key);
    let created = send(
        server,
        signer.request("PUT", &format!("/{account}/{queue}"), &[], b""),
    );
    assert_status(&created, 201, None);
    let target = format!("/{account}/{queue}/messages");
    let put = send(
        server,
        signer.request("POST", &target, &[], &put_body(text)),
    );
    assert_status(&put, 201, None);
}

/// The queue names a signed List Queues finds in `account`.
fn listed(server: &Server, account: &str, key: &str) -> Vec<String> {
    let target = format!("/{account}/?comp=list");
    let response = send(
        server,
        signer(account, key).request("GET", &target, &[], b""),
    );
    assert_status(&response, 200, None);
    elements(&response.text(), "Name")
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// An account SAS for `account`, signed with `key`, as the SDKs make one.
fn account_sas(account: &str, key: &str, permissions: &str) -> String {
    let expiry = "2099-01-01T00:00:00Z";
    let string_to_sign =
        format!("{account}\n{permissions}\nq\nsco\n\n{expiry}\n\nhttps,http\n2021-06-08\n\n");
    let signature = SigningKey::from_base64(key)
        .unwrap()
        .sign_base64(string_to_sign.as_bytes());
    format!(
        "sv=2021-06-08&ss=q&srt=sco&sp={permissions}&se={}&spr=https,http&sig={}",
        common::encode(expiry),
        common::encode(&signature)
    )
}

/// Signs in as `account` with `key`: the session cookie (`name=value`) and the full header.
fn sign_in(server: &Server, account: &str, key: &str) -> (String, String) {
    let body = format!(r#"{{"account":"{account}","key":"{key}"}}"#);
    let response = send(server, raw("POST", "/_azq/session", &[JSON], &body));
    assert_status(&response, 200, None);
    let set_cookie = response
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    (cookie, set_cookie)
}

/// A session cookie for `account` made with `key` (not the server's): what a forger can make.
fn forged_cookie(account: &str, expiry_ms: u64, key: &[u8; 32]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(b"azq console session v1\n");
    mac.update(format!("{account}\n{expiry_ms}").as_bytes());
    let mac = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("azq_session={account}.{expiry_ms}.{mac}")
}

/// 403, and the message text nowhere in the answer (a refusal may repeat what the request
/// named: a signature mismatch quotes the string it signed).
fn assert_hidden(response: &common::Response, what: &str) {
    assert_eq!(response.status, 403, "{what}: {}", response.text());
    let text = response.text();
    assert!(!text.contains(PAYROLL), "{what}: {text}");
}

#[test]
fn a_private_accounts_queues_need_its_key() {
    for backend in backends() {
        let env = accounts_env();
        let server = Server::start_with_env(
            &[backend, &["--admin"]].concat(),
            &[("AZURITE_ACCOUNTS", env.as_str())],
        );
        fill(&server, SECRET, SECRET_KEY, "ledger", PAYROLL);
        fill(&server, OTHER, OTHER_KEY, "others", "other text");
        fill(
            &server,
            "devstoreaccount1",
            DEVELOPMENT_ACCOUNT_KEY,
            "open",
            "open text",
        );

        // No credentials: the open account only.
        let listing = get(&server, "/_azq/inspect", &[]);
        assert_status(&listing, 200, None);
        let text = listing.text();
        assert!(text.contains("\"open\""), "{text}");
        for hidden in [SECRET, OTHER, "ledger", "others"] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
        assert_hidden(
            &get(&server, "/_azq/inspect?account=secretacct", &[]),
            "account=",
        );
        assert_hidden(
            &get(&server, "/_azq/inspect/secretacct/ledger", &[]),
            "no credentials",
        );
        let open = get(&server, "/_azq/inspect/devstoreaccount1/open", &[]);
        assert_status(&open, 200, None);
        assert!(open.text().contains("open text"));
        let session = get(&server, "/_azq/session", &[]);
        assert!(
            session.text().contains("\"sign_in_required\":true"),
            "{}",
            session.text()
        );
        assert!(
            session.text().contains("\"account\":null"),
            "{}",
            session.text()
        );
        // Health and metrics stay open; metrics (counts by default) name no queue.
        assert_status(&get(&server, "/_azq/health", &[]), 200, None);
        let metrics = get(&server, "/_azq/metrics", &[]);
        assert_status(&metrics, 200, None);
        assert!(!metrics.text().contains("ledger"));

        // SharedKey: the signer's account and the open ones, never another private one.
        let secret = signer(SECRET, SECRET_KEY);
        let as_secret = send(
            &server,
            secret.request("GET", "/_azq/inspect/secretacct/ledger", &[], b""),
        );
        assert_status(&as_secret, 200, None);
        assert!(as_secret.text().contains(PAYROLL));
        let other = signer(OTHER, OTHER_KEY);
        let as_other = send(
            &server,
            other.request("GET", "/_azq/inspect/secretacct/ledger", &[], b""),
        );
        assert_hidden(&as_other, "another account's key");
        let other_listing = send(&server, other.request("GET", "/_azq/inspect", &[], b"")).text();
        assert!(other_listing.contains("\"others\"") && other_listing.contains("\"open\""));
        assert!(!other_listing.contains("ledger"), "{other_listing}");
        // The right name with the wrong key, and a key claimed for another name.
        let forged =
            signer(SECRET, OTHER_KEY).request("GET", "/_azq/inspect/secretacct/ledger", &[], b"");
        assert_hidden(&send(&server, forged), "forged SharedKey");
        let mismatched =
            signer(OTHER, OTHER_KEY).request("GET", "/_azq/inspect?account=secretacct", &[], b"");
        assert_hidden(&send(&server, mismatched), "another account's listing");
        // A bearer token is never proof here, whatever it claims.
        let bearer = get(
            &server,
            "/_azq/inspect/secretacct/ledger",
            &[("Authorization", "Bearer e30.e30.")],
        );
        assert_hidden(&bearer, "bearer");

        // An account SAS with the permission the endpoint needs, and without it.
        let read = account_sas(SECRET, SECRET_KEY, "rlp");
        let by_sas = get(
            &server,
            &format!("/_azq/inspect/secretacct/ledger?{read}"),
            &[],
        );
        assert_status(&by_sas, 200, None);
        assert!(by_sas.text().contains(PAYROLL));
        // Inspection shows leased messages too: Peek's `r` alone is not enough, nor `l`.
        for narrow in ["l", "rl"] {
            let narrow = account_sas(SECRET, SECRET_KEY, narrow);
            let target = format!("/_azq/inspect/secretacct/ledger?{narrow}");
            assert_hidden(&get(&server, &target, &[]), "SAS without r and p");
        }
        // SharedKeyLite does not sign the query (what an endpoint does): refused.
        let lite = Signer {
            scheme: azq::auth::shared_key::SharedKeyScheme::SharedKeyLite,
            ..signer(SECRET, SECRET_KEY)
        };
        let lite = lite.request("GET", "/_azq/inspect/secretacct/ledger", &[], b"");
        assert_hidden(&send(&server, lite), "SharedKeyLite");
        let foreign = account_sas(SECRET, OTHER_KEY, "rl");
        let foreign = get(
            &server,
            &format!("/_azq/inspect/secretacct/ledger?{foreign}"),
            &[],
        );
        assert_hidden(&foreign, "SAS signed with another key");
        let listed_by_sas = get(
            &server,
            &format!("/_azq/inspect?account=secretacct&{read}"),
            &[],
        );
        assert!(
            listed_by_sas.text().contains("\"ledger\""),
            "{}",
            listed_by_sas.text()
        );

        // The console's session: a wrong key gets nothing, the right one a cookie for that
        // account only, which no one can forge, move to another account or stretch.
        let wrong = format!(r#"{{"account":"{SECRET}","key":"{OTHER_KEY}"}}"#);
        let refused = send(&server, raw("POST", "/_azq/session", &[JSON], &wrong));
        assert_eq!(refused.status, 403);
        assert!(refused.header("set-cookie").is_none());
        let unknown = r#"{"account":"nobody","key":"AAAA"}"#;
        assert_eq!(
            send(&server, raw("POST", "/_azq/session", &[JSON], unknown)).status,
            403
        );
        let (cookie, set_cookie) = sign_in(&server, SECRET, SECRET_KEY);
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/_azq/", "Max-Age=3600"] {
            assert!(set_cookie.contains(attribute), "{set_cookie}");
        }
        let with_cookie = get(
            &server,
            "/_azq/inspect/secretacct/ledger",
            &[("Cookie", &cookie)],
        );
        assert_status(&with_cookie, 200, None);
        assert!(with_cookie.text().contains(PAYROLL));
        let whoami = get(&server, "/_azq/session", &[("Cookie", &cookie)]).text();
        assert!(whoami.contains("\"account\":\"secretacct\""), "{whoami}");
        let foreign = get(
            &server,
            "/_azq/inspect/otheracct/others",
            &[("Cookie", &cookie)],
        );
        assert_hidden(&foreign, "a session of another account");
        assert!(!foreign.text().contains("other text"));
        let value = cookie.trim_start_matches("azq_session=");
        let (_, rest) = value.split_once('.').unwrap();
        let (expiry, mac) = rest.split_once('.').unwrap();
        let moved = format!("azq_session={OTHER}.{expiry}.{mac}");
        let stretched = format!(
            "azq_session={SECRET}.{}.{mac}",
            expiry.parse::<u64>().unwrap() + 1
        );
        let zero_key = forged_cookie(SECRET, expiry.parse().unwrap(), &[0; 32]);
        for forged in [moved, stretched, zero_key, format!("{cookie}x")] {
            let response = get(
                &server,
                "/_azq/inspect/secretacct/ledger",
                &[("Cookie", &forged)],
            );
            assert_hidden(&response, &forged);
            let listing = get(&server, "/_azq/inspect", &[("Cookie", &forged)]).text();
            assert!(!listing.contains("ledger"), "{forged}: {listing}");
        }
        // Signing out removes the cookie.
        let out = send(
            &server,
            raw("DELETE", "/_azq/session", &[("Cookie", &cookie)], ""),
        );
        assert_status(&out, 200, None);
        assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));

        // Admin actions: the same rule, and nothing of another account changes.
        let post_json = |target: &str, headers: &[(&str, &str)], body: &str| {
            send(
                &server,
                raw("POST", target, &[&[JSON], headers].concat(), body),
            )
        };
        let message = r#"{"text": "planted"}"#;
        assert_hidden(
            &post_json("/_azq/admin/secretacct/ledger/messages", &[], message),
            "send",
        );
        assert_hidden(
            &post_json("/_azq/admin/secretacct/ledger/clear", &[], ""),
            "clear",
        );
        assert_hidden(
            &post_json("/_azq/admin/secretacct/ledger/receive", &[], ""),
            "receive",
        );
        assert_hidden(
            &post_json("/_azq/reset?account=secretacct", &[], ""),
            "reset account",
        );
        let other_cookie = sign_in(&server, OTHER, OTHER_KEY).0;
        let as_other = [("Cookie", other_cookie.as_str())];
        assert_hidden(
            &post_json("/_azq/admin/secretacct/ledger/clear", &as_other, ""),
            "clear",
        );
        // A reset without an account resets what the caller may act on: here the open account
        // and otheracct; secretacct keeps its queue and message.
        let reset = post_json("/_azq/reset", &as_other, "");
        assert_status(&reset, 200, None);
        assert_eq!(listed(&server, SECRET, SECRET_KEY), ["ledger"]);
        assert!(listed(&server, OTHER, OTHER_KEY).is_empty());
        assert!(listed(&server, "devstoreaccount1", DEVELOPMENT_ACCOUNT_KEY).is_empty());
        let peek = signer(SECRET, SECRET_KEY).request(
            "GET",
            "/secretacct/ledger/messages?peekonly=true",
            &[],
            b"",
        );
        assert!(send(&server, peek).text().contains(PAYROLL));
        // A SAS that may delete queues but not set service properties cannot reset them (a
        // reset without a glob resets the account's properties too), nor delete a leased
        // message without its receipt (Clear's permission); nor does a rule of every account.
        let delete_only = account_sas(SECRET, SECRET_KEY, "d");
        let target = format!("/_azq/reset?account=secretacct&{delete_only}");
        assert_hidden(&post_json(&target, &[], ""), "reset with sp=d");
        assert_eq!(listed(&server, SECRET, SECRET_KEY), ["ledger"]);
        let target = format!("/_azq/reset?account=secretacct&queues=nothing-*&{delete_only}");
        assert_status(&post_json(&target, &[], ""), 200, None);
        let process_only = account_sas(SECRET, SECRET_KEY, "p");
        let id = "00000000-0000-4000-8000-000000000000";
        let target = format!("/_azq/admin/secretacct/ledger/messages/{id}?{process_only}");
        assert_hidden(
            &send(&server, raw("DELETE", &target, &[], "")),
            "delete with sp=p",
        );
        // With the key, the actions work.
        let as_secret = [("Cookie", cookie.as_str())];
        let sent = post_json(
            "/_azq/admin/secretacct/ledger/messages",
            &as_secret,
            message,
        );
        assert_status(&sent, 201, None);

        // Fault rules: a rule must name an account the caller may act on; a caller sees and
        // removes its own rules only.
        let rule = |account: &str| {
            format!(r#"{{"account":"{account}","action":{{"error":"ServerBusy"}},"count":1}}"#)
        };
        assert_hidden(
            &post_json("/_azq/faults", &[], &rule(SECRET)),
            "a rule for secretacct",
        );
        let everyone = r#"{"action":{"error":"ServerBusy"},"count":1}"#;
        assert_eq!(post_json("/_azq/faults", &as_other, everyone).status, 403);
        assert_status(
            &post_json("/_azq/faults", &as_secret, &rule(SECRET)),
            201,
            None,
        );
        let anonymous_rules = get(&server, "/_azq/faults", &[]).text();
        assert!(!anonymous_rules.contains(SECRET), "{anonymous_rules}");
        let removed = send(&server, raw("DELETE", "/_azq/faults", &as_other, ""));
        assert!(
            removed.text().contains("\"removed\":0"),
            "{}",
            removed.text()
        );
        assert!(get(&server, "/_azq/faults", &as_secret)
            .text()
            .contains(SECRET));
    }
}

#[test]
fn an_expired_session_is_refused() {
    for backend in backends() {
        let env = accounts_env();
        let server = Server::start_with_env(
            &[backend, &["--session-lifetime", "1s"]].concat(),
            &[("AZURITE_ACCOUNTS", env.as_str())],
        );
        fill(&server, SECRET, SECRET_KEY, "ledger", PAYROLL);
        let (cookie, set_cookie) = sign_in(&server, SECRET, SECRET_KEY);
        assert!(set_cookie.contains("Max-Age=1"), "{set_cookie}");
        let fresh = get(
            &server,
            "/_azq/inspect/secretacct/ledger",
            &[("Cookie", &cookie)],
        );
        assert_status(&fresh, 200, None);
        std::thread::sleep(Duration::from_millis(1_500));
        let stale = get(
            &server,
            "/_azq/inspect/secretacct/ledger",
            &[("Cookie", &cookie)],
        );
        assert_hidden(&stale, "expired session");
    }
}

#[test]
fn browser_attacks_on_the_control_plane_are_refused() {
    for backend in backends() {
        let server = Server::start_on(backend, &["--admin", "--control-hosts", "azurite"]);
        fill(
            &server,
            "devstoreaccount1",
            DEVELOPMENT_ACCOUNT_KEY,
            "kept",
            "kept text",
        );
        let port = server.port.to_string();
        let survives = |what: &str| {
            let names = listed(&server, "devstoreaccount1", DEVELOPMENT_ACCOUNT_KEY);
            assert_eq!(names, ["kept"], "after {what}");
        };

        // DNS rebinding: the attacker's name, resolved to 127.0.0.1, reads nothing.
        for path in [
            "/_azq/inspect",
            "/_azq/inspect/devstoreaccount1/kept",
            "/_azq/ui",
            "/_azq/session",
        ] {
            let rebound = send(
                &server,
                raw_to(&format!("rebind.evil.example:{port}"), "GET", path, &[], ""),
            );
            assert_eq!(rebound.status, 403, "{path}");
            assert!(!rebound.text().contains("kept text"));
        }
        // Without a Host (HTTP/1.0), or with one that is not a name, nothing either.
        let hostless = send(&server, b"GET /_azq/inspect HTTP/1.0\r\n\r\n".to_vec());
        assert_eq!(hostless.status, 403);
        let health = send(&server, b"GET /_azq/health HTTP/1.0\r\n\r\n".to_vec());
        assert_status(&health, 200, None);
        for host in [
            "[::1]evil.example",
            "evil.example:.localhost",
            "localhost:x",
        ] {
            let odd = send(&server, raw_to(host, "GET", "/_azq/inspect", &[], ""));
            assert_eq!(odd.status, 403, "{host}");
        }
        let reset = send(
            &server,
            raw_to("evil.example", "POST", "/_azq/reset", &[JSON], ""),
        );
        assert_eq!(reset.status, 403);
        survives("a rebound reset");
        // The names it answers to: loopback, IP literals, --control-hosts; machines' endpoints
        // under any name.
        for host in [
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            format!("azurite:{port}"),
        ] {
            let response = send(&server, raw_to(&host, "GET", "/_azq/inspect", &[], ""));
            assert_status(&response, 200, None);
        }
        for path in ["/_azq/health", "/_azq/metrics"] {
            let response = send(&server, raw_to("anything.example", "GET", path, &[], ""));
            assert_status(&response, 200, None);
        }

        // A cross-site form POST and `fetch` (no-cors: a simple content type), from another
        // site and from a same-site page on another port.
        let own = format!("http://127.0.0.1:{port}");
        let attacks: [(&str, Vec<(&str, &str)>); 6] = [
            (
                "form",
                vec![
                    ("Origin", "http://evil.example"),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ],
            ),
            (
                "fetch no-cors",
                vec![
                    ("Origin", "http://evil.example"),
                    ("Content-Type", "text/plain"),
                ],
            ),
            (
                "cross-site JSON",
                vec![("Origin", "http://evil.example"), JSON],
            ),
            (
                "same-site page",
                vec![("Origin", "http://127.0.0.1:8000"), JSON],
            ),
            (
                "Sec-Fetch-Site",
                vec![("Sec-Fetch-Site", "cross-site"), JSON],
            ),
            (
                "blind same-origin",
                vec![("Origin", own.as_str()), ("Content-Type", "text/plain")],
            ),
        ];
        for (what, headers) in &attacks {
            for target in [
                "/_azq/reset",
                "/_azq/admin/devstoreaccount1/kept/clear",
                "/_azq/faults",
            ] {
                let body = r#"{"action":{"error":"ServerBusy"}}"#;
                let response = send(&server, raw("POST", target, headers, body));
                assert_eq!(response.status, 403, "{what} {target}: {}", response.text());
            }
            let null_origin = send(
                &server,
                raw("DELETE", "/_azq/faults", &[("Origin", "null")], ""),
            );
            assert_eq!(null_origin.status, 403, "{what}: null origin");
            survives(what);
        }
        let peek = common::signed_request(
            "GET",
            "/devstoreaccount1/kept/messages?peekonly=true",
            &[],
            b"",
        );
        assert!(
            send(&server, peek).text().contains("kept text"),
            "the message survives"
        );
        // A preflight gets no CORS grant, so a page cannot send the non-simple request either.
        let preflight = send(
            &server,
            raw(
                "OPTIONS",
                "/_azq/reset",
                &[
                    ("Origin", "http://evil.example"),
                    ("Access-Control-Request-Method", "POST"),
                ],
                "",
            ),
        );
        assert!(
            preflight.header("access-control-allow-origin").is_none(),
            "{:?}",
            preflight.headers
        );

        // The console itself (same origin, JSON) and a script (no Origin, X-Azq-Request) work.
        let console = send(
            &server,
            raw_to(
                &format!("127.0.0.1:{port}"),
                "POST",
                "/_azq/admin/devstoreaccount1/kept/clear",
                &[
                    ("Origin", own.as_str()),
                    ("Sec-Fetch-Site", "same-origin"),
                    JSON,
                ],
                "",
            ),
        );
        assert_status(&console, 200, None);
        let script = send(
            &server,
            raw("POST", "/_azq/reset", &[("X-Azq-Request", "1")], ""),
        );
        assert_status(&script, 200, None);
        assert!(listed(&server, "devstoreaccount1", DEVELOPMENT_ACCOUNT_KEY).is_empty());
        // The development account alone: open without sign-in, as before.
        let session = get(&server, "/_azq/session", &[]).text();
        assert!(session.contains("\"sign_in_required\":false"), "{session}");
    }
}

/// The line azq prints at start says who the console is open to.
fn control_plane_line(accounts: Option<&str>) -> String {
    use std::io::BufRead;
    let mut command = std::process::Command::new(common::azq_binary());
    command.env_remove("AZURITE_ACCOUNTS");
    if let Some(accounts) = accounts {
        command.env("AZURITE_ACCOUNTS", accounts);
    }
    let mut child = command
        .args([
            "--inMemoryPersistence",
            "--queueHost",
            "127.0.0.1",
            "--queuePort",
            "0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("azq starts");
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .take_while(|line| !line.starts_with("azq listening"))
        .find(|line| line.contains("/_azq/ui"))
        .unwrap_or_default();
    child.kill().unwrap();
    child.wait().unwrap();
    line
}

#[test]
fn the_start_up_line_says_who_the_console_is_open_to() {
    let open = control_plane_line(None);
    assert!(open.contains("open without sign-in"), "{open}");
    let private = control_plane_line(Some(&accounts_env()));
    assert!(
        private.contains("show secretacct, otheracct only to a caller with its key")
            && private.contains("open to all: devstoreaccount1"),
        "{private}"
    );
}
