//! `--init` files: the good ones in both formats give the same plan, every bad one names its
//! line and reason, and applying is idempotent by the rule of the module's header.

use super::*;
use crate::queue::AccessPolicy;

const ACCOUNTS: [&str; 2] = ["devstoreaccount1", "acct2"];

const YAML: &str = "\
queues:
  orders:
    metadata: {team: payments}
    acl:
      - {id: reader, start: 2026-01-01T00:00:00Z, expiry: 2030-01-01T00:00:00Z, permission: rp}
    messages:
      - text: hello
      - {text: later, visibility_delay: 30s, ttl: 1h}
      - {text: forever, ttl: never, count: 3}
      - {text: '{\"n\": 1}', base64: true}
cors:
  - {allowed_origins: [\"*\"], allowed_methods: [GET, PUT], max_age_s: 60}
accounts:
  acct2:
    queues:
      jobs: {}
";

const JSON: &str = r#"{
  "queues": {
    "orders": {
      "metadata": {"team": "payments"},
      "acl": [{"id": "reader", "start": "2026-01-01T00:00:00Z",
               "expiry": "2030-01-01T00:00:00Z", "permission": "rp"}],
      "messages": [
        {"text": "hello"},
        {"text": "later", "visibility_delay": "30s", "ttl": 3600},
        {"text": "forever", "ttl": -1, "count": 3},
        {"text": "{\"n\": 1}", "base64": true}
      ]
    }
  },
  "cors": [{"allowed_origins": "*", "allowed_methods": "GET,PUT", "max_age_s": 60}],
  "accounts": {"acct2": {"queues": {"jobs": {}}}}
}"#;

fn expected() -> InitPlan {
    let message = |text: &str, visibility_delay_s, ttl_s, count| MessagePlan {
        text: Bytes::from(text.to_string()),
        visibility_delay_s,
        ttl_s,
        count,
    };
    InitPlan {
        accounts: vec![
            AccountPlan {
                name: "devstoreaccount1".into(),
                cors: Some(vec![CorsRule {
                    allowed_origins: "*".into(),
                    allowed_methods: "GET,PUT".into(),
                    allowed_headers: String::new(),
                    exposed_headers: String::new(),
                    max_age_s: 60,
                }]),
                queues: vec![QueuePlan {
                    name: "orders".into(),
                    metadata: vec![("team".into(), "payments".into())],
                    acl: Some(vec![SignedIdentifier {
                        id: "reader".into(),
                        access_policy: Some(AccessPolicy {
                            start: Some("2026-01-01T00:00:00Z".into()),
                            expiry: Some("2030-01-01T00:00:00Z".into()),
                            permission: Some("rp".into()),
                        }),
                    }]),
                    messages: vec![
                        message("hello", 0, Some(MESSAGE_TTL_S_DEFAULT), 1),
                        message("later", 30, Some(3600), 1),
                        message("forever", 0, None, 3),
                        message("eyJuIjogMX0=", 0, Some(MESSAGE_TTL_S_DEFAULT), 1),
                    ],
                }],
            },
            AccountPlan {
                name: "acct2".into(),
                cors: None,
                queues: vec![QueuePlan {
                    name: "jobs".into(),
                    ..QueuePlan::default()
                }],
            },
        ],
    }
}

#[test]
fn yaml_and_json_give_the_same_plan() {
    assert_eq!(parse(YAML, Format::Yaml, &ACCOUNTS), Ok(expected()));
    assert_eq!(parse(JSON, Format::Json, &ACCOUNTS), Ok(expected()));
    assert_eq!(
        parse("{}", Format::Json, &ACCOUNTS),
        Ok(InitPlan::default())
    );
    assert_eq!(Format::of("a.yml", "{"), Format::Yaml);
    assert_eq!(Format::of("a.JSON", ""), Format::Json);
    assert_eq!(Format::of("init", " {\"queues\": {}}"), Format::Json);
    assert_eq!(Format::of("init", "queues: {}"), Format::Yaml);
}

/// Each bad file: its text, its format, the line the error must name, and words of the reason.
#[test]
fn bad_files_name_their_line_and_reason() {
    let cases: [(&str, Format, Option<u64>, &str); 18] = [
        ("queues:\n  Orders: {}\n", Format::Yaml, Some(2), "queue name \"Orders\""),
        ("queues:\n  orders:\n    colour: red\n", Format::Yaml, Some(3), "colour"),
        (
            "queues:\n  orders:\n    messages:\n      - {text: a, ttl: 5s, visibility_delay: 10s}\n",
            Format::Yaml,
            Some(4),
            "ttl",
        ),
        (
            "queues:\n  orders:\n    messages:\n      - {text: a, ttl: soon}\n",
            Format::Yaml,
            Some(4),
            "\"soon\"",
        ),
        (
            "queues:\n  orders:\n    messages:\n      - {text: a, visibility_delay: 8d}\n",
            Format::Yaml,
            Some(4),
            "7 days",
        ),
        (
            "queues:\n  orders:\n    messages:\n      - {text: a, count: 0}\n",
            Format::Yaml,
            Some(4),
            "count",
        ),
        (
            "queues:\n  orders:\n    acl:\n      - {id: r, permission: pr}\n",
            Format::Yaml,
            Some(4),
            "raup",
        ),
        (
            "queues:\n  orders:\n    metadata: {\"bad-name\": x}\n",
            Format::Yaml,
            Some(3),
            "C# identifiers",
        ),
        ("queues:\n  orders: {}\n  orders: {}\n", Format::Yaml, Some(3), "orders"),
        (
            "{\n  \"queues\": {\n    \"orders\": {},\n    \"orders\": {}\n  }\n}",
            Format::Json,
            Some(4),
            "given twice",
        ),
        (
            "{\"queues\": {\"orders\": {\"messages\": [{\"text\": \"a\", \"ttl\": 0}]}}}",
            Format::Json,
            Some(1),
            "ttl",
        ),
        ("{\n  \"queues\": [\n", Format::Json, Some(2), "invalid type"),
        ("{\n\n  \"queues\": {,\n", Format::Json, Some(3), "key must be a string"),
        ("queues: [\n", Format::Yaml, Some(1), "mapping"),
        ("queues:\n\torders: {}\n", Format::Yaml, Some(2), ""),
        (
            "accounts:\n  nobody:\n    queues: {}\n",
            Format::Yaml,
            Some(2),
            "not one of the server's accounts",
        ),
        (
            "cors:\n  - {allowed_origins: x, allowed_methods: [FETCH]}\n",
            Format::Yaml,
            Some(2),
            "allowed_methods",
        ),
        (
            "queues:\n  orders:\n    messages:\n      - {text: \"a\\u0001b\"}\n",
            Format::Yaml,
            Some(4),
            "control character",
        ),
    ];
    for (text, format, line, reason) in cases {
        let error = parse(text, format, &ACCOUNTS).expect_err(text);
        assert_eq!(error.line, line, "{text:?}: {error:?}");
        assert!(error.reason.contains(reason), "{text:?}: {error:?}");
        assert!(
            error.describe("init.yaml").starts_with("init.yaml:"),
            "{error:?}"
        );
    }
}

#[test]
fn too_many_messages_are_refused() {
    let text = format!(
        "queues:\n  a1b: {{messages: [{{text: x, count: {}}}]}}\n",
        INIT_MESSAGES_MAX + 1
    );
    let error = parse(&text, Format::Yaml, &ACCOUNTS).unwrap_err();
    assert!(error.reason.contains("more than"), "{error:?}");
}

fn states(shards: usize) -> Vec<ShardState> {
    (0..shards).map(|index| ShardState::new(index, 7)).collect()
}

fn depth(states: &mut [ShardState], account: &str, name: &str) -> Option<u64> {
    let key = QueueKey {
        account: account.into(),
        name: name.into(),
    };
    let owner = shard_for(&key, states.len());
    match states[owner].apply(Command::GetQueueMetadata { queue: key }, 0) {
        Ok(Reply::Metadata {
            approximate_messages_count,
            ..
        }) => Some(approximate_messages_count),
        _ => None,
    }
}

#[test]
fn applying_twice_creates_once_and_never_duplicates_messages() {
    let plan = parse(YAML, Format::Yaml, &ACCOUNTS).unwrap();
    let mut states = states(3);
    let first = apply(&plan, &mut states, 1_000).unwrap();
    assert_eq!(
        first,
        Applied {
            queues_created: 2,
            queues_kept: 0,
            messages_put: 6,
            cors_set: 1,
        }
    );
    assert_eq!(depth(&mut states, "devstoreaccount1", "orders"), Some(6));
    assert_eq!(depth(&mut states, "acct2", "jobs"), Some(0));
    // The ACL and CORS reached every shard's copy.
    for state in &states {
        let key = QueueKey {
            account: "devstoreaccount1".into(),
            name: "orders".into(),
        };
        assert_eq!(state.replicas().queue_acl(&key).unwrap().1.len(), 1);
        assert_eq!(
            state
                .replicas()
                .service_properties("devstoreaccount1")
                .cors
                .len(),
            1
        );
    }
    let second = apply(&plan, &mut states, 2_000).unwrap();
    assert_eq!(
        second,
        Applied {
            queues_kept: 2,
            ..Applied::default()
        }
    );
    assert_eq!(depth(&mut states, "devstoreaccount1", "orders"), Some(6));
}

#[test]
fn an_existing_queue_is_left_as_it_is() {
    let plan = parse(YAML, Format::Yaml, &ACCOUNTS).unwrap();
    let mut states = states(2);
    let key = QueueKey {
        account: "devstoreaccount1".into(),
        name: "orders".into(),
    };
    let owner = shard_for(&key, 2);
    states[owner]
        .apply(
            Command::CreateQueue {
                queue: key.clone(),
                metadata: Metadata::new(),
            },
            0,
        )
        .unwrap();
    let applied = apply(&plan, &mut states, 1_000).unwrap();
    assert_eq!((applied.queues_created, applied.queues_kept), (1, 1));
    assert_eq!(depth(&mut states, "devstoreaccount1", "orders"), Some(0));
    assert!(states[owner].replicas().queue_acl(&key).is_none());
}

#[test]
fn a_full_shard_fails_with_the_queue_named() {
    let plan = parse(
        "queues:\n  big: {messages: [{text: abc, count: 10}]}\n",
        Format::Yaml,
        &ACCOUNTS,
    )
    .unwrap();
    let mut states = states(1);
    states[0].set_message_bytes_max(500);
    let error = apply(&plan, &mut states, 0).unwrap_err();
    assert!(
        error.contains("devstoreaccount1/big") && error.contains("ServerBusy"),
        "{error}"
    );
}

#[test]
fn delayed_messages_stay_invisible_until_their_time() {
    let plan = parse(
        "queues:\n  later: {messages: [{text: a, visibility_delay: 10}]}\n",
        Format::Yaml,
        &ACCOUNTS,
    )
    .unwrap();
    let mut states = states(1);
    apply(&plan, &mut states, 0).unwrap();
    let key = QueueKey {
        account: "devstoreaccount1".into(),
        name: "later".into(),
    };
    let peek = |states: &mut Vec<ShardState>, now_ms| match states[0].apply(
        Command::PeekMessages {
            queue: key.clone(),
            count: 1,
        },
        now_ms,
    ) {
        Ok(Reply::Messages(messages)) => messages.len(),
        other => panic!("{other:?}"),
    };
    assert_eq!(peek(&mut states, 9_999), 0);
    assert_eq!(peek(&mut states, 10_000), 1);
}
