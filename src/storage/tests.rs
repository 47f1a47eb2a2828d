//! Deterministic simulation of durability: a shard's state, its log and snapshots on a
//! simulated disk that keeps only what was synced, tears the last write at a crash and fills
//! what it tore with garbage; random commands, flushes and snapshot steps in random order,
//! crashes at random points, recovery after each. After every crash:
//!
//! - every change the log acknowledged (a flush covering its records completed) is there;
//! - every queue, message and setting is in a state it had at some point since its last
//!   acknowledged change: a change not acknowledged may or may not be there, never half of it;
//! - a pop receipt handed out before the crash for a message the recovered state still leases
//!   with the same lease deletes it.
//!
//! Bit flips in acknowledged data are checked separately: recovery names the damage and refuses
//! to start, or cuts the log there when asked to.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::files::{data_directory, Disk, Files};
use super::log::{Log, SnapshotJob};
use super::recovery::{recover, RecoveryOptions};
use crate::error::StorageError;
use crate::queue::replicas::home_shard;
use crate::queue::state::{Described, DescribedMessage};
use crate::queue::{
    shard_for, Command, MessageId, PopReceipt, QueueKey, Reply, ServicePropertiesUpdate,
    ShardState, SignedIdentifier,
};
use crate::random::SplitMix64;
use crate::storage::log::Durability;

/// 2026-11-22T00:00:00Z.
const NOW_MS: u64 = 1_795_305_600_000;

/// One simulated file: what the device holds, what the page cache holds, and the writes since
/// the last sync, in order.
#[derive(Clone, Debug, Default)]
struct SimFile {
    durable: Vec<u8>,
    current: Vec<u8>,
    unsynced: Vec<(u64, Vec<u8>)>,
}

/// A file system in memory whose data is durable only once synced. Names (create, rename,
/// remove) are durable at once, as on a journaling file system that orders metadata.
#[derive(Clone, Default)]
struct SimDisk {
    files: Rc<RefCell<BTreeMap<PathBuf, SimFile>>>,
    directories: Rc<RefCell<BTreeSet<PathBuf>>>,
}

fn write_into(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[offset as usize..end].copy_from_slice(bytes);
}

impl SimDisk {
    /// A crash: each file keeps what was synced, plus the unsynced writes the device happened
    /// to complete (a random number of them, in order) and a torn part of the next one, whose
    /// bytes may be garbage.
    fn crash(&self, random: &mut SplitMix64) {
        for file in self.files.borrow_mut().values_mut() {
            let writes = std::mem::take(&mut file.unsynced);
            let completed = (random.next_u64() % (writes.len() as u64 + 1)) as usize;
            for (offset, bytes) in &writes[..completed] {
                write_into(&mut file.durable, *offset, bytes);
            }
            if let Some((offset, bytes)) = writes.get(completed) {
                let torn = (random.next_u64() % (bytes.len() as u64 + 1)) as usize;
                let mut part = bytes[..torn].to_vec();
                if random.next_u64() % 2 == 0 {
                    for byte in part.iter_mut().skip(torn / 2) {
                        *byte = random.next_u64() as u8;
                    }
                }
                write_into(&mut file.durable, *offset, &part);
            }
            file.current = file.durable.clone();
        }
    }

    /// Flips one bit of the durable (synced) bytes of `path` at `offset`.
    fn flip(&self, path: &Path, offset: usize) {
        let mut files = self.files.borrow_mut();
        let file = files.get_mut(path).expect("the file exists");
        file.durable[offset] ^= 0x10;
        file.current = file.durable.clone();
    }
}

impl Files for SimDisk {
    fn list(&self, directory: &Path) -> io::Result<Vec<String>> {
        let mut names = BTreeSet::new();
        let children = self
            .files
            .borrow()
            .keys()
            .cloned()
            .chain(self.directories.borrow().iter().cloned())
            .collect::<Vec<_>>();
        for path in children {
            if path.parent() == Some(directory) {
                names.insert(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        Ok(names.into_iter().collect())
    }

    fn read(&self, path: &Path) -> io::Result<Bytes> {
        self.files
            .borrow()
            .get(path)
            .map(|file| Bytes::from(file.current.clone()))
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    fn write_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.files.borrow_mut().insert(
            path.to_path_buf(),
            SimFile {
                durable: bytes.to_vec(),
                current: bytes.to_vec(),
                unsynced: Vec::new(),
            },
        );
        Ok(())
    }

    fn truncate(&self, path: &Path, length: u64) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let file = files.get_mut(path).ok_or(io::ErrorKind::NotFound)?;
        file.current.truncate(length as usize);
        file.durable = file.current.clone();
        file.unsynced.clear();
        Ok(())
    }

    fn create_directories(&self, directory: &Path) -> io::Result<()> {
        let mut directories = self.directories.borrow_mut();
        for ancestor in directory.ancestors() {
            directories.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let file = files.remove(from).ok_or(io::ErrorKind::NotFound)?;
        files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.files
            .borrow_mut()
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    fn remove_directory(&self, path: &Path) -> io::Result<()> {
        self.files
            .borrow_mut()
            .retain(|file, _| !file.starts_with(path));
        self.directories
            .borrow_mut()
            .retain(|directory| !directory.starts_with(path));
        Ok(())
    }

    fn sync_directory(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

impl Disk for SimDisk {
    type File = PathBuf;

    /// Preallocation is not simulated: the zeros it would give read like the end of the file.
    async fn create(&self, path: &Path, _bytes: u64) -> io::Result<PathBuf> {
        self.files
            .borrow_mut()
            .insert(path.to_path_buf(), SimFile::default());
        Ok(path.to_path_buf())
    }

    async fn write_at(&self, file: &PathBuf, offset: u64, blocks: &[u8]) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let file = files.get_mut(file).ok_or(io::ErrorKind::NotFound)?;
        write_into(&mut file.current, offset, blocks);
        file.unsynced.push((offset, blocks.to_vec()));
        Ok(())
    }

    async fn sync(&self, file: &PathBuf) -> io::Result<()> {
        let mut files = self.files.borrow_mut();
        let file = files.get_mut(file).ok_or(io::ErrorKind::NotFound)?;
        file.durable = file.current.clone();
        file.unsynced.clear();
        Ok(())
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        Files::rename(self, from, to)
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        Files::remove_file(self, path)
    }
}

/// What a queue or a message was after each change: `(change index, value)`.
type History<T> = Vec<(usize, Option<T>)>;

/// The states every object of the shard has been in, change by change.
#[derive(Default)]
struct Histories {
    queues: BTreeMap<QueueKey, History<crate::queue::Metadata>>,
    messages: BTreeMap<MessageId, History<DescribedMessage>>,
    acls: BTreeMap<QueueKey, History<Vec<SignedIdentifier>>>,
    properties: BTreeMap<String, History<crate::queue::ServiceProperties>>,
}

fn record_changes<K: Ord + Clone, T: Clone + PartialEq>(
    histories: &mut BTreeMap<K, History<T>>,
    now: &BTreeMap<K, T>,
    change: usize,
) {
    let keys: BTreeSet<K> = histories.keys().chain(now.keys()).cloned().collect();
    for key in keys {
        let history = histories.entry(key.clone()).or_default();
        let value = now.get(&key).cloned();
        if history.last().map(|(_, last)| last) != Some(&value) {
            history.push((change, value));
        }
    }
}

/// Checks one kind of object of a recovered state: each is in a state it had at the last
/// acknowledged change (`acknowledged`: the index of the last change whose records were
/// durable) or after it.
fn check_kind<K: Ord + Clone + std::fmt::Debug, T: Clone + PartialEq + std::fmt::Debug>(
    what: &str,
    histories: &BTreeMap<K, History<T>>,
    recovered: &BTreeMap<K, T>,
    acknowledged: Option<usize>,
    seed: u64,
) {
    let keys: BTreeSet<&K> = histories.keys().chain(recovered.keys()).collect();
    for key in keys {
        let found = recovered.get(key).cloned();
        let history = histories.get(key).map(Vec::as_slice).unwrap_or(&[]);
        // The value it had when the last acknowledged change was made, and every one since.
        let since = history.iter().rposition(|(change, _)| {
            acknowledged.is_some_and(|acknowledged| *change <= acknowledged)
        });
        let mut allowed: Vec<Option<T>> = match since {
            Some(at) => history[at..]
                .iter()
                .map(|(_, value)| value.clone())
                .collect(),
            None => std::iter::once(None)
                .chain(history.iter().map(|(_, value)| value.clone()))
                .collect(),
        };
        allowed.dedup();
        assert!(
            allowed.contains(&found),
            "seed {seed}: {what} {key:?} recovered as {found:?}, allowed {allowed:?}"
        );
    }
}

/// A receipt a reply handed out, with the message and queue.
#[derive(Clone, Copy)]
struct Issued {
    queue: usize,
    id: MessageId,
    receipt: PopReceipt,
}

const QUEUES: [&str; 3] = ["orders", "audit-log", "q-3"];

fn key(queue: usize) -> QueueKey {
    QueueKey {
        account: "devstoreaccount1".to_string(),
        name: QUEUES[queue].to_string(),
    }
}

/// A random command, with receipts handed out earlier to pick from.
fn command(random: &mut SplitMix64, issued: &[Issued]) -> Command {
    let mut pick = |count: u64| random.next_u64() % count;
    let queue = pick(QUEUES.len() as u64) as usize;
    match pick(20) {
        0..=1 => Command::CreateQueue {
            queue: key(queue),
            metadata: Vec::new(),
        },
        2 => Command::DeleteQueue { queue: key(queue) },
        3 => Command::SetQueueMetadata {
            queue: key(queue),
            metadata: vec![("Round".to_string(), pick(5).to_string())],
        },
        4..=9 => Command::PutMessage {
            queue: key(queue),
            text: Bytes::from(format!(
                "message {} {}",
                pick(1000),
                "x".repeat(pick(3000) as usize)
            )),
            visibility_timeout_s: if pick(4) == 0 { 60 } else { 0 },
            ttl_s: Some(86_400),
        },
        10..=12 => Command::GetMessages {
            queue: key(queue),
            count: 1 + pick(3) as u32,
            visibility_timeout_s: 30,
        },
        13..=15 if !issued.is_empty() => {
            let chosen = issued[pick(issued.len() as u64) as usize];
            Command::DeleteMessage {
                queue: key(chosen.queue),
                message_id: chosen.id,
                pop_receipt: chosen.receipt,
            }
        }
        16 if !issued.is_empty() => {
            let chosen = issued[pick(issued.len() as u64) as usize];
            Command::UpdateMessage {
                queue: key(chosen.queue),
                message_id: chosen.id,
                pop_receipt: chosen.receipt,
                visibility_timeout_s: pick(2) * 45,
                text: (pick(2) == 0).then(|| Bytes::from(format!("updated {}", pick(100)))),
            }
        }
        17 => Command::ClearMessages { queue: key(queue) },
        18 => Command::SetQueueAcl {
            queue: key(queue),
            identifiers: vec![SignedIdentifier {
                id: format!("policy-{}", pick(3)),
                access_policy: None,
            }],
        },
        _ => Command::SetServiceProperties {
            account: "devstoreaccount1".to_string(),
            update: Box::new(ServicePropertiesUpdate {
                cors: Some(Vec::new()),
                ..ServicePropertiesUpdate::default()
            }),
        },
    }
}

/// The receipts a reply hands out.
fn receipts(command: &Command, reply: &Result<Reply, StorageError>) -> Vec<Issued> {
    let Some(queue) = command.queue() else {
        return Vec::new();
    };
    let queue = QUEUES
        .iter()
        .position(|name| *name == queue.name)
        .expect("a known queue");
    match reply {
        Ok(Reply::Messages(views)) => views
            .iter()
            .filter_map(|view| {
                Some(Issued {
                    queue,
                    id: view.message_id,
                    receipt: view.pop_receipt?,
                })
            })
            .collect(),
        Ok(Reply::Updated { pop_receipt, .. }) => match command {
            Command::UpdateMessage { message_id, .. } => vec![Issued {
                queue,
                id: *message_id,
                receipt: *pop_receipt,
            }],
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn new_seed(random: &mut SplitMix64) -> impl FnMut(usize) -> u64 + '_ {
    move |_| random.next_u64()
}

/// Runs `future`, whose simulated I/O is always ready, to completion.
fn run<T>(future: impl std::future::Future<Output = T>) -> T {
    futures_lite::future::block_on(future)
}

fn simulate(seed: u64, rounds: usize, steps: usize) {
    let mut random = SplitMix64::new(seed);
    let disk = SimDisk::default();
    let root = data_directory(Path::new("/data"));
    let mut histories = Histories::default();
    let mut change = 0usize;
    // The change index each log sequence was emitted by: which changes a flush acknowledges.
    let mut change_of_sequence: BTreeMap<u64, usize> = BTreeMap::new();
    let mut acknowledged: Option<usize> = None;
    let mut issued: Vec<Issued> = Vec::new();
    for round in 0..rounds {
        let mut seeds = SplitMix64::new(random.next_u64());
        let recovered = recover(
            &disk,
            &root,
            1,
            NOW_MS,
            &mut new_seed(&mut seeds),
            RecoveryOptions::default(),
        )
        .unwrap_or_else(|why| panic!("seed {seed} round {round}: recovery failed: {why}"));
        let start = recovered.shards.into_iter().next().expect("one shard");
        let described: Described = start.state.describe(NOW_MS);
        check_kind(
            "queue",
            &histories.queues,
            &described.queues,
            acknowledged,
            seed,
        );
        check_kind(
            "message",
            &histories.messages,
            &described.messages,
            acknowledged,
            seed,
        );
        check_kind("ACL", &histories.acls, &described.acls, acknowledged, seed);
        check_kind(
            "properties",
            &histories.properties,
            &described.properties,
            acknowledged,
            seed,
        );
        // From here on, the recovered state is the truth: what the crash lost is gone.
        record_changes(&mut histories.queues, &described.queues, change);
        record_changes(&mut histories.messages, &described.messages, change);
        record_changes(&mut histories.acls, &described.acls, change);
        record_changes(&mut histories.properties, &described.properties, change);
        acknowledged = Some(change);
        change += 1;
        change_of_sequence.clear();

        // Small segments, so that they fill, rotate and go within a few commands.
        let log = Log::new(disk.clone(), &start, 0, Durability::Fsync).with_segment_bytes(16 << 10);
        let state = RefCell::new(start.state);
        // A receipt handed out before the crash still works on the message it names, when the
        // recovered message is in the lease that receipt belongs to.
        let valid = issued.iter().rev().copied().find(|issued| {
            described
                .messages
                .get(&issued.id)
                .is_some_and(|message| message.6 == issued.receipt.lease)
        });
        if let Some(valid) = valid {
            let before = state.borrow().journal_next_sequence().unwrap();
            let deleted = state.borrow_mut().apply(
                Command::DeleteMessage {
                    queue: key(valid.queue),
                    message_id: valid.id,
                    pop_receipt: valid.receipt,
                },
                NOW_MS,
            );
            assert!(
                matches!(deleted, Ok(Reply::Done)),
                "seed {seed}: {deleted:?}"
            );
            let described = state.borrow().describe(NOW_MS);
            record_changes(&mut histories.messages, &described.messages, change);
            change_of_sequence.insert(before, change);
            change += 1;
        }
        let mut snapshot: Option<SnapshotJob<SimDisk>> = None;
        for _ in 0..steps {
            match random.next_u64() % 10 {
                0..=5 => {
                    let command = command(&mut random, &issued);
                    let before = state.borrow().journal_next_sequence().unwrap();
                    let reply = state.borrow_mut().apply(command.clone(), NOW_MS);
                    let after = state.borrow().journal_next_sequence().unwrap();
                    if std::env::var("SIM_TRACE").is_ok() {
                        eprintln!(
                            "change {change} seq {before}..{after}: {:?} -> {:?}",
                            match &command {
                                Command::PutMessage { queue, .. } => format!("Put {}", queue.name),
                                other => format!("{other:?}").chars().take(120).collect(),
                            },
                            reply.as_ref().map(|_| ())
                        );
                    }
                    issued.extend(receipts(&command, &reply));
                    if issued.len() > 64 {
                        issued.remove(0);
                    }
                    let described = state.borrow().describe(NOW_MS);
                    record_changes(&mut histories.queues, &described.queues, change);
                    record_changes(&mut histories.messages, &described.messages, change);
                    record_changes(&mut histories.acls, &described.acls, change);
                    record_changes(&mut histories.properties, &described.properties, change);
                    for sequence in before..after {
                        change_of_sequence.insert(sequence, change);
                    }
                    change += 1;
                }
                6..=7 => {
                    run(log.flush(&state)).expect("simulated writes do not fail");
                    if std::env::var("SIM_TRACE").is_ok() {
                        eprintln!("flush: durable {:?}", log.durable_sequence());
                    }
                    if let Some(durable) = log.durable_sequence() {
                        if let Some((_, &last)) = change_of_sequence.range(..=durable).next_back() {
                            acknowledged = Some(acknowledged.map_or(last, |known| known.max(last)));
                        }
                    }
                    if snapshot.is_none() && random.next_u64() % 3 == 0 {
                        snapshot = Some(run(log.start_snapshot(&state)).expect("started"));
                    }
                }
                _ => {
                    if let Some(job) = &mut snapshot {
                        if std::env::var("SIM_TRACE").is_ok() {
                            eprintln!("snapshot step");
                        }
                        if run(job.step(&log, &state)).expect("simulated writes do not fail") {
                            snapshot = None;
                        }
                    }
                }
            }
        }
        if std::env::var("SIM_TRACE").is_ok() {
            eprintln!("crash");
        }
        disk.crash(&mut random);
    }
}

#[test]
fn every_acknowledged_change_survives_every_crash() {
    for seed in 0..100 {
        simulate(seed, 6, 150);
    }
}

#[test]
fn damage_before_the_tail_is_named_and_can_be_cut() {
    let disk = SimDisk::default();
    let root = data_directory(Path::new("/data"));
    let mut seeds = SplitMix64::new(1);
    let start = recover(
        &disk,
        &root,
        1,
        NOW_MS,
        &mut new_seed(&mut seeds),
        RecoveryOptions::default(),
    )
    .unwrap()
    .shards
    .into_iter()
    .next()
    .unwrap();
    let log = Log::new(disk.clone(), &start, 0, Durability::Fsync);
    let state = RefCell::new(start.state);
    let _ = state.borrow_mut().apply(
        Command::CreateQueue {
            queue: key(0),
            metadata: Vec::new(),
        },
        NOW_MS,
    );
    // Many acknowledged records, flushed one by one: far more than one flush's reach.
    for round in 0..1200 {
        let _ = state.borrow_mut().apply(
            Command::PutMessage {
                queue: key(0),
                text: Bytes::from(vec![b'a'; 4000 + round % 7]),
                visibility_timeout_s: 0,
                ttl_s: None,
            },
            NOW_MS,
        );
        run(log.flush(&state)).unwrap();
    }
    let segment = disk
        .files
        .borrow()
        .keys()
        .find(|path| path.extension().is_some_and(|extension| extension == "log"))
        .cloned()
        .unwrap();
    // A bit flipped in an early record.
    disk.flip(&segment, 4096 + 300);
    let refused = recover(
        &disk,
        &root,
        1,
        NOW_MS,
        &mut new_seed(&mut seeds),
        RecoveryOptions::default(),
    )
    .err()
    .expect("damage with acknowledged records after it refuses to start");
    // The damaged record is the one holding byte 4396 (the first after the queue's).
    let offset: usize = refused
        .split("damaged log at offset ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(
        refused.starts_with(&segment.display().to_string()) && (4096..=4396).contains(&offset),
        "{refused}"
    );
    let cut = recover(
        &disk,
        &root,
        1,
        NOW_MS,
        &mut new_seed(&mut seeds),
        RecoveryOptions {
            truncate_corrupt: true,
        },
    )
    .expect("--truncateCorruptLog cuts the log at the damage");
    let at = format!("offset {offset} ");
    assert!(
        cut.notes.iter().any(|note| note.contains(&at)),
        "{:?}",
        cut.notes
    );
    // The queue came before the damage; the messages after it are lost, as the flag says.
    let described = cut.shards[0].state.describe(NOW_MS);
    assert!(described.queues.contains_key(&key(0)));
    assert!(described.messages.is_empty());
}

/// The shard that runs `command` among `shards`: the queue's owner, or the account's home shard.
fn owner(command: &Command, shards: usize) -> usize {
    match command {
        Command::SetServiceProperties { account, .. } => home_shard(account, shards),
        other => shard_for(other.queue().expect("a queue command"), shards),
    }
}

/// Applies `command` as the runtime does: on its owner, and a replica it answers on every other
/// shard.
fn apply_routed(states: &[RefCell<ShardState>], command: Command) -> Result<Reply, StorageError> {
    let shard = owner(&command, states.len());
    let reply = states[shard].borrow_mut().apply(command, NOW_MS);
    if let Ok(Reply::Replicate(replica)) = &reply {
        for (other, state) in states.iter().enumerate() {
            if other != shard {
                let stored = state
                    .borrow_mut()
                    .apply(Command::ApplyReplica((**replica).clone()), NOW_MS);
                assert!(stored.is_ok(), "{stored:?}");
            }
        }
    }
    reply
}

#[test]
fn a_change_of_shard_count_keeps_every_queue_message_setting_and_receipt() {
    let disk = SimDisk::default();
    let root = data_directory(Path::new("/data"));
    let mut random = SplitMix64::new(11);
    let mut issued: Vec<Issued> = Vec::new();
    let mut before: Option<Described> = None;
    for shards in [1, 3, 3, 2, 1] {
        let mut seeds = SplitMix64::new(random.next_u64());
        let recovered = recover(
            &disk,
            &root,
            shards,
            NOW_MS,
            &mut new_seed(&mut seeds),
            RecoveryOptions::default(),
        )
        .unwrap_or_else(|why| panic!("recovery into {shards} shards failed: {why}"));
        assert_eq!(recovered.shards.len(), shards);
        // Each queue and message is on the shard that owns it now; the settings on every one.
        let mut merged = Described::default();
        for (shard, start) in recovered.shards.iter().enumerate() {
            let described = start.state.describe(NOW_MS);
            for key in described.queues.keys() {
                assert_eq!(shard_for(key, shards), shard, "{key:?} on shard {shard}");
            }
            for (queue, ..) in described.messages.values() {
                assert_eq!(shard_for(queue, shards), shard, "a message of {queue:?}");
            }
            merged.queues.extend(described.queues);
            merged.messages.extend(described.messages);
            if shard == 0 {
                merged.acls = described.acls;
                merged.properties = described.properties;
            } else {
                assert_eq!(described.acls, merged.acls, "shard {shard}'s ACL replicas");
                assert_eq!(
                    described.properties, merged.properties,
                    "shard {shard}'s properties"
                );
            }
        }
        if let Some(before) = &before {
            assert_eq!(merged.queues, before.queues, "queues into {shards} shards");
            assert_eq!(
                merged.messages, before.messages,
                "messages into {shards} shards"
            );
            assert_eq!(merged.acls, before.acls, "ACLs into {shards} shards");
            assert_eq!(merged.properties, before.properties);
        }

        let logs: Vec<Log<SimDisk>> = recovered
            .shards
            .iter()
            .enumerate()
            .map(|(shard, start)| {
                Log::new(disk.clone(), start, shard as u32, Durability::Fsync)
                    .with_segment_bytes(16 << 10)
            })
            .collect();
        let states: Vec<RefCell<ShardState>> = recovered
            .shards
            .into_iter()
            .map(|start| RefCell::new(start.state))
            .collect();
        // Receipts handed out by the old shards still work on the new owners: update one to
        // stay leased (so the next layout gets leased messages too), delete the others.
        let valid: Vec<Issued> = issued
            .iter()
            .copied()
            .filter(|issued| {
                merged
                    .messages
                    .get(&issued.id)
                    .is_some_and(|message| message.6 == issued.receipt.lease)
            })
            .collect();
        issued.clear();
        for (n, valid) in valid.iter().enumerate() {
            let command = if n == 0 {
                Command::UpdateMessage {
                    queue: key(valid.queue),
                    message_id: valid.id,
                    pop_receipt: valid.receipt,
                    visibility_timeout_s: 60,
                    text: Some(Bytes::from_static(b"moved")),
                }
            } else {
                Command::DeleteMessage {
                    queue: key(valid.queue),
                    message_id: valid.id,
                    pop_receipt: valid.receipt,
                }
            };
            let reply = apply_routed(&states, command.clone());
            assert!(reply.is_ok(), "{command:?} after resharding: {reply:?}");
            issued.extend(receipts(&command, &reply));
        }
        for _ in 0..120 {
            let command = command(&mut random, &issued);
            let reply = apply_routed(&states, command.clone());
            issued.extend(receipts(&command, &reply));
        }
        for (log, state) in logs.iter().zip(&states) {
            while run(log.flush(state)).expect("simulated writes do not fail") {}
        }
        let mut now = Described::default();
        for state in &states {
            let described = state.borrow().describe(NOW_MS);
            now.queues.extend(described.queues);
            now.messages.extend(described.messages);
            now.acls = described.acls;
            now.properties = described.properties;
        }
        assert!(
            shards == 1 || !now.messages.is_empty(),
            "the run leaves messages to move"
        );
        before = Some(now);
    }
}

/// A crash after a new segment's header was synced and before any record in it: recovery
/// removes that empty segment rather than listing it, so the next server's segment of the same
/// name is never deleted later as one a snapshot covers (records written into it would go).
#[test]
fn an_empty_last_segment_is_removed_not_listed() {
    let disk = SimDisk::default();
    let root = data_directory(Path::new("/data"));
    let mut seeds = SplitMix64::new(7);
    let recover_now = |seeds: &mut SplitMix64| {
        recover(
            &disk,
            &root,
            1,
            NOW_MS,
            &mut new_seed(seeds),
            RecoveryOptions::default(),
        )
        .expect("recovered")
    };
    let start = recover_now(&mut seeds).shards.into_iter().next().unwrap();
    let directory = start.directory.clone();
    let log = Log::new(disk.clone(), &start, 0, Durability::Fsync);
    let state = RefCell::new(start.state);
    for command in [
        Command::CreateQueue {
            queue: key(0),
            metadata: Vec::new(),
        },
        Command::PutMessage {
            queue: key(0),
            text: Bytes::from_static(b"kept"),
            visibility_timeout_s: 0,
            ttl_s: None,
        },
    ] {
        state.borrow_mut().apply(command, NOW_MS).expect("applied");
    }
    run(log.flush(&state)).expect("flushed");
    let next = state.borrow().journal_next_sequence().unwrap();
    let id_prefix = state.borrow().identity().id_prefix;
    let empty = directory.join(super::format::segment_name(next));
    disk.write_synced(&empty, &super::format::segment_header(0, id_prefix, next))
        .unwrap();
    drop(log);

    let recovered = recover_now(&mut seeds);
    let start = &recovered.shards[0];
    assert!(!disk
        .list(&directory)
        .unwrap()
        .contains(&super::format::segment_name(next)));
    assert!(start.segments.iter().all(|segment| segment.path != empty));
    assert_eq!(start.state.journal_next_sequence(), Some(next));
    assert_eq!(start.state.describe(NOW_MS).messages.len(), 1);
}
