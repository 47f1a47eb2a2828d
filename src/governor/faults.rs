//! Fault injection rules: their JSON shape (parsed with serde_json), matching a request by
//! account, queue (a glob) and REST operation, and the decision whether a matching rule fires.
//!
//! Every shard holds the same rules, so it can tell cheaply whether a request matches one.
//! Whether a match **fires** (its probability, its `count`) is decided on shard 0 alone, with
//! one generator seeded by `--seed`: a rule's count holds across shards, and a seeded run makes
//! the same choices for the same sequence of matching requests.

use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::limits::{FAULT_DELAY_MS_MAX, FAULT_RULES_MAX, FAULT_RULE_TEXT_BYTES_MAX};
use crate::operation::Operation;
use crate::queue::key::glob;
use crate::random::SplitMix64;

/// A rule as clients write it (`POST /_azq/faults`, `--faults FILE`); omitted matchers match
/// everything.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The account's name, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// A glob over the queue's name: `*` matches any run of characters, `?` one character.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A REST operation name (`PutMessage`, `GetMessages`, `DeleteMessage`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// Chance that a matching request fires the rule, 0 to 1 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// Most times the rule fires; then it stays listed but never fires again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// What firing does.
    pub action: ActionSpec,
}

/// A rule's action as clients write it: exactly one of `error`, `delay_ms` and `reset`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// `ServerBusy`, `OperationTimedOut` or `InternalError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Extra time before the request is executed, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Close the connection without an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<bool>,
    /// With `error` or `reset`: apply the operation first (the ambiguous failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<bool>,
}

/// What a fired rule does to the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Answer with `error`; when `apply`, execute the request first (its changes stay).
    Error {
        /// `ServerBusy`, `OperationTimedOut` or `InternalError`.
        error: StorageError,
        /// Whether the request takes effect before the error is answered.
        apply: bool,
    },
    /// Wait `delay_ms` before executing the request normally.
    Delay {
        /// The wait, ms, at most `FAULT_DELAY_MS_MAX`.
        delay_ms: u64,
    },
    /// Close the connection without an answer; when `apply`, after executing the request.
    Reset {
        /// Whether the request takes effect before the connection is closed.
        apply: bool,
    },
}

impl Action {
    /// The `action` label of the faults-fired metric.
    pub fn label(self) -> &'static str {
        match self {
            Action::Error { error, .. } => error.code(),
            Action::Delay { .. } => "delay",
            Action::Reset { .. } => "reset",
        }
    }
}

/// A validated rule with its ID.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Unique among the server's rules: `file-N` for `--faults`, `S-N` for the N-th rule
    /// added through shard S.
    pub id: String,
    /// The rule as it was written, for listing it back.
    pub spec: RuleSpec,
    operation: Option<Operation>,
    probability: f64,
    action: Action,
}

/// Parses and validates one rule's JSON; the error says what is wrong, for a 400.
pub fn parse_rule(id: String, json: &[u8]) -> Result<Rule, String> {
    if json.len() > FAULT_RULE_TEXT_BYTES_MAX {
        return Err(format!(
            "a rule is at most {FAULT_RULE_TEXT_BYTES_MAX} bytes of JSON"
        ));
    }
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|error| error.to_string())?;
    validate(id, spec_of(value)?)
}

/// A rule's spec from its JSON value, which must be an object (serde would take an array of
/// the fields in order too).
fn spec_of(value: serde_json::Value) -> Result<RuleSpec, String> {
    if !value.is_object() {
        return Err("a rule is a JSON object".to_string());
    }
    serde_json::from_value(value).map_err(|error| error.to_string())
}

/// Parses a `--faults` file: a JSON array of rules, IDs `file-1`, `file-2`, ...
pub fn parse_rules_file(json: &[u8]) -> Result<Vec<Rule>, String> {
    let values: Vec<serde_json::Value> =
        serde_json::from_slice(json).map_err(|error| error.to_string())?;
    if values.len() > FAULT_RULES_MAX {
        return Err(format!("at most {FAULT_RULES_MAX} rules"));
    }
    values
        .into_iter()
        .enumerate()
        .map(|(index, value)| {
            spec_of(value)
                .and_then(|spec| validate(format!("file-{}", index + 1), spec))
                .map_err(|why| format!("rule {}: {why}", index + 1))
        })
        .collect()
}

fn validate(id: String, spec: RuleSpec) -> Result<Rule, String> {
    let operation = match &spec.operation {
        None => None,
        Some(name) => Some(
            Operation::ALL
                .into_iter()
                .find(|operation| operation.name() == name)
                .ok_or_else(|| {
                    format!("unknown operation {name:?} (REST names such as PutMessage)")
                })?,
        ),
    };
    let probability = spec.probability.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&probability) {
        return Err("probability must be between 0 and 1".to_string());
    }
    let action_spec = &spec.action;
    let chosen = [
        action_spec.error.is_some(),
        action_spec.delay_ms.is_some(),
        action_spec.reset.is_some(),
    ];
    if chosen.iter().filter(|&&chosen| chosen).count() != 1 {
        return Err("action needs exactly one of error, delay_ms and reset".to_string());
    }
    let apply = action_spec.apply.unwrap_or(false);
    let action = if let Some(name) = &action_spec.error {
        let error = match name.as_str() {
            "ServerBusy" => StorageError::ServerBusy,
            "OperationTimedOut" => StorageError::OperationTimedOut,
            "InternalError" => StorageError::InternalError,
            other => {
                return Err(format!(
                    "unknown error {other:?} (ServerBusy, OperationTimedOut or InternalError)"
                ))
            }
        };
        Action::Error { error, apply }
    } else if let Some(delay_ms) = action_spec.delay_ms {
        if action_spec.apply.is_some() {
            return Err("apply goes with error or reset, not delay_ms".to_string());
        }
        if delay_ms > FAULT_DELAY_MS_MAX {
            return Err(format!("delay_ms is at most {FAULT_DELAY_MS_MAX}"));
        }
        Action::Delay { delay_ms }
    } else {
        if action_spec.reset != Some(true) {
            return Err("reset must be true".to_string());
        }
        Action::Reset { apply }
    };
    Ok(Rule {
        id,
        spec,
        operation,
        probability,
        action,
    })
}

impl Rule {
    /// Whether a request of `operation` on `account` (and `queue`, for queue operations)
    /// matches the rule's matchers.
    pub fn matches(
        &self,
        account: Option<&str>,
        queue: Option<&str>,
        operation: Operation,
    ) -> bool {
        self.operation.is_none_or(|wanted| wanted == operation)
            && self
                .spec
                .account
                .as_deref()
                .is_none_or(|wanted| Some(wanted) == account)
            && self
                .spec
                .queue
                .as_deref()
                .is_none_or(|pattern| queue.is_some_and(|queue| glob(pattern, queue)))
    }
}

/// One shard's rules; on shard 0 also how often each fired and the generator that decides.
#[derive(Debug)]
pub struct Faults {
    rules: Vec<(Rule, u64)>,
    random: SplitMix64,
    /// Rules added through this shard so far, for their IDs.
    added: u64,
}

impl Faults {
    /// The rules `initial` (from `--faults`), deciding with a generator seeded by `seed`.
    pub fn new(initial: Vec<Rule>, seed: u64) -> Faults {
        Faults {
            rules: initial.into_iter().map(|rule| (rule, 0)).collect(),
            random: SplitMix64::new(seed),
            added: 0,
        }
    }

    /// Whether there is any rule (the one check every request pays when faults are enabled).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The ID of the next rule added through shard `shard`.
    pub fn next_id(&mut self, shard: usize) -> String {
        self.added += 1;
        format!("{shard}-{}", self.added)
    }

    /// The first rule matching the request, by ID.
    pub fn matching(
        &self,
        account: Option<&str>,
        queue: Option<&str>,
        operation: Operation,
    ) -> Option<&str> {
        self.rules
            .iter()
            .find(|(rule, _)| rule.matches(account, queue, operation))
            .map(|(rule, _)| rule.id.as_str())
    }

    /// Decides (on shard 0) whether rule `id` fires now: `None` when it is gone, spent or the
    /// roll says no.
    pub fn fire(&mut self, id: &str) -> Option<Action> {
        let (rule, fired) = self.rules.iter_mut().find(|(rule, _)| rule.id == id)?;
        if rule.spec.count.is_some_and(|count| *fired >= count) {
            return None;
        }
        // 53 random bits as a fraction in [0, 1): every value is exact in an f64.
        let roll = (self.random.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if roll >= rule.probability {
            return None;
        }
        *fired += 1;
        Some(rule.action)
    }

    /// Adds `rule`; `false` when there are `FAULT_RULES_MAX` rules already.
    pub fn add(&mut self, rule: Rule) -> bool {
        if self.rules.len() >= FAULT_RULES_MAX {
            return false;
        }
        self.rules.push((rule, 0));
        true
    }

    /// Removes rule `id`, or every rule with `None`; how many went. With `accounts`, only rules
    /// of one of those accounts go (a rule of every account stays): a caller who may act on
    /// some accounts removes no other account's rule.
    pub fn remove(&mut self, id: Option<&str>, accounts: Option<&[String]>) -> usize {
        let before = self.rules.len();
        let owned = |rule: &Rule| match (accounts, &rule.spec.account) {
            (None, _) => true,
            (Some(accounts), Some(account)) => accounts.contains(account),
            (Some(_), None) => false,
        };
        self.rules
            .retain(|(rule, _)| !(owned(rule) && id.is_none_or(|id| rule.id == id)));
        before - self.rules.len()
    }

    /// The rules as JSON, each with its ID and how often it fired (meaningful on shard 0): with
    /// `accounts`, only the rules that name one of those accounts (a rule of every account may
    /// name queues of others, and how often it fired tells of their traffic).
    pub fn list_json(&self, accounts: Option<&[String]>) -> String {
        #[derive(Serialize)]
        struct Listed<'a> {
            id: &'a str,
            #[serde(flatten)]
            spec: &'a RuleSpec,
            fired: u64,
        }
        #[derive(Serialize)]
        struct Listing<'a> {
            rules: Vec<Listed<'a>>,
        }
        let listing = Listing {
            rules: self
                .rules
                .iter()
                .filter(|(rule, _)| match (accounts, &rule.spec.account) {
                    (Some(accounts), Some(account)) => accounts.contains(account),
                    (Some(_), None) => false,
                    (None, _) => true,
                })
                .map(|(rule, fired)| Listed {
                    id: &rule.id,
                    spec: &rule.spec,
                    fired: *fired,
                })
                .collect(),
        };
        serde_json::to_string(&listing).expect("rules serialize")
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Result<Rule, String> {
        parse_rule("t-1".to_string(), json.as_bytes())
    }

    #[test]
    fn the_issue_example_parses() {
        let parsed = rule(
            r#"{"account": "devstoreaccount1", "queue": "orders-*", "operation": "PutMessage",
                "probability": 0.1, "count": 100,
                "action": {"error": "OperationTimedOut", "apply": true}}"#,
        )
        .unwrap();
        assert_eq!(
            parsed.action,
            Action::Error {
                error: StorageError::OperationTimedOut,
                apply: true
            }
        );
        assert!(parsed.matches(
            Some("devstoreaccount1"),
            Some("orders-7"),
            Operation::PutMessage
        ));
        assert!(!parsed.matches(
            Some("devstoreaccount1"),
            Some("orders"),
            Operation::PutMessage
        ));
        assert!(!parsed.matches(Some("other"), Some("orders-7"), Operation::PutMessage));
        assert!(!parsed.matches(
            Some("devstoreaccount1"),
            Some("orders-7"),
            Operation::GetMessages
        ));
        assert!(!parsed.matches(Some("devstoreaccount1"), None, Operation::PutMessage));
        let everything = rule(r#"{"action": {"reset": true}}"#).unwrap();
        assert!(everything.matches(None, None, Operation::ListQueues));
        assert_eq!(everything.action, Action::Reset { apply: false });
        assert_eq!(
            rule(r#"{"action": {"delay_ms": 5}}"#).unwrap().action,
            Action::Delay { delay_ms: 5 }
        );
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let cases = [
            ("", "EOF"),
            ("[]", "a JSON object"),
            ("[1, 2, 3, 4, 5, {}]", "a JSON object"),
            (r#"{"action": {}}"#, "exactly one"),
            (
                r#"{"action": {"error": "ServerBusy", "reset": true}}"#,
                "exactly one",
            ),
            (r#"{"action": {"error": "Nope"}}"#, "unknown error"),
            (r#"{"action": {"reset": false}}"#, "reset must be true"),
            (
                r#"{"action": {"delay_ms": 5, "apply": true}}"#,
                "apply goes with",
            ),
            (
                r#"{"action": {"delay_ms": 99999999}}"#,
                "delay_ms is at most",
            ),
            (
                r#"{"operation": "Put", "action": {"reset": true}}"#,
                "unknown operation",
            ),
            (
                r#"{"probability": 2, "action": {"reset": true}}"#,
                "between 0 and 1",
            ),
            (
                r#"{"probability": "x", "action": {"reset": true}}"#,
                "invalid type",
            ),
            (
                r#"{"colour": "red", "action": {"reset": true}}"#,
                "unknown field",
            ),
            (r#"{"queue": "a"}"#, "missing field `action`"),
        ];
        for (json, expected) in cases {
            let error = rule(json).unwrap_err();
            assert!(error.contains(expected), "{json}: {error}");
        }
    }

    #[test]
    fn count_and_probability_are_repeatable_with_a_seed() {
        let run = |seed| {
            let rules = parse_rules_file(
                br#"[{"probability": 0.5, "count": 10, "action": {"error": "ServerBusy"}}]"#,
            )
            .unwrap();
            let mut faults = Faults::new(rules, seed);
            (0..100)
                .map(|_| faults.fire("file-1").is_some())
                .collect::<Vec<_>>()
        };
        let first = run(7);
        assert_eq!(first, run(7));
        assert_eq!(first.iter().filter(|&&fired| fired).count(), 10);
        assert_ne!(first, run(8));
    }

    #[test]
    fn rules_are_added_listed_and_removed() {
        let mut faults = Faults::new(Vec::new(), 1);
        assert!(faults.is_empty());
        let id = faults.next_id(3);
        assert_eq!(id, "3-1");
        let added = parse_rule(
            id,
            br#"{"queue": "q", "action": {"reset": true, "apply": true}}"#,
        )
        .unwrap();
        assert!(faults.add(added));
        assert_eq!(
            faults.matching(None, Some("q"), Operation::PutMessage),
            Some("3-1")
        );
        assert_eq!(faults.fire("3-1"), Some(Action::Reset { apply: true }));
        let listed = r#"{"rules":[{"id":"3-1","queue":"q","action":{"reset":true,"apply":true},"fired":1}]}"#;
        assert_eq!(faults.list_json(None), listed);
        // A rule of every account is neither listed to a caller of some accounts nor removed
        // by one.
        let some = ["a".to_string()];
        assert_eq!(faults.list_json(Some(&some)), r#"{"rules":[]}"#);
        assert_eq!(faults.remove(None, Some(&some)), 0);
        let own = parse_rule(
            "3-2".into(),
            br#"{"account": "a", "action": {"reset": true}}"#,
        );
        let other = parse_rule(
            "3-3".into(),
            br#"{"account": "b", "action": {"reset": true}}"#,
        );
        assert!(faults.add(own.unwrap()) && faults.add(other.unwrap()));
        assert!(!faults.list_json(Some(&some)).contains("3-3"));
        assert!(faults.list_json(Some(&some)).contains("3-2"));
        assert_eq!(faults.remove(Some("3-3"), Some(&some)), 0);
        assert_eq!(faults.remove(None, Some(&some)), 1);
        assert_eq!(faults.remove(Some("nope"), None), 0);
        assert_eq!(faults.remove(None, None), 2);
        assert_eq!(faults.fire("3-1"), None);
        assert_eq!(faults.len(), 0);
    }
}
