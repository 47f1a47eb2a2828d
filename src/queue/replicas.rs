//! The settings every shard keeps a copy of, so that any shard can authorize a request and
//! answer CORS without asking another: each account's service properties (logging, metrics,
//! CORS rules) and each queue's stored access policies (its ACL).
//!
//! Each setting has one writer that orders its changes: a queue's ACL is written by the shard
//! that owns the queue, an account's properties by the account's home shard (`home_shard`). The
//! writer applies a change, stamps it with the next version of its own counter and hands back a
//! `Replica`; the runtime applies that replica on every other shard before the client gets its
//! answer, so a client that reads after its write sees it on every shard. Replicas of one setting
//! may still reach a shard out of order (two clients writing at once through different shards),
//! so a shard keeps the highest version it has seen: every copy converges to the writer's.
//!
//! A copy can be briefly stale, and when a Set Queue ACL races a Delete Queue it can describe a
//! queue that no longer exists. Authorization therefore notes the version of the ACL it used and
//! the owner refuses the operation unless that is still the queue's current ACL
//! (`Command::WithStoredPolicy`): a new queue never inherits a deleted namesake's policies.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use crate::limits::{QUEUE_ACL_OVERHEAD_BYTES, SIGNED_IDENTIFIER_OVERHEAD_BYTES};

use super::key::{shard_for, QueueKey};

/// One stored access policy of a queue, exactly as the client sent it: Get Queue ACL gives the
/// same text back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignedIdentifier {
    /// The policy's name, which a service SAS quotes in `si` (1 to 64 characters).
    pub id: String,
    /// `None` when the identifier was sent without an `AccessPolicy` element.
    pub access_policy: Option<AccessPolicy>,
}

/// The terms of a stored access policy; absent fields must come from the SAS that uses it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    /// ISO 8601, validated when set.
    pub start: Option<String>,
    /// ISO 8601, validated when set.
    pub expiry: Option<String>,
    /// Letters of `raup`, in that order, validated when set.
    pub permission: Option<String>,
}

impl AccessPolicy {
    /// Whether the policy sets none of its fields: Get Queue ACL answers no `AccessPolicy`
    /// element for it, as the service does.
    pub fn is_empty(&self) -> bool {
        self.start.is_none() && self.expiry.is_none() && self.permission.is_none()
    }
}

/// A queue's stored access policies, shared between the shard's copy and replies.
pub type SignedIdentifiers = Arc<[SignedIdentifier]>;

/// An account's Queue service properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceProperties {
    /// `Logging`: stored and echoed; azq writes no analytics logs.
    pub logging: Logging,
    /// `HourMetrics`: stored and echoed; azq computes no metrics.
    pub hour_metrics: Metrics,
    /// `MinuteMetrics`: stored and echoed; azq computes no metrics.
    pub minute_metrics: Metrics,
    /// In the order sent: CORS evaluates rules first to last.
    pub cors: Vec<CorsRule>,
}

impl Default for ServiceProperties {
    /// A new account's properties, as Azure creates them: logging and metrics off, no CORS.
    fn default() -> Self {
        let metrics = Metrics {
            version: ANALYTICS_VERSION.to_string(),
            enabled: false,
            include_apis: None,
            retention_policy: RetentionPolicy::default(),
        };
        ServiceProperties {
            logging: Logging {
                version: ANALYTICS_VERSION.to_string(),
                delete: false,
                read: false,
                write: false,
                retention_policy: RetentionPolicy::default(),
            },
            hour_metrics: metrics.clone(),
            minute_metrics: metrics,
            cors: Vec::new(),
        }
    }
}

/// The only analytics version Azure's Queue service knows.
const ANALYTICS_VERSION: &str = "1.0";

/// Storage Analytics logging settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logging {
    /// `Version` as sent (Azure knows only `1.0`); never empty.
    pub version: String,
    /// `Delete`: whether delete requests would be logged.
    pub delete: bool,
    /// `Read`: whether read requests would be logged.
    pub read: bool,
    /// `Write`: whether write requests would be logged.
    pub write: bool,
    /// How long logs would be kept.
    pub retention_policy: RetentionPolicy,
}

/// Storage Analytics metrics settings (hourly or per minute).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metrics {
    /// `Version` as sent (Azure knows only `1.0`); never empty.
    pub version: String,
    /// `Enabled`: whether metrics would be collected.
    pub enabled: bool,
    /// Sent only with enabled metrics; kept exactly as sent.
    pub include_apis: Option<bool>,
    /// How long metrics would be kept.
    pub retention_policy: RetentionPolicy,
}

/// How long analytics data is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// `Enabled`: whether old data would be deleted after `days`.
    pub enabled: bool,
    /// 1 to `RETENTION_DAYS_MAX` when present.
    pub days: Option<u32>,
}

/// One CORS rule. The lists stay comma-separated as sent, so Get Service Properties gives the
/// same text back; matching splits them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorsRule {
    /// `AllowedOrigins`: origins compared exactly, or `*` for every origin.
    pub allowed_origins: String,
    /// `AllowedMethods`: methods an actual request or a preflight may use (case-sensitive).
    pub allowed_methods: String,
    /// `AllowedHeaders`: names or prefixes (`x-ms-meta-*`) a preflight may ask for; may be empty.
    pub allowed_headers: String,
    /// `ExposedHeaders`: names or prefixes of response headers a browser may read; may be empty.
    pub exposed_headers: String,
    /// `MaxAgeInSeconds`: how long a browser may cache a preflight's answer, seconds.
    pub max_age_s: u64,
}

/// The elements of a Set Service Properties body; an element the client left out keeps its
/// current value, as in Azure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServicePropertiesUpdate {
    /// `Logging`, complete, when the body had it.
    pub logging: Option<Logging>,
    /// `HourMetrics`, complete, when the body had it.
    pub hour_metrics: Option<Metrics>,
    /// `MinuteMetrics`, complete, when the body had it.
    pub minute_metrics: Option<Metrics>,
    /// `Cors` when the body had it; an empty `<Cors />` removes every rule.
    pub cors: Option<Vec<CorsRule>>,
}

impl ServicePropertiesUpdate {
    /// `current` with this update's elements replacing its own.
    pub fn applied_to(self, current: &ServiceProperties) -> ServiceProperties {
        ServiceProperties {
            logging: self.logging.unwrap_or_else(|| current.logging.clone()),
            hour_metrics: self
                .hour_metrics
                .unwrap_or_else(|| current.hour_metrics.clone()),
            minute_metrics: self
                .minute_metrics
                .unwrap_or_else(|| current.minute_metrics.clone()),
            cors: self.cors.unwrap_or_else(|| current.cors.clone()),
        }
    }
}

/// A change of a replicated setting, made by its writer and applied on every other shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replica {
    /// A queue's ACL was replaced (`Some`), or the queue was deleted with its ACL (`None`).
    QueueAcl {
        /// The queue whose ACL changed; its owner is the writer.
        queue: QueueKey,
        /// The owner's counter after the change: a copy keeps the highest version it saw.
        version: u64,
        /// The complete new ACL, or `None` when the queue was deleted.
        identifiers: Option<SignedIdentifiers>,
    },
    /// An account's properties, complete, after the writer merged a partial update.
    ServiceProperties {
        /// The account whose properties changed; its home shard is the writer.
        account: String,
        /// The home shard's counter after the change: a copy keeps the highest version it saw.
        version: u64,
        /// Every element, merged, so that a shard's copy is replaced rather than patched.
        properties: Arc<ServiceProperties>,
    },
}

/// A setting and the writer's version of it.
#[derive(Debug)]
struct Versioned<T> {
    version: u64,
    value: T,
    /// This shard writes the setting (it owns the queue, or is the account's home shard), so
    /// its snapshots keep it; a copy of another shard's setting is rebuilt from that shard's
    /// records at recovery instead, and a copy kept on disk could outlive the setting.
    written_here: bool,
}

/// One shard's copy of every replicated setting.
#[derive(Debug)]
pub struct Replicas {
    /// What an account that never set its properties has.
    default_service_properties: Arc<ServiceProperties>,
    service_properties: HashMap<String, Versioned<Arc<ServiceProperties>>>,
    /// Only queues whose ACL was set; a queue without an entry has no stored policies.
    queue_acls: HashMap<QueueKey, Versioned<SignedIdentifiers>>,
    /// What the ACL copies in `queue_acls` count against `--max-memory` (`acl_charge` each).
    acl_bytes: u64,
}

impl Default for Replicas {
    fn default() -> Self {
        Replicas {
            default_service_properties: Arc::new(ServiceProperties::default()),
            service_properties: HashMap::new(),
            queue_acls: HashMap::new(),
            acl_bytes: 0,
        }
    }
}

/// What one shard's copy of `queue`'s ACL counts against `--max-memory`: every shard keeps one,
/// so each counts its own. Service properties are one per account, not counted.
pub fn acl_charge(queue: &QueueKey, identifiers: &[SignedIdentifier]) -> u64 {
    let policies: usize = identifiers
        .iter()
        .map(|identifier| {
            let policy = identifier.access_policy.as_ref();
            let text = |field: Option<&Option<String>>| {
                field.and_then(Option::as_ref).map_or(0, String::len)
            };
            identifier.id.len()
                + text(policy.map(|policy| &policy.start))
                + text(policy.map(|policy| &policy.expiry))
                + text(policy.map(|policy| &policy.permission))
                + SIGNED_IDENTIFIER_OVERHEAD_BYTES
        })
        .sum();
    (QUEUE_ACL_OVERHEAD_BYTES + queue.account.len() + queue.name.len() + policies) as u64
}

impl Replicas {
    /// The properties of `account` (the defaults until it sets some).
    pub fn service_properties(&self, account: &str) -> &Arc<ServiceProperties> {
        self.service_properties
            .get(account)
            .map_or(&self.default_service_properties, |entry| &entry.value)
    }

    /// The stored access policies of `queue` and their version; `None` when it has none.
    pub fn queue_acl(&self, queue: &QueueKey) -> Option<(u64, &SignedIdentifiers)> {
        self.queue_acls
            .get(queue)
            .map(|entry| (entry.version, &entry.value))
    }

    /// What this shard's ACL copies count against `--max-memory`.
    pub fn acl_bytes(&self) -> u64 {
        self.acl_bytes
    }

    /// Stores `replica` unless this shard already has the same or a newer version of its
    /// setting. The writer applies its own replicas through here too, `written_here`.
    pub(super) fn apply(&mut self, replica: Replica, written_here: bool) {
        match replica {
            Replica::ServiceProperties {
                account,
                version,
                properties,
            } => {
                store_newer(
                    &mut self.service_properties,
                    account,
                    Versioned {
                        version,
                        value: properties,
                        written_here,
                    },
                );
            }
            Replica::QueueAcl {
                queue,
                version,
                identifiers: Some(identifiers),
            } => {
                let charge = acl_charge(&queue, &identifiers);
                let replaced = self
                    .queue_acls
                    .get(&queue)
                    .map(|entry| acl_charge(&queue, &entry.value));
                let stored = store_newer(
                    &mut self.queue_acls,
                    queue,
                    Versioned {
                        version,
                        value: identifiers,
                        written_here,
                    },
                );
                if stored {
                    self.acl_bytes = self.acl_bytes - replaced.unwrap_or(0) + charge;
                }
            }
            Replica::QueueAcl {
                queue,
                version,
                identifiers: None,
            } => {
                if let Entry::Occupied(entry) = self.queue_acls.entry(queue) {
                    if entry.get().version < version {
                        self.acl_bytes -= acl_charge(entry.key(), &entry.get().value);
                        entry.remove();
                    }
                }
            }
        }
    }

    /// Every setting this copy holds, with its version; only those this shard writes when
    /// `written_here_only` (what a snapshot records).
    pub fn entries(&self, written_here_only: bool) -> impl Iterator<Item = Replica> + '_ {
        let acls = self
            .queue_acls
            .iter()
            .filter(move |(_, entry)| entry.written_here || !written_here_only)
            .map(|(queue, entry)| Replica::QueueAcl {
                queue: queue.clone(),
                version: entry.version,
                identifiers: Some(entry.value.clone()),
            });
        let properties = self
            .service_properties
            .iter()
            .filter(move |(_, entry)| entry.written_here || !written_here_only)
            .map(|(account, entry)| Replica::ServiceProperties {
                account: account.clone(),
                version: entry.version,
                properties: entry.value.clone(),
            });
        acls.chain(properties)
    }

    /// Removes the ACL of a queue this shard owns and has just deleted; `true` if it had one,
    /// which the other shards must then forget too.
    pub(super) fn remove_queue_acl(&mut self, queue: &QueueKey) -> bool {
        match self.queue_acls.remove(queue) {
            Some(entry) => {
                self.acl_bytes -= acl_charge(queue, &entry.value);
                true
            }
            None => false,
        }
    }
}

/// Stores `versioned` under `key` unless the map has the same or a newer version; `true` if
/// stored.
fn store_newer<K: std::hash::Hash + Eq, T>(
    map: &mut HashMap<K, Versioned<T>>,
    key: K,
    versioned: Versioned<T>,
) -> bool {
    match map.entry(key) {
        Entry::Occupied(mut entry) => {
            let newer = entry.get().version < versioned.version;
            if newer {
                entry.insert(versioned);
            }
            newer
        }
        Entry::Vacant(entry) => {
            entry.insert(versioned);
            true
        }
    }
}

/// The shard that writes `account`'s service properties: a fixed function of the name, like
/// `shard_for`, so every shard sends an account's changes to the same place.
pub fn home_shard(account: &str, shards: usize) -> usize {
    shard_for(
        &QueueKey {
            account: account.to_string(),
            name: String::new(),
        },
        shards,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> QueueKey {
        QueueKey {
            account: "acct".to_string(),
            name: name.to_string(),
        }
    }

    fn acl(id: &str, version: u64, queue: &str) -> Replica {
        Replica::QueueAcl {
            queue: key(queue),
            version,
            identifiers: Some(Arc::from(vec![SignedIdentifier {
                id: id.to_string(),
                access_policy: None,
            }])),
        }
    }

    fn acl_id(replicas: &Replicas, queue: &str) -> Option<(u64, String)> {
        replicas
            .queue_acl(&key(queue))
            .map(|(version, identifiers)| (version, identifiers[0].id.clone()))
    }

    #[test]
    fn newest_version_wins_in_any_order() {
        let mut replicas = Replicas::default();
        replicas.apply(acl("second", 2, "q"), false);
        replicas.apply(acl("first", 1, "q"), false);
        assert_eq!(acl_id(&replicas, "q"), Some((2, "second".to_string())));
        replicas.apply(acl("third", 3, "q"), false);
        assert_eq!(acl_id(&replicas, "q"), Some((3, "third".to_string())));
    }

    #[test]
    fn removal_drops_older_versions_only() {
        let mut replicas = Replicas::default();
        replicas.apply(acl("kept", 5, "q"), false);
        replicas.apply(
            Replica::QueueAcl {
                queue: key("q"),
                version: 4,
                identifiers: None,
            },
            false,
        );
        assert_eq!(acl_id(&replicas, "q"), Some((5, "kept".to_string())));
        replicas.apply(
            Replica::QueueAcl {
                queue: key("q"),
                version: 6,
                identifiers: None,
            },
            false,
        );
        assert_eq!(acl_id(&replicas, "q"), None);
        // A removal of a queue this shard never heard of changes nothing.
        replicas.apply(
            Replica::QueueAcl {
                queue: key("other"),
                version: 7,
                identifiers: None,
            },
            false,
        );
        assert_eq!(acl_id(&replicas, "other"), None);
    }

    #[test]
    fn service_properties_default_then_newest() {
        let mut replicas = Replicas::default();
        assert_eq!(
            **replicas.service_properties("acct"),
            ServiceProperties::default()
        );
        let with_cors = |max_age_s, version| Replica::ServiceProperties {
            account: "acct".to_string(),
            version,
            properties: Arc::new(ServiceProperties {
                cors: vec![CorsRule {
                    allowed_origins: "*".to_string(),
                    allowed_methods: "GET".to_string(),
                    allowed_headers: String::new(),
                    exposed_headers: String::new(),
                    max_age_s,
                }],
                ..ServiceProperties::default()
            }),
        };
        replicas.apply(with_cors(20, 2), false);
        replicas.apply(with_cors(10, 1), false);
        assert_eq!(replicas.service_properties("acct").cors[0].max_age_s, 20);
        // Accounts are isolated.
        assert!(replicas.service_properties("other").cors.is_empty());
    }

    #[test]
    fn update_replaces_only_the_elements_sent() {
        let current = ServiceProperties {
            cors: vec![CorsRule {
                allowed_origins: "*".to_string(),
                allowed_methods: "GET".to_string(),
                allowed_headers: String::new(),
                exposed_headers: String::new(),
                max_age_s: 5,
            }],
            ..ServiceProperties::default()
        };
        let mut logging = current.logging.clone();
        logging.read = true;
        let updated = ServicePropertiesUpdate {
            logging: Some(logging.clone()),
            ..ServicePropertiesUpdate::default()
        }
        .applied_to(&current);
        assert_eq!(updated.logging, logging);
        assert_eq!(updated.cors, current.cors);
        let cleared = ServicePropertiesUpdate {
            cors: Some(Vec::new()),
            ..ServicePropertiesUpdate::default()
        }
        .applied_to(&updated);
        assert!(cleared.cors.is_empty());
        assert_eq!(cleared.logging, logging);
    }

    #[test]
    fn home_shard_is_stable_and_in_range() {
        for shards in [1, 2, 7] {
            let home = home_shard("devstoreaccount1", shards);
            assert!(home < shards);
            assert_eq!(home, home_shard("devstoreaccount1", shards));
        }
    }
}
