//! `azq inspect-segment FILE`: a log segment in words, for a person deciding what a segment
//! recovery kept aside (`__azq__/kept/`) holds. Every record the reader accepts, one line each
//! with its offset and sequence; where and why the reading stops; and any intact records found
//! beyond that point by a search that asks nothing of the reader's rules
//! (`format::intact_records`: each byte offset whose sequence field could be one of them, tried
//! as a record), so that records a reader missed are shown, not hidden by the same mistake.

use std::fmt::Write;

use bytes::Bytes;

use super::format::{intact_records, read_segment, Ending};
use crate::queue::record::Record;

/// The description of `data`, the segment at `name`; an error when it is not a segment.
pub fn describe_segment(name: &str, data: &Bytes) -> Result<String, String> {
    let segment = read_segment(data).map_err(|why| format!("{name}: {why}"))?;
    let mut out = String::new();
    let header = segment.header;
    let _ = writeln!(
        out,
        "{name}: log segment of shard {}, first sequence {}, message-ID prefix {:#x}, {} bytes",
        header.shard,
        header.first_sequence,
        header.id_prefix,
        data.len()
    );
    let _ = writeln!(out, "{:>10} {:>20}  record", "offset", "sequence");
    for ((sequence, record), start) in segment.records.iter().zip(&segment.starts) {
        let _ = writeln!(out, "{start:>10} {sequence:>20}  {}", summary(record));
    }
    let due = header
        .first_sequence
        .saturating_add(segment.records.len() as u64);
    match &segment.ending {
        Ending::Clean => {
            let _ = writeln!(
                out,
                "the records end at offset {}: only zeros follow",
                segment.end
            );
            return Ok(out);
        }
        Ending::Torn { offset, reason } => {
            let _ = writeln!(
                out,
                "the reading stops at offset {offset} ({reason}): taken for a torn last write, \
                 nothing intact within one flush after it"
            );
        }
        Ending::Corrupt { offset, reason } => {
            let _ = writeln!(
                out,
                "the reading stops at offset {offset} ({reason}): damage, with intact records \
                 more than one flush after it"
            );
        }
    }
    let later: Vec<_> = intact_records(data, segment.end + 1, due).collect();
    if later.is_empty() {
        let _ = writeln!(out, "no intact record after it");
    } else {
        let _ = writeln!(out, "intact records after it (sequence {due} was due):");
        for (start, sequence, record, _) in later {
            let _ = writeln!(out, "{start:>10} {sequence:>20}  {}", summary(&record));
        }
    }
    Ok(out)
}

/// One record in a few words: what changed, and where.
fn summary(record: &Record) -> String {
    let text = |bytes: &Bytes| match std::str::from_utf8(&bytes[..bytes.len().min(40)]) {
        Ok(start) if bytes.len() <= 40 => format!("{start:?}"),
        Ok(start) => format!("{start:?}… ({} bytes)", bytes.len()),
        Err(_) => format!("{} bytes", bytes.len()),
    };
    match record {
        Record::QueueCreated {
            queue,
            key,
            metadata,
        } => format!(
            "queue created: {}/{} in record {queue}, {} metadata pairs",
            key.account,
            key.name,
            metadata.len()
        ),
        Record::QueueMetadataSet { queue, metadata } => {
            format!("metadata set: record {queue}, {} pairs", metadata.len())
        }
        Record::QueueDeleted { queue, key } => {
            format!(
                "queue deleted: {}/{} in record {queue}",
                key.account, key.name
            )
        }
        Record::QueueCleared {
            queue, moved_to, ..
        } => format!("queue cleared: record {queue} moved to {moved_to}"),
        Record::MessagePut(message) => format!(
            "message put: queue record {}, slot {}.{}, insertion sequence {}, text {}",
            message.queue,
            message.slot,
            message.generation,
            message.sequence,
            text(&message.text)
        ),
        Record::MessageNamed(message) => format!(
            "a snapshot's entry, never a log record: slot {}.{}, its text in {:?}",
            message.slot, message.generation, message.text.locator
        ),
        Record::PutsNamed { segment, puts } => format!(
            "a snapshot's entry, never a log record: {} put record(s) in the log segment {}",
            puts.len(),
            super::format::segment_name(*segment)
        ),
        Record::MessageLeased {
            slot,
            generation,
            dequeue_count,
            ..
        } => format!("message leased: slot {slot}.{generation}, dequeue count {dequeue_count}"),
        Record::MessageUpdated {
            slot,
            generation,
            text: new_text,
            ..
        } => format!(
            "message updated: slot {slot}.{generation}{}",
            new_text
                .as_ref()
                .map_or_else(String::new, |new_text| format!(", text {}", text(new_text)))
        ),
        Record::MessageDeleted { slot, generation } => {
            format!("message deleted: slot {slot}.{generation}")
        }
        Record::AclSet {
            key,
            version,
            identifiers,
        } => format!(
            "access policies set: {}/{}, version {version}, {} identifiers",
            key.account,
            key.name,
            identifiers.len()
        ),
        Record::PropertiesSet {
            account, version, ..
        } => format!("service properties set: {account}, version {version}"),
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::limits::STORAGE_BLOCK_BYTES;
    use crate::queue::record::encode;
    use crate::queue::QueueKey;
    use crate::storage::format::segment_header;

    fn created(queue: u32) -> Record {
        Record::QueueCreated {
            queue,
            key: QueueKey {
                account: "devstoreaccount1".to_string(),
                name: format!("queue-{queue}"),
            },
            metadata: Vec::new(),
        }
    }

    #[test]
    fn a_segment_is_described_record_by_record_with_what_follows_its_end() {
        let mut data: BytesMut = segment_header(0, 0xab, 7);
        encode(&created(1), 7, &mut data);
        // A flush padded to its block, then one more.
        data.resize(2 * STORAGE_BLOCK_BYTES, 0);
        encode(&created(2), 8, &mut data);
        let clean_end = data.len();
        data.resize(4 * STORAGE_BLOCK_BYTES, 0);
        let clean = describe_segment("wal", &data.clone().freeze()).unwrap();
        assert!(
            clean.contains("first sequence 7, message-ID prefix 0xab"),
            "{clean}"
        );
        assert!(
            clean.contains(
                "      4096                    7  queue created: devstoreaccount1/queue-1"
            ),
            "{clean}"
        );
        assert!(
            clean.contains("      8192                    8  queue created"),
            "{clean}"
        );
        assert!(
            clean.contains(&format!("the records end at offset {clean_end}")),
            "{clean}"
        );
        // A damaged record, with an intact one after it.
        let third = 3 * STORAGE_BLOCK_BYTES;
        let mut damaged = data.clone();
        damaged[clean_end..clean_end + 3].copy_from_slice(&[9, 9, 9]);
        let mut later = BytesMut::new();
        encode(&created(4), 10, &mut later);
        damaged[third..third + later.len()].copy_from_slice(&later);
        let text = describe_segment("wal", &damaged.freeze()).unwrap();
        assert!(
            text.contains(&format!("the reading stops at offset {clean_end}")),
            "{text}"
        );
        assert!(
            text.contains("intact records after it (sequence 9 was due):"),
            "{text}"
        );
        assert!(
            text.contains("     12288                   10  queue created"),
            "{text}"
        );
        assert!(describe_segment("x", &Bytes::from_static(b"not a segment")).is_err());
    }

    /// Found by review: a header naming the largest sequence overflowed the sequence due.
    #[test]
    fn a_segment_at_the_largest_sequence_is_described() {
        let mut data: BytesMut = segment_header(0, 1, u64::MAX);
        encode(&created(1), u64::MAX, &mut data);
        data.resize(3 * STORAGE_BLOCK_BYTES, 0);
        let text = describe_segment("wal", &data.freeze()).unwrap();
        assert!(
            text.contains(&format!("{}  queue created", u64::MAX)),
            "{text}"
        );
    }
}
