//! The queue operations of a `ShardState`: Create Queue (and the queue records behind a queue,
//! new and retired), Delete Queue and List Queues. Queue metadata, ACLs and Clear Messages are
//! applied in `state.rs`, where they take a few lines each.

use crate::error::StorageError;
use crate::limits;
use crate::queue::command::{Metadata, QueueListing, Reply};
use crate::queue::key::QueueKey;
use crate::queue::record::Record;
use crate::queue::replicas::Replica;

use super::layout::{metadata_is_canonical, queue_at, queue_charge, Queue, ShardState};

impl ShardState {
    pub(super) fn create_queue(
        &mut self,
        key: QueueKey,
        metadata: Metadata,
    ) -> Result<Reply, StorageError> {
        debug_assert!(metadata_is_canonical(&metadata));
        if let Some(&index) = self.queue_indices.get(&key) {
            return if metadata_equal(&self.queue(index).metadata, &metadata) {
                Ok(Reply::QueueExists)
            } else {
                Err(StorageError::QueueAlreadyExists)
            };
        }
        if self.queue_indices.len() >= self.queues_max {
            return Err(StorageError::ServerBusy);
        }
        self.admit_disk()?;
        self.admit_memory(queue_charge(&metadata))?;
        let index = self.new_queue_record(metadata)?;
        if self.journal.is_some() {
            self.log(&Record::<&[u8]>::QueueCreated {
                queue: index,
                key: key.clone(),
                metadata: self.queue(index).metadata.clone(),
            });
        }
        assert!(self.queue_indices.insert(key.clone(), index).is_none());
        assert!(self.queue_names.insert(key, index).is_none());
        Ok(Reply::QueueCreated)
    }

    /// Stores an empty queue with `metadata` in a free record and charges it; returns its
    /// index. Never refused for memory: Create Queue checks that first, and recovery and Clear
    /// Messages (a record for the queue while the old one is freed) must not fail for it.
    pub(super) fn new_queue_record(&mut self, metadata: Metadata) -> Result<u32, StorageError> {
        if self.queues_free.is_empty() && self.queues.len() >= self.queue_records_max {
            return Err(StorageError::ServerBusy);
        }
        self.queue_bytes += queue_charge(&metadata);
        let queue = Queue::new(metadata);
        Ok(match self.queues_free.pop() {
            Some(index) => {
                assert!(self.queues[index as usize].is_none());
                self.queues[index as usize] = Some(queue);
                index
            }
            None => {
                self.queues.push(Some(queue));
                (self.queues.len() - 1) as u32
            }
        })
    }

    /// Retires the queue record at `index`, which no name leads to any more: free at once when
    /// it holds no message, else a graveyard that `advance` empties a budget at a time (so a
    /// queue of a million messages does not stop the shard for the 150 ms freeing them takes).
    /// Its messages answer nothing from now on: receipts name the record, and a receipt for
    /// a graveyard's message does not match the live queue's index (`MessageNotFound`).
    pub(super) fn retire_queue_record(&mut self, index: u32) {
        if self.queue(index).messages_count == 0 {
            self.free_queue_record(index);
        } else {
            queue_at(&mut self.queues, index).retired = true;
            self.graveyards.push(index);
        }
    }

    /// Frees the queue record at `index` and its charge.
    pub(super) fn free_queue_record(&mut self, index: u32) {
        let queue = self.queues[index as usize]
            .take()
            .unwrap_or_else(|| panic!("queue index {index} is free"));
        self.queue_bytes -= queue_charge(&queue.metadata);
        self.queues_free.push(index);
    }

    pub(super) fn delete_queue(&mut self, key: &QueueKey) -> Result<Reply, StorageError> {
        let index = self
            .queue_indices
            .remove(key)
            .ok_or(StorageError::QueueNotFound)?;
        assert_eq!(self.queue_names.remove(key), Some(index));
        if self.journal.is_some() {
            self.log(&Record::<&[u8]>::QueueDeleted {
                queue: index,
                key: key.clone(),
            });
        }
        self.retire_queue_record(index);
        if self.replicas.remove_queue_acl(key) {
            // The other shards' copies must go too, or a new queue of this name would find them.
            return Ok(Reply::Replicate(Box::new(Replica::QueueAcl {
                queue: key.clone(),
                version: self.next_replica_version(),
                identifiers: None,
            })));
        }
        Ok(Reply::Done)
    }

    /// This shard's queues of `account` whose names start with `prefix` and are at or after
    /// `marker`, in name order, with metadata if asked: at most `results_max + 1` of them. The
    /// caller merges every shard's part, returns the first `results_max`, and if a queue is left
    /// over its name is the `NextMarker` (the marker is the first name of the next page, hence
    /// "at or after").
    pub(super) fn list_queues(
        &self,
        account: String,
        prefix: &str,
        marker: String,
        results_max: usize,
        include_metadata: bool,
    ) -> Reply {
        assert!(results_max <= limits::LIST_QUEUES_RESULTS_MAX);
        // Every name with the prefix sorts at or after the prefix itself.
        let start = QueueKey {
            account,
            name: marker.max(prefix.to_string()),
        };
        let listings = self
            .queue_names
            .range(&start..)
            .take_while(|(key, _)| key.account == start.account && key.name.starts_with(prefix))
            .take(results_max + 1)
            .map(|(key, &index)| QueueListing {
                name: key.name.clone(),
                metadata: include_metadata.then(|| self.queue(index).metadata.clone()),
            })
            .collect();
        Reply::Queues(listings)
    }
}

/// Metadata equality as Create Queue sees it: names compared case-insensitively, values exactly.
/// Both sides are in canonical order (sorted by lowercased name), so pairwise comparison suffices.
fn metadata_equal(left: &Metadata, right: &Metadata) -> bool {
    left.len() == right.len()
        && left
            .iter()
            .zip(right)
            .all(|((left_name, left_value), (right_name, right_value))| {
                left_name.eq_ignore_ascii_case(right_name) && left_value == right_value
            })
}
