//! `--init FILE`: the queues, settings and messages a server starts with, from a JSON or YAML
//! file, applied to the shards' states before any shard serves (so before `/_azq/health`
//! answers 200).
//!
//! ```yaml
//! queues:                       # queues of the first account (devstoreaccount1 by default)
//!   orders:
//!     metadata: {team: payments}
//!     acl:
//!       - {id: reader, start: 2026-01-01T00:00:00Z, expiry: 2030-01-01T00:00:00Z,
//!          permission: rp}
//!     messages:
//!       - text: hello
//!       - {text: later, visibility_delay: 30s, ttl: 1h}
//!       - {text: '{"n": 1}', base64: true, count: 100}
//! cors:                         # the first account's CORS rules
//!   - {allowed_origins: ["*"], allowed_methods: [GET, PUT], max_age_s: 60}
//! accounts:                     # any account of AZURITE_ACCOUNTS, by name
//!   acct2: {queues: {jobs: {}}}
//! ```
//!
//! **Restarts.** With persistence a server may start again with the same file over the data
//! the last run left. The rule: a queue that exists is left exactly as it is (metadata, ACL and
//! messages: the run before may have consumed or changed them on purpose); a queue that does
//! not exist is created with its metadata and ACL and gets its messages. So messages are put
//! only into queues this start created, and a restart never duplicates them. CORS rules are set
//! only on an account that has none. A crash before the first log flush after start loses what
//! init did, and the next start does it again, by the same rule; a graceful stop waits for that
//! flush (the drain waits for the log).
//!
//! Everything is validated while the file is read (the same checks as the REST API: queue
//! names, metadata, stored access policies and CORS through the API's own XML readers), so a
//! bad file is refused with its line and reason before anything changes. The YAML reader is
//! serde-saphyr: pure Rust, maintained, and it bounds what a document may expand to (anchors,
//! depth); serde_yaml, the usual choice, is archived and unmaintained.

use std::borrow::BorrowMut;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine as _;
use bytes::Bytes;
use bytes::BytesMut;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::api::{settings_xml, validate, xml};
use crate::error::StorageError;
use crate::limits::{
    INIT_FILE_BYTES_MAX, INIT_MESSAGES_MAX, MESSAGE_TEXT_BYTES_MAX, MESSAGE_TTL_S_DEFAULT,
    VISIBILITY_TIMEOUT_S_MAX,
};
use crate::queue::{
    home_shard, shard_for, Command, CorsRule, Metadata, QueueKey, Reply, ServicePropertiesUpdate,
    ShardState, SignedIdentifier,
};

/// A validated `--init` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitPlan {
    /// Every account the file names, in the file's order.
    pub accounts: Vec<AccountPlan>,
}

/// What the file asks for one account.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountPlan {
    /// The account's name, one of the server's accounts.
    pub name: String,
    /// CORS rules, set when the account has none.
    pub cors: Option<Vec<CorsRule>>,
    /// Its queues, in the file's order.
    pub queues: Vec<QueuePlan>,
}

/// One queue of the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueuePlan {
    /// A valid queue name.
    pub name: String,
    /// Valid metadata in canonical order.
    pub metadata: Metadata,
    /// Stored access policies, when the file gives them.
    pub acl: Option<Vec<SignedIdentifier>>,
    /// Messages put into the queue when this start creates it.
    pub messages: Vec<MessagePlan>,
}

/// One message entry (possibly repeated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagePlan {
    /// The stored text (base64-encoded already when the entry asked).
    pub text: Bytes,
    /// Seconds before it first becomes visible.
    pub visibility_delay_s: u64,
    /// Seconds to live; `None`: never expires. Above `visibility_delay_s`.
    pub ttl_s: Option<u64>,
    /// How many identical messages to put.
    pub count: u64,
}

/// Which reader a file needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// JSON (serde_json).
    Json,
    /// YAML 1.2 (serde-saphyr).
    Yaml,
}

impl Format {
    /// The format a file's name says (`.json`, `.yaml`, `.yml`); otherwise JSON when the text
    /// opens with `{`, else YAML.
    pub fn of(path: &str, text: &str) -> Format {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".json") {
            Format::Json
        } else if lower.ends_with(".yaml") || lower.ends_with(".yml") {
            Format::Yaml
        } else if text.trim_start().starts_with('{') {
            Format::Json
        } else {
            Format::Yaml
        }
    }
}

/// Why a file was refused: the line (1-based) when known, and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitError {
    /// Line of the file where the problem was found.
    pub line: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl InitError {
    fn new(line: Option<u64>, reason: impl Into<String>) -> InitError {
        InitError {
            line,
            reason: reason.into(),
        }
    }

    /// `PATH:LINE: reason` (or `PATH: reason` without a line).
    pub fn describe(&self, path: &str) -> String {
        match self.line {
            Some(line) => format!("{path}:{line}: {}", self.reason),
            None => format!("{path}: {}", self.reason),
        }
    }
}

/// Reads and validates the file at `path` for a server whose accounts are `accounts` (the
/// first is the default). The error is ready to print: path, line and reason.
pub fn read(path: &str, accounts: &[&str]) -> Result<InitPlan, String> {
    let bytes = std::fs::read(path).map_err(|error| format!("{path}: cannot read it: {error}"))?;
    if bytes.len() > INIT_FILE_BYTES_MAX {
        return Err(format!(
            "{path}: {} bytes, more than the {INIT_FILE_BYTES_MAX} an init file may hold",
            bytes.len()
        ));
    }
    let text = String::from_utf8(bytes).map_err(|error| {
        let line = 1 + error.as_bytes()[..error.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&byte| byte == b'\n')
            .count();
        format!("{path}:{line}: not UTF-8")
    })?;
    parse(&text, Format::of(path, &text), accounts).map_err(|error| error.describe(path))
}

/// Parses and validates `text`.
pub fn parse(text: &str, format: Format, accounts: &[&str]) -> Result<InitPlan, InitError> {
    let raw: RawFile = match format {
        Format::Json => serde_json::from_str(text).map_err(|error| {
            let line = (error.line() > 0).then_some(error.line() as u64);
            InitError::new(line, strip_json_position(&error.to_string()))
        })?,
        Format::Yaml => {
            let mut options = serde_saphyr::Options::default();
            options.with_snippet = false;
            serde_saphyr::from_str_with_options(text, options).map_err(|error| {
                let line = error.location().map(|location| location.line());
                InitError::new(line, yaml_reason(&error))
            })?
        }
    };
    let default_account = accounts
        .first()
        .ok_or_else(|| InitError::new(None, "the server has no account"))?;
    let mut plan = InitPlan::default();
    if raw.cors.is_some() || !raw.queues.0.is_empty() {
        plan.accounts.push(AccountPlan {
            name: default_account.to_string(),
            cors: raw.cors.map(|cors| cors.0),
            queues: queue_plans(raw.queues),
        });
    }
    for (name, account) in raw.accounts.0 {
        if !accounts.contains(&name.as_str()) {
            return Err(InitError::new(
                line_of(text, &name),
                format!(
                    "account {name:?} is not one of the server's accounts ({}; set them with \
                     AZURITE_ACCOUNTS)",
                    accounts.join(", ")
                ),
            ));
        }
        let queues = queue_plans(account.queues);
        match plan.accounts.iter_mut().find(|known| known.name == name) {
            Some(known) => {
                if account.cors.is_some() && known.cors.is_some() {
                    return Err(InitError::new(
                        line_of(text, &name),
                        format!("CORS rules of {name} given twice (top level and accounts)"),
                    ));
                }
                if let Some(twice) = queues
                    .iter()
                    .find(|queue| known.queues.iter().any(|other| other.name == queue.name))
                {
                    return Err(InitError::new(
                        line_of(text, &twice.name),
                        format!("queue {} of {name} given twice", twice.name),
                    ));
                }
                known.cors = known.cors.take().or(account.cors.map(|cors| cors.0));
                known.queues.extend(queues);
            }
            None => plan.accounts.push(AccountPlan {
                name,
                cors: account.cors.map(|cors| cors.0),
                queues,
            }),
        }
    }
    let messages: u64 = plan
        .accounts
        .iter()
        .flat_map(|account| &account.queues)
        .flat_map(|queue| &queue.messages)
        .map(|message| message.count)
        .fold(0u64, u64::saturating_add);
    if messages > INIT_MESSAGES_MAX {
        return Err(InitError::new(
            None,
            format!("{messages} messages, more than the {INIT_MESSAGES_MAX} an init file may put"),
        ));
    }
    Ok(plan)
}

fn queue_plans(queues: UniqueMap<QueueName, RawQueue>) -> Vec<QueuePlan> {
    queues
        .0
        .into_iter()
        .map(|(name, queue)| QueuePlan {
            name: name.0,
            metadata: queue.metadata.0,
            acl: queue.acl.map(|acl| acl.0),
            messages: queue.messages,
        })
        .collect()
}

/// The first line of `text` that mentions `word` as a key or quoted string, for errors found
/// after parsing.
fn line_of(text: &str, word: &str) -> Option<u64> {
    let quoted = format!("\"{word}\"");
    let keyed = format!("{word}:");
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            line.contains(&quoted)
                || line.starts_with(&keyed)
                || line.contains(&format!(" {keyed}"))
        })
        .map(|index| index as u64 + 1)
}

/// serde_json's message without its trailing " at line L column C" (the line is given apart).
fn strip_json_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// serde-saphyr's message, without the position it may append.
fn yaml_reason(error: &serde_saphyr::Error) -> String {
    let message = error.to_string();
    let message = message.lines().next().unwrap_or_default();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// What applying a plan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Queues this start created.
    pub queues_created: usize,
    /// Queues that existed already and were left as they were.
    pub queues_kept: usize,
    /// Messages put into the created queues.
    pub messages_put: u64,
    /// Accounts whose CORS rules were set.
    pub cors_set: usize,
}

impl fmt::Display for Applied {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "created {} queues with {} messages, kept {} that existed, set CORS on {} accounts",
            self.queues_created, self.messages_put, self.queues_kept, self.cors_set
        )
    }
}

/// Applies `plan` to every shard's state (`states[i]` is shard `i`), at `now_ms`, by the rule
/// in this file's header. A durable state records each change in its journal as a request's
/// would. Fails only when a state refuses (e.g. `--max-memory` reached): the reason says where.
pub fn apply<S: BorrowMut<ShardState>>(
    plan: &InitPlan,
    states: &mut [S],
    now_ms: u64,
) -> Result<Applied, String> {
    let shards = states.len();
    let mut applied = Applied::default();
    for account in &plan.accounts {
        if let Some(rules) = &account.cors {
            let home = home_shard(&account.name, shards);
            if states[home]
                .borrow()
                .replicas()
                .service_properties(&account.name)
                .cors
                .is_empty()
            {
                let update = ServicePropertiesUpdate {
                    cors: Some(rules.clone()),
                    ..ServicePropertiesUpdate::default()
                };
                let command = Command::SetServiceProperties {
                    account: account.name.clone(),
                    update: Box::new(update),
                };
                replicate(states, home, command, now_ms)
                    .map_err(|error| format!("CORS of {}: {}", account.name, error.code()))?;
                applied.cors_set += 1;
            }
        }
        for queue in &account.queues {
            let key = QueueKey {
                account: account.name.clone(),
                name: queue.name.clone(),
            };
            let owner = shard_for(&key, shards);
            let state = states[owner].borrow_mut();
            let failed = |what: &str, error: StorageError| {
                format!("{what} {}/{}: {}", key.account, key.name, error.code())
            };
            let create = Command::CreateQueue {
                queue: key.clone(),
                metadata: queue.metadata.clone(),
            };
            if state
                .apply(Command::GetQueueMetadata { queue: key.clone() }, now_ms)
                .is_ok()
            {
                applied.queues_kept += 1;
                continue;
            }
            state
                .apply(create, now_ms)
                .map_err(|error| failed("creating", error))?;
            applied.queues_created += 1;
            if let Some(identifiers) = &queue.acl {
                let command = Command::SetQueueAcl {
                    queue: key.clone(),
                    identifiers: identifiers.clone(),
                };
                replicate(states, owner, command, now_ms)
                    .map_err(|error| failed("setting the ACL of", error))?;
            }
            let state = states[owner].borrow_mut();
            for message in &queue.messages {
                for _ in 0..message.count {
                    let put = Command::PutMessage {
                        queue: key.clone(),
                        text: message.text.clone(),
                        visibility_timeout_s: message.visibility_delay_s,
                        ttl_s: message.ttl_s,
                    };
                    state
                        .apply(put, now_ms)
                        .map_err(|error| failed("putting a message into", error))?;
                    applied.messages_put += 1;
                }
            }
        }
    }
    Ok(applied)
}

/// Applies a settings write on its writer `shard`, then its replica on every other shard.
fn replicate<S: BorrowMut<ShardState>>(
    states: &mut [S],
    shard: usize,
    command: Command,
    now_ms: u64,
) -> Result<(), StorageError> {
    if let Reply::Replicate(replica) = states[shard].borrow_mut().apply(command, now_ms)? {
        for (index, state) in states.iter_mut().enumerate() {
            if index != shard {
                state
                    .borrow_mut()
                    .apply(Command::ApplyReplica((*replica).clone()), now_ms)?;
            }
        }
    }
    Ok(())
}

// The file's shapes as serde reads them; each validates itself while it is read, so an error
// carries the line the reader was at.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    queues: UniqueMap<QueueName, RawQueue>,
    #[serde(default)]
    cors: Option<Cors>,
    #[serde(default)]
    accounts: UniqueMap<String, RawAccount>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccount {
    #[serde(default)]
    queues: UniqueMap<QueueName, RawQueue>,
    #[serde(default)]
    cors: Option<Cors>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueue {
    #[serde(default)]
    metadata: ValidMetadata,
    #[serde(default)]
    acl: Option<Acl>,
    #[serde(default)]
    messages: Vec<MessagePlan>,
}

/// A map that refuses a key given twice (serde_json would keep the last silently).
struct UniqueMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for UniqueMap<K, V> {
    fn default() -> Self {
        UniqueMap(Vec::new())
    }
}

impl<'de, K, V> Deserialize<'de> for UniqueMap<K, V>
where
    K: Deserialize<'de> + PartialEq + fmt::Display,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<K, V>(PhantomData<(K, V)>);
        impl<'de, K, V> Visitor<'de> for MapVisitor<K, V>
        where
            K: Deserialize<'de> + PartialEq + fmt::Display,
            V: Deserialize<'de>,
        {
            type Value = UniqueMap<K, V>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(K, V)> = Vec::new();
                while let Some(key) = map.next_key::<K>()? {
                    if entries.iter().any(|(known, _)| *known == key) {
                        return Err(de::Error::custom(format!("{key} is given twice")));
                    }
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(UniqueMap(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

/// A valid queue name.
#[derive(Deserialize, PartialEq)]
#[serde(try_from = "String")]
struct QueueName(String);

impl TryFrom<String> for QueueName {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        validate::queue_name(&name).map_err(|_| {
            format!(
                "queue name {name:?}: 3 to 63 characters of a-z, 0-9 and -, starting and ending \
                 with a letter or digit, no --"
            )
        })?;
        Ok(QueueName(name))
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "queue {}", self.0)
    }
}

/// Metadata checked as the REST API checks `x-ms-meta-*` headers.
#[derive(Default, Deserialize)]
#[serde(try_from = "UniqueMap<String, String>")]
struct ValidMetadata(Metadata);

impl TryFrom<UniqueMap<String, String>> for ValidMetadata {
    type Error = String;
    fn try_from(pairs: UniqueMap<String, String>) -> Result<Self, String> {
        validate::metadata_pairs(
            pairs
                .0
                .iter()
                .map(|(name, value)| (name.as_bytes(), value.as_bytes())),
        )
        .map(ValidMetadata)
        .map_err(|error| match error {
            StorageError::MetadataTooLarge => {
                "metadata: more than 8 KiB of names and values".into()
            }
            _ => "metadata: names are C# identifiers (letters, digits, _), unique whatever \
                  their case; values are XML text"
                .to_string(),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    id: String,
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    expiry: Option<String>,
    #[serde(default)]
    permission: Option<String>,
}

/// Stored access policies, read by the API's own Set Queue ACL reader.
#[derive(Deserialize)]
#[serde(try_from = "Vec<RawPolicy>")]
struct Acl(Vec<SignedIdentifier>);

impl TryFrom<Vec<RawPolicy>> for Acl {
    type Error = String;
    fn try_from(policies: Vec<RawPolicy>) -> Result<Self, String> {
        let mut body = BytesMut::from(&b"<SignedIdentifiers>"[..]);
        for policy in &policies {
            element(&mut body, "SignedIdentifier", None);
            element(&mut body, "Id", Some(&policy.id));
            let terms = [
                ("Start", &policy.start),
                ("Expiry", &policy.expiry),
                ("Permission", &policy.permission),
            ];
            if terms.iter().any(|(_, value)| value.is_some()) {
                element(&mut body, "AccessPolicy", None);
                for (name, value) in terms {
                    if let Some(value) = value {
                        element(&mut body, name, Some(value));
                    }
                }
                body.extend_from_slice(b"</AccessPolicy>");
            }
            body.extend_from_slice(b"</SignedIdentifier>");
        }
        body.extend_from_slice(b"</SignedIdentifiers>");
        settings_xml::signed_identifiers(&body)
            .map(Acl)
            .map_err(|_| {
                "acl: at most 5 policies with distinct ids of 1 to 64 characters; start and expiry \
             ISO 8601 times (2026-01-01T00:00:00Z); permission letters of raup in that order"
                    .to_string()
            })
    }
}

/// A list given as a YAML/JSON list of strings or as one comma-separated string.
#[derive(Default, Deserialize)]
#[serde(untagged)]
enum StringList {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl StringList {
    fn joined(&self) -> String {
        match self {
            StringList::None => String::new(),
            StringList::One(text) => text.clone(),
            StringList::Many(items) => items.join(","),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCorsRule {
    allowed_origins: StringList,
    allowed_methods: StringList,
    #[serde(default)]
    allowed_headers: StringList,
    #[serde(default)]
    exposed_headers: StringList,
    #[serde(default)]
    max_age_s: u64,
}

/// CORS rules, read by the API's own Set Service Properties reader.
#[derive(Deserialize)]
#[serde(try_from = "Vec<RawCorsRule>")]
struct Cors(Vec<CorsRule>);

impl TryFrom<Vec<RawCorsRule>> for Cors {
    type Error = String;
    fn try_from(rules: Vec<RawCorsRule>) -> Result<Self, String> {
        let mut body = BytesMut::from(&b"<StorageServiceProperties><Cors>"[..]);
        for rule in &rules {
            element(&mut body, "CorsRule", None);
            element(
                &mut body,
                "AllowedOrigins",
                Some(&rule.allowed_origins.joined()),
            );
            element(
                &mut body,
                "AllowedMethods",
                Some(&rule.allowed_methods.joined()),
            );
            element(
                &mut body,
                "AllowedHeaders",
                Some(&rule.allowed_headers.joined()),
            );
            element(
                &mut body,
                "ExposedHeaders",
                Some(&rule.exposed_headers.joined()),
            );
            element(
                &mut body,
                "MaxAgeInSeconds",
                Some(&rule.max_age_s.to_string()),
            );
            body.extend_from_slice(b"</CorsRule>");
        }
        body.extend_from_slice(b"</Cors></StorageServiceProperties>");
        let update = settings_xml::service_properties_update(&body).map_err(|_| {
            "cors: at most 5 rules, each with allowed_origins and allowed_methods (DELETE, GET, \
             HEAD, MERGE, POST, OPTIONS, PUT), 2 KiB of text in all"
                .to_string()
        })?;
        Ok(Cors(update.cors.unwrap_or_default()))
    }
}

/// Appends `<name>` and, with `text`, the escaped text and `</name>`.
fn element(body: &mut BytesMut, name: &str, text: Option<&str>) {
    body.extend_from_slice(format!("<{name}>").as_bytes());
    if let Some(text) = text {
        xml::escape_into(body, text.as_bytes());
        body.extend_from_slice(format!("</{name}>").as_bytes());
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMessage {
    text: String,
    #[serde(default)]
    base64: bool,
    #[serde(default)]
    visibility_delay: Option<Seconds>,
    #[serde(default)]
    ttl: Option<TimeToLive>,
    #[serde(default)]
    count: Option<u64>,
}

impl<'de> Deserialize<'de> for MessagePlan {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawMessage::deserialize(deserializer)?;
        let text = if raw.base64 {
            base64::engine::general_purpose::STANDARD.encode(raw.text.as_bytes())
        } else {
            raw.text
        };
        if text.len() > MESSAGE_TEXT_BYTES_MAX {
            return Err(de::Error::custom(format!(
                "message text: {} bytes, more than {MESSAGE_TEXT_BYTES_MAX}",
                text.len()
            )));
        }
        if xml::has_non_xml_char(text.as_bytes()) {
            return Err(de::Error::custom(
                "message text: holds a control character XML cannot carry",
            ));
        }
        let visibility_delay_s = raw.visibility_delay.map_or(0, |delay| delay.0);
        if visibility_delay_s > VISIBILITY_TIMEOUT_S_MAX {
            return Err(de::Error::custom(
                "visibility_delay: at most 7 days (604800 s)",
            ));
        }
        let ttl_s = match raw.ttl {
            None => Some(MESSAGE_TTL_S_DEFAULT),
            Some(TimeToLive::Never) => None,
            Some(TimeToLive::Seconds(ttl_s)) => Some(ttl_s),
        };
        if ttl_s.is_some_and(|ttl_s| ttl_s <= visibility_delay_s) {
            return Err(de::Error::custom(
                "ttl: must be longer than the visibility_delay (and above 0)",
            ));
        }
        let count = raw.count.unwrap_or(1);
        if count == 0 {
            return Err(de::Error::custom("count: at least 1"));
        }
        Ok(MessagePlan {
            text: Bytes::from(text),
            visibility_delay_s,
            ttl_s,
            count,
        })
    }
}

/// A time in whole seconds: a number of seconds, or a string such as `90s`, `5m`, `2h`, `7d`.
struct Seconds(u64);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match TimeToLive::deserialize(deserializer)? {
            TimeToLive::Seconds(seconds) => Ok(Seconds(seconds)),
            TimeToLive::Never => Err(de::Error::custom("a time cannot be never here")),
        }
    }
}

/// A TTL: seconds as `Seconds` reads them, or `-1` / `never`.
enum TimeToLive {
    Seconds(u64),
    Never,
}

/// Reads `90`, `90s`, `5m`, `2h`, `7d` (or `-1` and `never` for a TTL).
fn parse_seconds(text: &str) -> Option<TimeToLive> {
    let text = text.trim();
    if text == "never" || text == "-1" {
        return Some(TimeToLive::Never);
    }
    let (number, unit_s) = match text.char_indices().last()? {
        (at, 's') => (&text[..at], 1),
        (at, 'm') => (&text[..at], 60),
        (at, 'h') => (&text[..at], 3600),
        (at, 'd') => (&text[..at], 86_400),
        _ => (text, 1),
    };
    let number: u64 = number.trim().parse().ok()?;
    number.checked_mul(unit_s).map(TimeToLive::Seconds)
}

impl<'de> Deserialize<'de> for TimeToLive {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimeVisitor;
        const EXPECTED: &str =
            "seconds, or a time such as 90s, 5m, 2h, 7d (-1 or never: no expiry)";
        impl Visitor<'_> for TimeVisitor {
            type Value = TimeToLive;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str(EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<TimeToLive, E> {
                Ok(TimeToLive::Seconds(value))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<TimeToLive, E> {
                match value {
                    -1 => Ok(TimeToLive::Never),
                    value if value >= 0 => Ok(TimeToLive::Seconds(value as u64)),
                    _ => Err(E::custom(EXPECTED)),
                }
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<TimeToLive, E> {
                parse_seconds(value).ok_or_else(|| E::custom(format!("{value:?}: {EXPECTED}")))
            }
        }
        deserializer.deserialize_any(TimeVisitor)
    }
}

#[cfg(test)]
mod tests;
