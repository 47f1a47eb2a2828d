//! Inspection: counts and pages as the console shows them, and proof that looking changes
//! nothing (dequeue counts, visibility, receipts, order, the journal, the wheel).

use super::*;
use crate::queue::state::inspect::Visibility;

/// A queue with a visible message, one that expired without its timer having run (at
/// `AT`), one delayed by its put, and two leased, one of them delivered twice.
fn busy_queue() -> (ShardState, Vec<MessageView>) {
    let mut state = state_with(&["busy", "other"]);
    state.start_journal(0);
    let first = put(&mut state, "busy", "first", 0, None, NOW);
    let second = put(&mut state, "busy", "second", 0, None, NOW + 1);
    put(&mut state, "busy", "third", 0, None, NOW + 2);
    put(&mut state, "busy", "later", 60, None, NOW + 3);
    put(&mut state, "busy", "short", 0, Some(2), NOW + 4);
    // `first` is leased and its lease ends: it reappears at its place, before `second`.
    assert_eq!(texts(&get(&mut state, "busy", 1, 1, NOW + 10)), ["first"]);
    assert_eq!(
        texts(&get(&mut state, "busy", 1, 60, NOW + 1_011)),
        ["first"]
    );
    assert_eq!(
        texts(&get(&mut state, "busy", 1, 60, NOW + 1_012)),
        ["second"]
    );
    put(&mut state, "other", "x", 0, None, NOW);
    (state, vec![first, second])
}

/// When the tests look: `short` has expired, no timer has run since.
const AT: u64 = NOW + 3_000;

fn summary(state: &ShardState, now_ms: u64) -> QueueSummary {
    let (queues, more) = state.inspect_queues(Some(&[ACCOUNT.to_string()]), None, 10, now_ms);
    assert!(!more);
    queues
        .into_iter()
        .find(|queue| queue.key.name == "busy")
        .unwrap()
}

#[test]
fn counts_split_visible_leased_delayed_and_expired() {
    let (state, _) = busy_queue();
    let at = AT;
    let counted = summary(&state, at);
    assert_eq!(
        (
            counted.messages,
            counted.visible,
            counted.leased,
            counted.delayed
        ),
        (5, 2, 2, 1)
    );
    assert_eq!(
        counted.text_bytes,
        "firstsecondthirdlatershort".len() as u64
    );
    assert_eq!(counted.activity.puts, 5);
    assert_eq!(counted.activity.delivered, 3);
    assert_eq!(counted.activity.redelivered, 1);
    // `short` expired at NOW + 2004; no timer has run since, so it is still stored.
    assert_eq!(counted.expired, 1);
    let page = state
        .inspect_messages(&key("busy"), 0, 10, 1 << 20, at)
        .unwrap();
    let shown: Vec<(String, Visibility, u32, bool)> = page
        .messages
        .iter()
        .map(|message| {
            (
                String::from_utf8(message.text.clone().expect("resident").to_vec()).unwrap(),
                message.visibility,
                message.dequeue_count,
                message.expired,
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("third".to_string(), Visibility::Visible, 0, false),
            ("short".to_string(), Visibility::Visible, 0, true),
            ("later".to_string(), Visibility::Delayed, 0, false),
            ("first".to_string(), Visibility::Leased, 2, false),
            ("second".to_string(), Visibility::Leased, 1, false),
        ]
    );
    assert_eq!(page.messages[2].time_next_visible_ms, NOW + 3 + 60_000);
    assert_eq!(page.next_offset, None);
    let (all, _) = state.inspect_queues(None, None, 10, at);
    assert_eq!(all.len(), 2);
    let (none, _) = state.inspect_queues(Some(&["nobody".to_string()]), None, 10, at);
    assert!(none.is_empty());
}

#[test]
fn pages_are_bounded_by_count_and_bytes() {
    let (state, _) = busy_queue();
    let at = AT;
    let page = state
        .inspect_messages(&key("busy"), 0, 2, 1 << 20, at)
        .unwrap();
    assert_eq!(page.messages.len(), 2);
    assert_eq!(page.next_offset, Some(2));
    let rest = state
        .inspect_messages(&key("busy"), 2, 10, 1 << 20, at)
        .unwrap();
    assert_eq!(rest.messages.len(), 3);
    assert_eq!(rest.next_offset, None);
    // One message always fits, however long; the next one must fit the byte budget.
    let tight = state.inspect_messages(&key("busy"), 0, 10, 6, at).unwrap();
    assert_eq!(tight.messages.len(), 1);
    assert_eq!(tight.next_offset, Some(1));
    let (page_one, more) = state.inspect_queues(None, None, 1, at);
    assert!(more);
    let (page_two, more) = state.inspect_queues(None, Some(&page_one[0].key), 1, at);
    assert!(!more);
    assert_ne!(page_one[0].key, page_two[0].key);
    assert_eq!(
        state.inspect_messages(&key("nothing"), 0, 1, 1, at),
        Err(StorageError::QueueNotFound)
    );
}

#[test]
fn inspecting_changes_nothing() {
    let (mut state, _) = busy_queue();
    let at = AT;
    let described = state.describe(at);
    let journal = state.journal_next_sequence();
    let deadline = state.next_deadline_ms();
    let first_page = state
        .inspect_messages(&key("busy"), 0, 10, 1 << 20, at)
        .unwrap();
    for offset in 0..6 {
        state
            .inspect_messages(&key("busy"), offset, 1, 1, at)
            .unwrap();
    }
    state.inspect_queues(None, None, 10, at);
    assert_eq!(state.describe(at), described);
    assert_eq!(state.journal_next_sequence(), journal);
    assert_eq!(state.next_deadline_ms(), deadline);
    assert_eq!(
        state
            .inspect_messages(&key("busy"), 0, 10, 1 << 20, at)
            .unwrap(),
        first_page
    );
    state.verify();
    // And what clients then get is what they would have got: the same order and counts.
    let taken = get(&mut state, "busy", 32, 30, at);
    assert_eq!(texts(&taken), ["third"]);
    assert_eq!(taken[0].dequeue_count, 1);
}

#[test]
fn the_console_deletes_by_id_whatever_the_lease() {
    let (mut state, views) = busy_queue();
    let at = AT;
    let leased = views[1].message_id;
    assert!(matches!(
        state.apply(
            Command::DeleteMessageById {
                queue: key("busy"),
                message_id: leased,
            },
            at,
        ),
        Ok(Reply::Done)
    ));
    assert!(matches!(
        state.apply(
            Command::DeleteMessageById {
                queue: key("busy"),
                message_id: leased,
            },
            at,
        ),
        Err(StorageError::MessageNotFound)
    ));
    let counted = summary(&state, at);
    assert_eq!((counted.leased, counted.activity.deletes), (1, 1));
    state.verify();
}

#[test]
fn reset_deletes_matching_queues_and_their_acl_copies() {
    let mut state = state_with(&["orders-1", "orders-2", "jobs"]);
    let acl = |name: &str| Command::SetQueueAcl {
        queue: key(name),
        identifiers: vec![crate::queue::SignedIdentifier {
            id: "p".into(),
            access_policy: None,
        }],
    };
    state.apply(acl("orders-1"), NOW).unwrap();
    // A copy of another shard's ACL, as replication leaves it here.
    let foreign = QueueKey {
        account: ACCOUNT.into(),
        name: "orders-elsewhere".into(),
    };
    state
        .apply(
            Command::ApplyReplica(Replica::QueueAcl {
                queue: foreign.clone(),
                version: 9,
                identifiers: Some(Vec::new().into()),
            }),
            NOW,
        )
        .unwrap();
    put(&mut state, "orders-2", "x", 0, None, NOW);
    let reset = |state: &mut ShardState, account: Option<&str>, glob: Option<&str>| match state
        .apply(
            Command::DeleteQueues {
                account: account.map(str::to_string),
                glob: glob.map(str::to_string),
            },
            NOW,
        ) {
        Ok(Reply::Count(count)) => count,
        other => panic!("{other:?}"),
    };
    assert_eq!(reset(&mut state, Some("nobody"), None), 0);
    assert_eq!(reset(&mut state, Some(ACCOUNT), Some("orders-*")), 2);
    assert!(state.replicas().queue_acl(&key("orders-1")).is_none());
    assert!(state.replicas().queue_acl(&foreign).is_none());
    assert_eq!(count(&mut state, "jobs", NOW), 0);
    assert_eq!(reset(&mut state, None, None), 1);
    assert!(state.inspect_queues(None, None, 10, NOW).0.is_empty());
    state.verify();
}
