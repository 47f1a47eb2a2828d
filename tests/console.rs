//! The console's endpoints over real TCP on both backends: inspection lists leased and delayed
//! messages and changes nothing (dequeue counts, visibility, receipts and order are as before,
//! as clients then see), the admin endpoints answer 403 without `--admin`, reset by glob,
//! account and everything, `--init` files good and bad (exit 2 naming the file and line), the
//! restart rule with persistence, and `azq env`.

mod common;

use std::process::{Command, Stdio};

use common::{
    assert_status, azq_binary, backends, create_queue, elements, put_body, send, signed_request,
    Response, Server, TempDir,
};

fn get(server: &Server, path: &str) -> Response {
    send(
        server,
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes(),
    )
}

fn post(server: &Server, path: &str, body: &str) -> Response {
    send(
        server,
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

fn json(response: &Response) -> serde_json::Value {
    serde_json::from_slice(&response.body).unwrap_or_else(|_| panic!("JSON: {}", response.text()))
}

fn put(server: &Server, queue: &str, text: &str, query: &str) {
    let response = send(
        server,
        signed_request(
            "POST",
            &format!("/devstoreaccount1/{queue}/messages{query}"),
            &[],
            &put_body(text),
        ),
    );
    assert_status(&response, 201, None);
}

/// Get Messages: (id, pop receipt, dequeue count, text) of each.
fn get_messages(server: &Server, queue: &str, query: &str) -> Vec<(String, String, u32, String)> {
    let response = send(
        server,
        signed_request(
            "GET",
            &format!("/devstoreaccount1/{queue}/messages{query}"),
            &[],
            b"",
        ),
    );
    assert_status(&response, 200, None);
    let text = response.text();
    elements(&text, "QueueMessage")
        .into_iter()
        .map(|message| {
            let field = |name| elements(message, name)[0].to_string();
            (
                field("MessageId"),
                field("PopReceipt"),
                field("DequeueCount").parse().unwrap(),
                field("MessageText"),
            )
        })
        .collect()
}

/// Delete Message with the receipt a Get gave: 204.
fn delete_message(server: &Server, queue: &str, id: &str, receipt: &str) {
    let receipt = receipt
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    let delete = send(
        server,
        signed_request(
            "DELETE",
            &format!("/devstoreaccount1/{queue}/messages/{id}?popreceipt={receipt}"),
            &[],
            b"",
        ),
    );
    assert_status(&delete, 204, None);
}

fn peek_texts(server: &Server, queue: &str) -> Vec<String> {
    let response = send(
        server,
        signed_request(
            "GET",
            &format!("/devstoreaccount1/{queue}/messages?peekonly=true&numofmessages=32"),
            &[],
            b"",
        ),
    );
    assert_status(&response, 200, None);
    let text = response.text();
    elements(&text, "MessageText")
        .into_iter()
        .map(str::to_string)
        .collect()
}

#[test]
fn inspection_lists_every_message_and_changes_nothing() {
    for backend in backends() {
        let server = Server::start_on(backend, &["--shards", "2"]);
        create_queue(&server, "watched");
        for text in ["one", "two", "three"] {
            put(&server, "watched", text, "");
        }
        put(&server, "watched", "delayed", "?visibilitytimeout=600");
        let leased = get_messages(&server, "watched", "?visibilitytimeout=600");
        assert_eq!(leased[0].3, "one");
        let summary_before = json(&get(&server, "/_azq/inspect"));
        let page_before = json(&get(&server, "/_azq/inspect/devstoreaccount1/watched"));
        // Look many times, every way, paged too.
        for offset in 0..5 {
            let page = get(
                &server,
                &format!("/_azq/inspect/devstoreaccount1/watched?offset={offset}&limit=1"),
            );
            assert_status(&page, 200, None);
        }
        for _ in 0..3 {
            get(&server, "/_azq/inspect?account=devstoreaccount1");
        }
        let queue = &summary_before["queues"][0];
        assert_eq!(queue["name"], "watched");
        assert_eq!(
            (
                &queue["messages"],
                &queue["visible"],
                &queue["leased"],
                &queue["delayed"]
            ),
            (
                &serde_json::json!(4),
                &serde_json::json!(2),
                &serde_json::json!(1),
                &serde_json::json!(1)
            )
        );
        let messages = page_before["messages"].as_array().unwrap();
        let states: Vec<(&str, &str, u64)> = messages
            .iter()
            .map(|message| {
                (
                    message["text"].as_str().unwrap(),
                    message["state"].as_str().unwrap(),
                    message["dequeue_count"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("two", "visible", 0),
                ("three", "visible", 0),
                ("delayed", "delayed", 0),
                ("one", "leased", 1),
            ]
        );
        assert!(messages
            .iter()
            .all(|message| message.get("pop_receipt").is_none()));
        // Inspection shows the IDs clients get (made with the server's secret).
        assert_eq!(messages[3]["id"].as_str(), Some(leased[0].0.as_str()));
        // Nothing moved: the same answers, the same order, the leased message's receipt still
        // holds, and the first Get after inspection is a first delivery.
        assert_eq!(
            json(&get(&server, "/_azq/inspect/devstoreaccount1/watched"))["messages"],
            page_before["messages"]
        );
        assert_eq!(peek_texts(&server, "watched"), ["two", "three"]);
        let delivered = get_messages(&server, "watched", "?numofmessages=32");
        let delivered: Vec<(u32, &str)> = delivered
            .iter()
            .map(|(_, _, count, text)| (*count, text.as_str()))
            .collect();
        assert_eq!(delivered, [(1, "two"), (1, "three")]);
        let (id, receipt, _, _) = &leased[0];
        delete_message(&server, "watched", id, receipt);
        // Inspection is bounded and says what it cannot find.
        let missing = get(&server, "/_azq/inspect/devstoreaccount1/nothing-here");
        assert_eq!(missing.status, 404);
        assert!(json(&missing)["error"]
            .as_str()
            .unwrap()
            .contains("no queue"));
        assert_eq!(get(&server, "/_azq/inspect?limit=x").status, 400);
        server.stop();
    }
}

/// Puts "one", "two" and "three" into each of `queues` and waits until every text has left
/// memory (`--text-memory 0`: after the flush that wrote it).
fn put_texts_on_disk(server: &Server, queues: &[String]) {
    for queue in queues {
        create_queue(server, queue);
        for text in ["one", "two", "three"] {
            put(server, queue, text, "");
        }
    }
    let expected = 3 * queues.len() as u64;
    for wait in 0.. {
        assert!(wait < 500, "never on disk only");
        if common::metric_total(server, "azq_texts_on_disk") == expected {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// (`text_on_disk`, text, bytes) of each message inspection lists in `queue`.
fn inspected_texts(server: &Server, queue: &str) -> Vec<(bool, String, u64)> {
    let page = json(&get(
        server,
        &format!("/_azq/inspect/devstoreaccount1/{queue}"),
    ));
    page["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|message| {
            (
                message["text_on_disk"].as_bool().unwrap_or(false),
                message["text"].as_str().unwrap().to_string(),
                message["bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// With `--text-memory 0` every written text leaves memory: inspection reads those texts back
/// for its page (on the queue's own shard and across the mesh) and leaves them on disk, put
/// back nowhere; a Peek still answers them. Where a read fails (here the log's segments are
/// gone from under the server), the page still answers, each such message with
/// `text_on_disk`, its size and no text (the console shows "(on disk)"). On both backends.
#[test]
fn inspection_reads_texts_on_disk_only_back_and_leaves_them_there() {
    let shown = |texts: [&str; 3], on_disk: bool| -> Vec<(bool, String, u64)> {
        texts
            .iter()
            .map(|text| {
                let read = if on_disk { "" } else { text };
                (on_disk, read.to_string(), text.len() as u64)
            })
            .collect()
    };
    for backend in backends() {
        let start = |data: &TempDir| {
            let flags = ["--shards", "2", "--location", data.arg()];
            Server::start_on(backend, &[&flags[..], &["--text-memory", "0"]].concat())
        };
        let data = TempDir::new("console-texts-on-disk");
        let server = start(&data);
        let queues = common::one_queue_a_shard("cold");
        put_texts_on_disk(&server, &queues);
        for queue in &queues {
            let texts = inspected_texts(&server, queue);
            assert_eq!(texts, shown(["one", "two", "three"], false), "{queue}");
        }
        assert_eq!(common::metric_total(&server, "azq_texts_on_disk"), 6);
        assert!(common::metric_total(&server, "azq_text_reads_total") >= 6);
        for queue in &queues {
            assert_eq!(peek_texts(&server, queue), ["one", "two", "three"]);
        }
        server.stop();

        // Reads that fail: a fresh server whose segments are removed before anything is read
        // (so no read cache holds them).
        let data = TempDir::new("console-texts-gone");
        let server = start(&data);
        put_texts_on_disk(&server, &queues);
        let mut removed = 0;
        for shard in std::fs::read_dir(data.path().join("__azq__/gen-000001")).unwrap() {
            for file in std::fs::read_dir(shard.unwrap().path()).unwrap() {
                let file = file.unwrap();
                if file.file_name().to_string_lossy().starts_with("wal-") {
                    std::fs::remove_file(file.path()).unwrap();
                    removed += 1;
                }
            }
        }
        assert!(removed >= 2, "{removed} segments removed");
        for queue in &queues {
            let texts = inspected_texts(&server, queue);
            assert_eq!(texts, shown(["one", "two", "three"], true), "{queue}");
        }
        assert!(common::metric_total(&server, "azq_text_read_failures_total") >= 2);
        server.kill();
    }
}

#[test]
fn admin_endpoints_answer_403_without_admin() {
    let server = Server::start(&[]);
    create_queue(&server, "quiet");
    for (method, path) in [
        ("POST", "/_azq/reset"),
        ("POST", "/_azq/admin/devstoreaccount1/quiet/messages"),
        ("POST", "/_azq/admin/devstoreaccount1/quiet/clear"),
        ("DELETE", "/_azq/faults"),
        ("GET", "/_azq/faults"),
    ] {
        let response = send(
            &server,
            format!(
                "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                 Content-Length: 0\r\n\r\n"
            )
            .into_bytes(),
        );
        assert_eq!(response.status, 403, "{method} {path}");
        assert!(
            json(&response)["error"]
                .as_str()
                .unwrap()
                .contains("--admin"),
            "{method} {path}"
        );
    }
    // Reading stays open, and says the actions are off.
    let inspected = json(&get(&server, "/_azq/inspect"));
    assert_eq!(inspected["admin"], false);
    let page = get(&server, "/_azq/ui");
    assert_eq!(page.status, 200);
    assert!(page
        .header("Content-Security-Policy")
        .unwrap()
        .contains("default-src 'self'"));
    assert!(page.text().contains("/_azq/ui/console.js"));
    assert_eq!(get(&server, "/_azq/ui/console.js").status, 200);
    server.stop();
}

#[test]
fn reset_deletes_by_glob_by_account_and_everything() {
    for backend in backends() {
        let data = TempDir::new("console-reset");
        let server = Server::start_on(
            backend,
            &["--admin", "--shards", "2", "--location", data.arg()],
        );
        for name in ["orders-1", "orders-2", "jobs", "jobs-dlq"] {
            create_queue(&server, name);
            put(&server, name, "x", "");
        }
        let names = |server: &Server| -> Vec<String> {
            json(&get(server, "/_azq/inspect"))["queues"]
                .as_array()
                .unwrap()
                .iter()
                .map(|queue| queue["name"].as_str().unwrap().to_string())
                .collect()
        };
        let reset = json(&post(&server, "/_azq/reset?queues=orders-*", ""));
        assert_eq!(reset["queues_deleted"], 2);
        assert_eq!(reset["accounts_reset"], 0);
        assert_eq!(names(&server), ["jobs", "jobs-dlq"]);
        assert_eq!(post(&server, "/_azq/reset?account=nobody", "").status, 404);
        let reset = json(&post(&server, "/_azq/reset?account=devstoreaccount1", ""));
        assert_eq!(reset["queues_deleted"], 2);
        assert!(names(&server).is_empty());
        create_queue(&server, "again");
        let reset = json(&post(&server, "/_azq/reset", ""));
        assert_eq!(
            (&reset["queues_deleted"], &reset["accounts_reset"]),
            (&serde_json::json!(1), &serde_json::json!(1))
        );
        server.await_stderr("azq: admin: reset");
        // A reset is written like any deletion: the restart finds nothing.
        server.stop();
        let server = Server::start_on(backend, &["--shards", "2", "--location", data.arg()]);
        assert!(names(&server).is_empty());
        server.stop();
    }
}

#[test]
fn the_console_actions_act_as_a_client_would() {
    let server = Server::start(&["--admin"]);
    let created = post(&server, "/_azq/admin/devstoreaccount1/made-here", "");
    assert_eq!(created.status, 201);
    let sent = post(
        &server,
        "/_azq/admin/devstoreaccount1/made-here/messages",
        r#"{"text": "generated", "count": 40}"#,
    );
    assert_eq!(json(&sent)["put"], 40);
    let received = json(&post(
        &server,
        "/_azq/admin/devstoreaccount1/made-here/receive",
        r#"{"count": 2, "visibility_timeout_s": 60}"#,
    ));
    let id = received["messages"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(received["messages"][0]["dequeue_count"], 1);
    let deleted = send(
        &server,
        format!(
            "DELETE /_azq/admin/devstoreaccount1/made-here/messages/{id} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        .into_bytes(),
    );
    assert_eq!(deleted.status, 200);
    let queue = &json(&get(&server, "/_azq/inspect"))["queues"][0];
    assert_eq!(
        (&queue["messages"], &queue["leased"]),
        (&serde_json::json!(39), &serde_json::json!(1))
    );
    for (body, why) in [
        (r#"{"text": "x", "count": 0}"#, "count"),
        (r#"{"text": "x", "colour": 1}"#, "colour"),
        (
            r#"{"text": "x", "ttl_s": 5, "visibility_delay_s": 10}"#,
            "ttl_s",
        ),
    ] {
        let refused = post(
            &server,
            "/_azq/admin/devstoreaccount1/made-here/messages",
            body,
        );
        assert_eq!(refused.status, 400, "{body}");
        assert!(
            json(&refused)["error"].as_str().unwrap().contains(why),
            "{body}"
        );
    }
    assert_eq!(
        post(&server, "/_azq/admin/nobody/made-here", "").status,
        404
    );
    assert_eq!(
        json(&post(
            &server,
            "/_azq/admin/devstoreaccount1/made-here/clear",
            ""
        ))["cleared"],
        true
    );
    assert_eq!(
        json(&get(&server, "/_azq/inspect"))["queues"][0]["messages"],
        0
    );
    // Each action is logged before its answer, but a thread reads the pipe: wait for the last.
    let log = server.await_stderr("azq: admin: clear");
    for action in ["create", "send 40 of 40", "receive 2", "delete", "clear"] {
        assert!(
            log.contains(&format!("azq: admin: {action}")),
            "{action}: {log}"
        );
    }
    server.stop();
}

const INIT: &str = "\
queues:
  orders:
    metadata: {team: payments}
    acl:
      - {id: reader, permission: r}
    messages:
      - text: first
      - {text: later, visibility_delay: 1h}
      - {text: many, count: 3, ttl: never}
";

fn init_file(directory: &TempDir, name: &str, text: &str) -> String {
    let path = directory.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn depth(server: &Server, name: &str) -> Option<u64> {
    json(&get(server, "/_azq/inspect"))["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|queue| queue["name"] == name)
        .map(|queue| queue["messages"].as_u64().unwrap())
}

#[test]
fn init_files_start_the_server_with_their_queues() {
    for backend in backends() {
        let files = TempDir::new("console-init");
        let path = init_file(&files, "init.yaml", INIT);
        let server = Server::start_on(backend, &["--shards", "2", "--init", &path]);
        assert_eq!(depth(&server, "orders"), Some(5));
        let page = json(&get(&server, "/_azq/inspect/devstoreaccount1/orders"));
        assert_eq!(page["queue"]["delayed"], 1);
        let acl = send(
            &server,
            signed_request("GET", "/devstoreaccount1/orders?comp=acl", &[], b""),
        );
        assert_status(&acl, 200, None);
        assert!(acl.text().contains("<Id>reader</Id>"));
        server.stop();
    }
}

#[test]
fn bad_init_files_exit_2_naming_the_file_and_line() {
    let files = TempDir::new("console-init-bad");
    let cases = [
        ("bad-name.yaml", "queues:\n  Bad_Name: {}\n", ":2:"),
        (
            "bad-ttl.json",
            "{\"queues\": {\n  \"q1a\": {\"messages\": [{\"text\": \"a\", \"ttl\": \"soon\"}]}\n}}",
            ":2:",
        ),
        ("bad-syntax.yaml", "queues:\n\tq: {}\n", ":2:"),
    ];
    for backend in backends() {
        for (name, text, line) in cases {
            let path = init_file(&files, name, text);
            let output = Command::new(azq_binary())
                .args(backend)
                .args(["--queuePort", "0", "--inMemoryPersistence", "--init", &path])
                .stdin(Stdio::null())
                .output()
                .expect("azq runs");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
            assert!(
                stderr.contains(&format!("{path}{line}")),
                "{name}: {stderr}"
            );
            assert!(String::from_utf8_lossy(&output.stdout).is_empty(), "{name}");
        }
    }
    let output = Command::new(azq_binary())
        .args([
            "--queuePort",
            "0",
            "--inMemoryPersistence",
            "--init",
            "/nonexistent/init.yaml",
        ])
        .output()
        .expect("azq runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/init.yaml"));
}

#[test]
fn a_restart_with_the_same_init_file_duplicates_nothing() {
    for backend in backends() {
        let data = TempDir::new("console-init-restart");
        let path = init_file(&data, "init.yaml", INIT);
        let arguments = ["--shards", "2", "--location", data.arg(), "--init", &path];
        let server = Server::start_on(backend, &arguments);
        assert_eq!(depth(&server, "orders"), Some(5));
        // The application consumes a message.
        let (id, receipt, _, _) = get_messages(&server, "orders", "").remove(0);
        delete_message(&server, "orders", &id, &receipt);
        server.stop();
        // The same file, plus a queue: the existing queue stays as it was, the new one is made.
        let path = init_file(
            &data,
            "init.yaml",
            &format!("{INIT}  added:\n    messages: [{{text: new}}]\n"),
        );
        let arguments = ["--shards", "2", "--location", data.arg(), "--init", &path];
        let server = Server::start_on(backend, &arguments);
        assert_eq!(depth(&server, "orders"), Some(4));
        assert_eq!(depth(&server, "added"), Some(1));
        server.stop();
        // And a restart right after init (its changes written by the first flush) keeps them.
        let server = Server::start_on(backend, &["--shards", "2", "--location", data.arg()]);
        assert_eq!(depth(&server, "added"), Some(1));
        server.stop();
    }
}

#[test]
fn azq_env_prints_a_clients_environment() {
    let run = |arguments: &[&str]| {
        let output = Command::new(azq_binary())
            .arg("env")
            .args(arguments)
            .env_remove("AZURITE_ACCOUNTS")
            .output()
            .expect("azq env runs");
        assert!(output.status.success(), "{arguments:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let posix = run(&["--queuePort", "12345"]);
    assert!(posix.contains(
        "export AZURE_STORAGE_CONNECTION_STRING='DefaultEndpointsProtocol=http;\
         AccountName=devstoreaccount1;AccountKey="
    ));
    assert!(posix.contains("QueueEndpoint=http://127.0.0.1:12345/devstoreaccount1;'"));
    let powershell = run(&[
        "--format",
        "powershell",
        "--cert",
        "auto",
        "--queueHost",
        "0.0.0.0",
    ]);
    assert!(powershell.contains(
        "$env:AZURE_STORAGE_QUEUE_ENDPOINT = 'https://127.0.0.1:10001/devstoreaccount1'"
    ));
    let dotenv = Command::new(azq_binary())
        .args(["env", "--format", "dotenv", "--account", "acct2"])
        .env("AZURITE_ACCOUNTS", "acct1:a2V5MQ==;acct2:a2V5Mg==")
        .output()
        .unwrap();
    let dotenv = String::from_utf8(dotenv.stdout).unwrap();
    assert!(
        dotenv.contains("AZURE_STORAGE_KEY=\"a2V5Mg==\""),
        "{dotenv}"
    );
    let refused = Command::new(azq_binary())
        .args(["env", "--format", "fish"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}
