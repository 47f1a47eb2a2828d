//! Every limit azq enforces, as a named constant: the ground floor of the crate, importing
//! nothing of it, so every layer can name its limits from here.
//!
//! Limits live here so that docs/ARCHITECTURE.md can list them from one place and so that relations
//! between them are checked at compile time. Units are last in every name. What a run is told
//! (the command line) is `settings`.

/// Largest request head (request line + headers + the blank line) we buffer; beyond it: 431.
pub const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most headers in one request; beyond it: 431.
pub const REQUEST_HEADERS_MAX: usize = 100;
/// Largest decoded `MessageText` (UTF-8 bytes), as Azure: beyond it 413 `RequestBodyTooLarge`.
pub const MESSAGE_TEXT_BYTES_MAX: usize = 64 * 1024;
/// Room for the `<QueueMessage><MessageText>` envelope, an XML declaration and whitespace.
pub const MESSAGE_ENVELOPE_BYTES_MAX: usize = 4 * 1024;
/// Longest XML escape of one byte of text (`&quot;` and `&apos;` are six bytes).
pub const XML_ESCAPE_BYTES_MAX: usize = 6;
/// Largest request body: a maximal message whose every byte is XML-escaped, plus its envelope.
/// Larger declared or actual bodies get 413 `RequestBodyTooLarge` without the body being read.
pub const REQUEST_BODY_BYTES_MAX: usize =
    MESSAGE_TEXT_BYTES_MAX * XML_ESCAPE_BYTES_MAX + MESSAGE_ENVELOPE_BYTES_MAX;
/// Most messages one Get or Peek returns (`numofmessages`).
pub const MESSAGES_PER_GET_MAX: u32 = 32;
/// Longest visibility timeout, seconds (7 days), for Put, Get and Update.
pub const VISIBILITY_TIMEOUT_S_MAX: u64 = 604_800;
/// Visibility timeout of Get Messages when the client sends none, seconds.
pub const GET_VISIBILITY_TIMEOUT_S_DEFAULT: u64 = 30;
/// Time to live of a message when the client sends no `messagettl`, seconds (7 days).
pub const MESSAGE_TTL_S_DEFAULT: u64 = 604_800;
/// Total bytes of one queue's metadata (names + values), as Azure: beyond it 400
/// `MetadataTooLarge`.
pub const METADATA_BYTES_MAX: usize = 8 * 1024;
/// Most queues List Queues returns in one page (`maxresults`, also the default).
pub const LIST_QUEUES_RESULTS_MAX: usize = 5000;
/// Most queues one shard holds; beyond it Create Queue answers 503 `ServerBusy`.
pub const QUEUES_PER_SHARD_MAX: usize = 1_000_000;
/// Open connections one shard serves at once; beyond it a new connection gets 503 and is closed.
pub const CONNECTIONS_PER_SHARD_MAX_DEFAULT: usize = 16 * 1024;
/// Most shards (cores) one server runs.
pub const SHARDS_MAX: usize = 256;
/// What each stored message costs beyond its text in `--max-memory` accounting: its 80-byte slab
/// slot, 16-byte timer node and the text allocation's bookkeeping (measured: about 125 bytes).
pub const MESSAGE_OVERHEAD_BYTES: usize = 128;
/// What each queue record costs in `--max-memory` accounting beyond its metadata's text: the
/// record, its name twice (the lookup map and the name-ordered index) and the maps' entries.
pub const QUEUE_OVERHEAD_BYTES: usize = 512;
/// What each metadata pair costs beyond its name's and value's bytes: two `String`s.
pub const METADATA_PAIR_OVERHEAD_BYTES: usize = 64;
/// What each shard's copy of a queue's stored access policies (ACL) costs in `--max-memory`
/// accounting beyond its text: the map entry, the queue's name, the version and the shared list.
pub const QUEUE_ACL_OVERHEAD_BYTES: usize = 256;
/// What each signed identifier of an ACL copy costs beyond its id's, times' and permission's
/// bytes: its `String`s and `Option`s.
pub const SIGNED_IDENTIFIER_OVERHEAD_BYTES: usize = 128;
/// `--max-memory` when the machine's memory cannot be read (the default is half of it), bytes.
pub const MESSAGE_BYTES_MAX_FALLBACK: u64 = 4 << 30;
/// Connections each shard's listener queues before the shard accepts them.
pub const LISTEN_BACKLOG: u32 = 1024;
/// How long a start waits for a port another socket listens on (EADDRINUSE) before it gives
/// up, ms: a server killed a moment ago on the io_uring backend keeps its listening socket
/// until the kernel has torn its rings down (5 to 16 ms measured here), so a restart right
/// after `kill -9` found its port taken.
pub const LISTEN_ADDRESS_WAIT_MS: u64 = 1000;
/// Capacity of each cross-shard request and reply channel; a full channel makes the sender wait.
pub const MESH_CHANNEL_CAPACITY: usize = 1024;
/// Time allowed for a request head to arrive once its first byte has (slow-header defence), ms.
pub const REQUEST_HEAD_TIMEOUT_MS: u64 = 10_000;
/// Time an idle keep-alive connection is kept open, ms.
pub const IDLE_CONNECTION_TIMEOUT_MS: u64 = 120_000;
/// How often a shard checks the deadlines of its waiting reads (`runtime::deadline`): a read
/// timeout (the two above, a TLS handshake's, a PROXY header's) fires up to this late (plus
/// however late a busy shard runs that one check), never early, ms.
pub const READ_DEADLINE_SWEEP_MS: u64 = 100;
/// The unit of every write to a log segment or snapshot (O_DIRECT on io_uring needs writes
/// aligned to the device's blocks), bytes; also the size of a segment's header block.
pub const STORAGE_BLOCK_BYTES: usize = 4096;
/// Most bytes of records one group-commit flush writes; more wait for the next flush. Also the
/// reach of a torn write: an invalid record followed by valid ones further than this is
/// corruption, not a cut-short last write.
pub const LOG_FLUSH_BYTES_MAX: usize = 4 << 20;
/// Longest group commit holds its next flush for the clients the last one acknowledged once one
/// has come back and no other has since (`storage::hold`): returning clients come back to back,
/// an open loop's requests are spaced by its rate, µs.
pub const LOG_FLUSH_HOLD_GAP_US: u64 = 50;
/// How long group commit waits for the first client a flush acknowledged to come back, per
/// record that flush acknowledged, beyond `LOG_FLUSH_HOLD_GAP_US`: the shard answers the whole
/// batch before it reads the next requests, µs.
pub const LOG_FLUSH_HOLD_FIRST_US_PER_RECORD: u64 = 20;
/// Longest group commit holds a flush in all, from the end of the one before (the shard answers
/// the whole batch before the first client is back), µs.
pub const LOG_FLUSH_HOLD_US_MAX: u64 = 1_000;
/// How long group commit stops holding flushes after a hold ended by time rather than by the
/// records it expected (clients that do not come back at once), ms; doubled at each such miss
/// in a row, up to the maximum below.
pub const LOG_FLUSH_HOLD_BACKOFF_MS_MIN: u64 = 10;
/// The longest such pause, ms.
pub const LOG_FLUSH_HOLD_BACKOFF_MS_MAX: u64 = 1_000;
/// Size a log segment is preallocated to; a new segment starts when a flush does not fit. The
/// unit in which a drain gives disk back: the open segment is preallocated whole, and a segment
/// is freed or compacted whole. At 64 MiB the peak of a fill and drain of 2,000,000 texts of
/// 256 B was 1.53 times the texts, at 16 MiB 1.44 times (docs/BENCHMARKS.md, "Segments of 16
/// MiB"); a new segment costs about 0.3 ms (create, fallocate, header, sync, rename).
pub const LOG_SEGMENT_BYTES: u64 = 16 << 20;
/// How far ahead of the writes an O_DIRECT segment is filled with zeros (io_uring backend).
/// Preallocated blocks are "unwritten" extents: a direct write into them needs the file system
/// to convert them, which io_uring cannot do without blocking and hands to a kernel worker
/// thread, milliseconds late when the cores are busy. Zeroed blocks are overwritten in place.
pub const LOG_ZERO_FILL_AHEAD_BYTES: u64 = 4 << 20;
/// How far past a write into a log segment the portable backend writes zeros, in the same trip
/// to its worker thread, when the write reaches past the zeros already there. Preallocated
/// blocks are "unwritten" extents, and the sync after a write into them also commits their
/// conversion; after an overwrite of written blocks it does not (about 0.22 against 0.14 ms a
/// sync on the VM's disk: `scripts/sync-costs.py`). The flush that writes the zeros pays for
/// the next ones (its sync writes them too: about 1 ms).
pub const LOG_ZERO_FILL_BUFFERED_BYTES: u64 = 1 << 20;
/// Free space `--min-free-disk` keeps on the file system holding `--location` by default, percent
/// of its size: Elasticsearch's flood-stage watermark (95% used) blocks writes at the same point,
/// and it is room for the system's own logs and for a snapshot on a disk others also fill.
pub const MIN_FREE_DISK_PERCENT_DEFAULT: u64 = 5;
/// A durable server's `--text-memory` when the flag is not given: this share of `--max-memory`
/// (numerator, denominator). Texts beyond it leave memory once written, and a text on disk only
/// counts its slot alone in `--max-memory`, so a backlog outgrows memory by its texts; the
/// other half is room for the messages' slots and the texts not yet written.
pub const TEXT_MEMORY_SHARE_DEFAULT: (u64, u64) = (1, 2);
/// What a text in memory that may leave it costs beyond its bytes: its home, where its record
/// is (`ShardState::text_homes`, an entry of 36 bytes in sorted runs, `queue::state::homes`).
/// Every two neighbouring runs hold more than a run's worth, so the runs take less than twice
/// the entries (72 bytes a home) whatever the order of inserts and removals, plus the runs' map
/// and allocations (about 3 bytes a home at half full); full runs when filled in the log's
/// order. Measured: 51 bytes of RSS a message over 2,000,000 texts of 256 bytes, against 102
/// with the `BTreeMap` before (2026-12-05). Charged against `--max-memory` and the
/// `--text-memory` share, so that tracking texts cannot take memory past the limit.
pub const TEXT_HOME_BYTES: u64 = 80;
/// Whatever `--text-memory` says, texts in memory (with their homes) leave it, newest first,
/// once the shard's whole charge passes this share of its `--max-memory` share
/// (`ShardState::text_budget`): where small texts' slots fill memory, their texts and homes
/// go rather than Puts be refused, and the rest is room for the Puts between two flushes.
pub const TEXT_MEMORY_ROOM_SHARE: (u64, u64) = (3, 4);
/// Smallest share of `--max-disk` one shard may have, bytes: at least the open segment, the
/// headroom (`storage::space::headroom_bytes`: `DISK_SERVED_RECORDS_BYTES` and a segment) and a
/// segment for the data itself; 256 MiB, as when segments were 64 MiB, so that the smallest
/// share and a default shard count under `--max-disk` did not change when they became 16 MiB.
pub const DISK_BYTES_PER_SHARD_MIN: u64 = 256 << 20;
/// How often each durable shard's measuring thread (`storage::space::SpaceGauge`) takes the file
/// system's free space (`statvfs`), and the shard reads it, ms; its own files' size the shard
/// knows at every flush.
pub const DISK_SAMPLE_INTERVAL_MS: u64 = 100;
/// How much of its messages (their `--max-memory` charge) a shard frees before it gives the
/// allocator's free memory back to the system (`runtime::os::give_back_free_memory`), bytes,
/// asked after every command and timer step: each call then releases about this much, so its
/// time on the shard's thread stays bounded (about 6.5 ms per 70 MiB, measured), and it is
/// large enough to matter in a resident-memory graph.
pub const MEMORY_GIVE_BACK_BYTES_MIN: u64 = 64 << 20;
/// Room the disk rule keeps beyond what a snapshot writes naming every text on disk only
/// (`Log::snapshot_bytes_max`), so that a snapshot can always copy what is left of a segment it
/// gives up (at most two thirds of one, `SEGMENT_KEPT_LIVE_SHARE_MIN`) and let the segment go:
/// without it a shard filled to its limit and drained in part, its segments mostly dead,
/// refused puts for good (helper-65's review of 96bb0b1).
pub const DISK_COMPACTION_BYTES: u64 = LOG_SEGMENT_BYTES;
/// Room the disk rule keeps for the records of what a shard still serves while a snapshot runs
/// (Get, Delete, Clear) and of what it accepted between two measurements
/// (`storage::space::headroom_bytes`): a flush takes whole 4 KiB blocks, so 16,384 lone Gets or
/// Deletes, many more records when they batch. A segment's size until segments became 16 MiB;
/// kept when they did, so that this room did not shrink with them (the whole room beyond what a
/// snapshot writes went from 192 MiB, three segments of 64 MiB, to 96 MiB: a segment to
/// compact, this, and a segment).
pub const DISK_SERVED_RECORDS_BYTES: u64 = 64 << 20;
/// Room beyond the disk rule a shard refusing growth for space waits for before it accepts
/// again, so that clients working at the limit do not flip it at every message.
pub const DISK_RESUME_MARGIN_BYTES: u64 = 16 << 20;
/// Recovery maps log and snapshot files of at least this size rather than reading them (on
/// Unix; a smaller file is cheaper to copy than to map and unmap).
pub const MAPPED_READ_BYTES_MIN: u64 = 1 << 20;
/// The most bytes one `Disk::read_many` batch reads, its ranges together (a caller splits
/// larger work): as much as one log flush writes, four times the largest record.
pub const DISK_READ_BYTES_MAX: usize = LOG_FLUSH_BYTES_MAX;
/// The most ranges one `Disk::read_many` batch reads: a batch of the smallest records still
/// fits one bounded allocation of answers.
pub const DISK_READ_RANGES_MAX: usize = 4096;
/// Bytes of its log's files a shard keeps, read back for texts on disk only
/// (`storage::read_cache`), beside `--max-memory` (so at most an eighth of the shard's share):
/// chunks of `TEXT_READ_CACHE_CHUNK_BYTES`, the oldest going first. Over many queues drained
/// together, one pass over their heads (queues × 32 texts) must fit for a chunk to serve the
/// Gets of the other queues whose texts are in it; reads ahead of Gets (`TEXT_READS_AHEAD_MAX`)
/// read a queue's next Get's texts a pass before the Gets of queues whose texts lie near them,
/// and over 1,000 queues of 256-byte texts 16 MiB then let chunks go first (65,039 chunks read
/// in 20 s against 36,520 with 32 MiB, 17,382 deletes a second against 19,659).
pub const TEXT_READ_CACHE_BYTES: usize = 32 << 20;
/// The chunk a read for a text on disk only reads whole and keeps (`TEXT_READ_CACHE_BYTES`),
/// aligned to its size in the file: four blocks, so a text no other read finds there costs
/// four blocks where it cost one on io_uring (O_DIRECT reads whole blocks), and 16 KiB where it
/// cost its own bytes on the portable runtime.
pub const TEXT_READ_CACHE_CHUNK_BYTES: usize = 16 << 10;
/// The most reads of texts on disk only (`--text-memory`) that may fail for one Get or Peek
/// before it answers 500 `InternalError`: a failed read is tried again (the text may be in
/// memory by then).
pub const TEXT_READ_FAILURES_MAX: usize = 8;
/// The most rounds of reads one Get or Peek makes for texts on disk only before it answers 503
/// `ServerBusy`: each round reads the texts of the messages it would return now, and competing
/// consumers may take those meanwhile (each round then served others), so a round count is a
/// bound against a queue contended without end, not an error.
pub const TEXT_WAIT_ROUNDS_MAX: usize = 1024;
/// The most text a Get that waits for texts on disk only reads ahead, of the visible messages
/// after those it returns (`TextWait::ahead`): competing consumers then find their texts in
/// memory, where each Get read its own (and, racing, the same ones) before.
pub const TEXT_READ_AHEAD_BYTES: u64 = 1 << 20;
/// The most visible messages after those a Get returns that it passes looking for texts to read
/// ahead (most may be in memory already): the most a queue's read-ahead grows to, doubling from
/// the Get's count at each wait within `TEXT_READ_AHEAD_HOLD_MS` of the last, and halved for
/// each text read ahead that left memory untaken.
pub const TEXT_READ_AHEAD_MESSAGES: u32 = 4096;
/// The longest a text read ahead of a Get before one waited stays in memory untaken: twice the
/// time between its queue's last two Gets, at least `TEXT_READ_AHEAD_HOLD_MS`; a queue got less
/// often than every half of it reads nothing before its Gets. Over 1,000 queues drained at
/// 20,000 messages a second a queue is got every 1.6 s or so: with a bound of 2 s, queues got
/// a little less often (more of them as the drain slowed) were never due, and their Gets
/// waited.
pub const TEXT_READ_EARLY_HOLD_MAX_MS: u64 = 30_000;
/// The most reads of texts ahead of Gets a shard has in flight with no request waiting for
/// them (`runtime::engine::run_reads_ahead`, one queue each); queues due meanwhile wait their
/// turn, and a Get that cannot wait for one reads its own texts as before.
pub const TEXT_READS_AHEAD_MAX: usize = 8;
/// How long a text read ahead stays in memory beyond `--text-memory` if no Get takes it: then
/// it may leave again, and its queue reads less ahead. A queue whose Gets wait less often than
/// this reads nothing ahead (what it read would leave memory before a Get took it).
pub const TEXT_READ_AHEAD_HOLD_MS: u64 = 2_000;
/// Text read ahead a shard keeps in memory, beyond `--text-memory`, until a Get takes it:
/// past it, the texts read ahead longest ago may leave memory again. Queues drained together
/// each hold their next Get's texts read ahead: 1,000 queues of 32 texts of 256 bytes are 8 MiB.
/// At most a quarter of the shard's `--max-memory` share (`ShardState::set_message_bytes_max`):
/// the texts held are charged to it.
pub const TEXT_READ_AHEAD_HELD_BYTES: u64 = 32 << 20;
/// The most texts read ahead a shard keeps track of (`TEXT_READ_AHEAD_HELD_BYTES` of tiny
/// texts would be millions of entries): 32 reads ahead of the most messages, or 4,096 queues'
/// next Gets of 32.
pub const TEXT_READ_AHEAD_HELD_TEXTS: usize = 32 * TEXT_READ_AHEAD_MESSAGES as usize;
/// The most texts one eviction step drops from memory (`--text-memory`) before the shard
/// serves requests again: a snapshot in place makes every text it recorded evictable at once,
/// and dropping a million in one go held the shard for about a second.
pub const TEXT_EVICTIONS_PER_STEP_MAX: usize = 4096;
/// The most texts one step of a snapshot's clean-up makes evictable to the snapshot's entries
/// (`ShardState::note_snapshot`) before the shard serves requests again.
pub const SNAPSHOT_REHOME_STEP_TEXTS: usize = 4096;
/// Disk each shard may use beyond its live data before a snapshot lets old segments go: a
/// snapshot starts once the log since the last one holds more than the live data and this, or
/// the snapshot and the closed segments more than twice the stored data and this.
pub const SNAPSHOT_ALLOWANCE_BYTES: u64 = 64 << 20;
/// Closed log segments less than half full a shard keeps before it writes a snapshot (each
/// restart closes one, however little it holds); full ones do not count.
pub const LOG_CLOSED_SEGMENTS_MAX: usize = 8;
/// The share of the segment size (numerator, denominator) below which a closed segment's
/// records make it small: small ones count toward `LOG_CLOSED_SEGMENTS_MAX`, and a snapshot
/// keeps none for the texts it names (it copies them, so that the one each restart closes does
/// not pile up kept, beyond that rule).
pub const SEGMENT_SMALL_SHARE: (u64, u64) = (1, 2);
/// Largest record body the log and snapshot readers accept: a longer length is garbage, not a
/// record. Far above the largest record a request can make (a Put of the largest text, about
/// 64 KiB; a queue's metadata; the service properties, every field bounded), which
/// `record::encode` asserts: a record the reader would refuse is never written.
pub const RECORD_BODY_BYTES_MAX: usize = 1 << 20;
/// Disk that files recovery kept aside on earlier starts may take (`DIR/__azq__/kept/`: what it
/// cut off a log or removed, copied first so that a reader's mistake never deletes data); the
/// oldest go first beyond it. What the current start keeps is never removed by it.
pub const RECOVERY_KEPT_BYTES_MAX: u64 = 256 << 20;
/// What a change of shard count with texts located is taken to hold a message while it moves
/// them, bytes, against the memory the process may have (`RecoveryOptions::
/// reshard_memory_bytes_max`): its slot and recovery's entry for it, and a moved message's ID in
/// `ForeignIds`; its text is never in memory whole. Measured 190, 166 and 159 at the peak
/// (docs/BENCHMARKS.md, "A change of shard count over a backlog": 2,000,000 messages half moved
/// and all moved, 9,000,000 all moved); 512 while two maps held each moved message's ID and its
/// state waited in a vector for its slot (301-413 then), 400 with the vector alone (248-301).
pub const RESHARD_MESSAGE_BYTES: u64 = 256;
/// With texts located, recovery lets go of the pages of a snapshot it has read past in steps of
/// this many bytes (`Files::unload_range`; the snapshot is read streamed, its pages read in as
/// touched), so that a large snapshot is not resident whole while it is read.
pub const RECOVERY_UNLOAD_STEP_BYTES: usize = 32 << 20;
/// With texts located, the most bytes of the log segments named by a snapshot that recovery
/// keeps resident while it reads the records there, in chunks of `RECOVERY_NAMED_CHUNK_BYTES`
/// (the one touched first is let go first): what a restart of a backlog named in many segments
/// maps stays a few segments' worth, not the whole log.
pub const RECOVERY_NAMED_RESIDENT_BYTES: usize = 256 << 20;
/// The chunks `RECOVERY_NAMED_RESIDENT_BYTES` counts in: small enough that records scattered
/// over many segments keep little more than their own pages, large enough that records read in
/// order let a chunk go rarely.
pub const RECOVERY_NAMED_CHUNK_BYTES: usize = 2 << 20;
/// Stack of each thread recovery reads a shard on (`Files::parallel`): the main
/// thread's usual 8 MiB, which recovery ran on alone before.
pub const RECOVERY_THREAD_STACK_BYTES: usize = 8 << 20;
/// Bytes of each page of recovery's images (`storage::pages`): the records replayed and the
/// messages by slot are held in pages freed one by one as they are passed, so the peak of a
/// large restart is about one copy of the backlog, not three. 32 MiB, glibc's largest
/// threshold for mapping an allocation of its own, so a freed page goes back to the system.
pub const RECOVERY_PAGE_BYTES: usize = 32 << 20;
/// Message slots one snapshot step encodes before the shard serves requests again.
pub const SNAPSHOT_STEP_SLOTS: u32 = 4096;
/// Put records one snapshot entry names at most (`Record::PutsNamed`, for messages untouched
/// since their put): a step's worth, so its largest (25 bytes a put) is far below what the
/// readers accept.
pub const SNAPSHOT_NAMED_PUTS_PER_ENTRY_MAX: usize = SNAPSHOT_STEP_SLOTS as usize;
/// Message slots one step of a snapshot's tally (the bytes of texts on disk only, by segment,
/// that choose the segments it keeps) passes over before the shard serves requests again: no
/// encoding, no read, about 1 ns a slot.
pub const SNAPSHOT_TALLY_STEP_SLOTS: u32 = 65_536;
/// The share of a segment (as allocated) that the records of texts on disk only there must
/// take for a snapshot to keep it and name them rather than copy them (numerator,
/// denominator): below it, the snapshot copies what is left and the segment goes (compaction),
/// so kept segments stay within 1.5 times the records they hold (issue 40's disk target). At
/// a half, a fill-and-drain benchmark ended with 914 MiB for 512 MiB before the fill: segments
/// holding the other queues' messages kept, up to half dead.
pub const SEGMENT_KEPT_LIVE_SHARE_MIN: (u64, u64) = (2, 3);
/// Bytes a stored message adds to what a snapshot now would give back of the segments before
/// its replay point (besides a segment, what it would copy and the snapshot in place) for one
/// to be due (`Log::dead_segments_due`): a snapshot's work is a pass over every message, its
/// tally and its entries, whatever their texts, so a drain gives segments back as they die, at
/// a snapshot each time about this much a message stored has died. It was a quarter of the text
/// records live on disk there (74 bytes a message of 256-byte texts, 16 KiB one of 64 KiB), and
/// what died meanwhile, mostly the drain's own log, took the disk's peak to 1.6 times the
/// texts. Measured in docs/BENCHMARKS.md, "Segments given back by the message".
pub const SNAPSHOT_DEAD_BYTES_PER_MESSAGE: u64 = 16;
/// Bytes of message text one snapshot step encodes at most (at least one message's), so that
/// the texts it reads from disk to copy, and its encoding, stay small whatever the texts' sizes
/// (`SNAPSHOT_STEP_SLOTS` of the largest would be 256 MiB, in memory uncharged: helper-39's
/// review of 480f0bf saw 472 MB under a `--max-memory` of 4 MiB).
pub const SNAPSHOT_STEP_TEXT_BYTES: u64 = 8 << 20;
/// Bytes between two records on disk that a snapshot step reads rather than read the records
/// apart (`Log::read_texts_for`): fewer than this and than the later record's own bytes, so a
/// step's reads hold at most twice its records. A block, which a direct read reads anyway.
pub const SNAPSHOT_READ_GAP_BYTES: usize = STORAGE_BLOCK_BYTES;
/// Bytes a snapshot writes between syncs of its file: the device takes a snapshot a chunk at
/// a time, so a log flush (whose sync waits for the writes the device holds) waits for at most
/// one chunk, not for the whole snapshot at once (a 40 MiB snapshot synced at its end held
/// the log's flushes for tens of ms).
pub const SNAPSHOT_SYNC_BYTES: usize = 1 << 20;
/// Bytes a snapshot's clean-up frees per step: each file the new snapshot replaces (the segments
/// it covers, the older snapshot) is shortened by this much and synced, the shard serving
/// between steps, and removed once empty. On a file system that discards freed blocks (ext4
/// mounted `-o discard`, as on the benchmark VM), the journal commit after a removal waits for
/// the device to discard every block it freed, and the log's fdatasync waits for that commit:
/// seven 64 MiB segments removed at once held the log's syncs for 30-80 ms each, 0.3 s in all.
pub const SNAPSHOT_REMOVAL_STEP_BYTES: u64 = 4 << 20;
/// With `--durability write`, how often the log is synced in the background, ms.
pub const WRITE_MODE_SYNC_INTERVAL_MS: u64 = 200;
/// Azure's target for one queue (`--profile azure`): message operations per second.
pub const AZURE_QUEUE_MESSAGES_PER_S: u64 = 2_000;
/// Azure's target for one storage account (`--profile azure`): requests per second.
pub const AZURE_ACCOUNT_REQUESTS_PER_S: u64 = 20_000;
/// What a full token bucket holds, as time at its rate, ms: the burst a limit lets through
/// unless `--rate-burst` says otherwise.
pub const TOKEN_BUCKET_BURST_MS: u64 = 1_000;
/// The longest burst `--rate-burst` may set, ms (the shortest is 1 ms: time is counted in whole
/// milliseconds, so a bucket must hold at least a millisecond of its rate).
pub const RATE_BURST_MS_MAX: u64 = 60_000;
/// Per-queue buckets one shard keeps; at the cap, full (idle) buckets are forgotten.
pub const QUEUE_BUCKETS_PER_SHARD_MAX: usize = 65_536;
/// How often each shard reports its per-account demand to shard 0 and gets its new share, ms.
pub const ACCOUNT_SHARE_INTERVAL_MS: u64 = 100;
/// Fault rules in force at once; beyond it `POST /_azq/faults` answers 400.
pub const FAULT_RULES_MAX: usize = 64;
/// Largest JSON of one fault rule, bytes.
pub const FAULT_RULE_TEXT_BYTES_MAX: usize = 4 * 1024;
/// Longest delay a fault rule may add, ms.
pub const FAULT_DELAY_MS_MAX: u64 = 60_000;
/// Longest service time `--latency` may add to one request, µs.
pub const LATENCY_US_MAX: u64 = 60_000_000;
/// Queues `/_azq/metrics` reports the depth of: the deepest ones.
pub const METRICS_DEEPEST_QUEUES: usize = 10;
/// Largest `--init` file, bytes: it is read whole and held while it is applied.
pub const INIT_FILE_BYTES_MAX: usize = 16 << 20;
/// Most messages an `--init` file puts (`count` repetitions included).
pub const INIT_MESSAGES_MAX: u64 = 1_000_000;
/// Messages one page of `/_azq/inspect/{account}/{queue}` lists at most (`limit`).
pub const INSPECT_PAGE_MESSAGES_MAX: usize = 100;
/// Bytes of message text one inspection page carries at most (one message always fits).
pub const INSPECT_PAGE_TEXT_BYTES_MAX: usize = 1 << 20;
/// Queues one page of `/_azq/inspect` lists at most (`limit`).
pub const INSPECT_QUEUES_PAGE_MAX: usize = 1000;
/// How long a console sign-in's session lasts by default (`--session-lifetime`), ms.
pub const CONSOLE_SESSION_LIFETIME_MS_DEFAULT: u64 = 3_600_000;
/// Shortest `--session-lifetime`, ms.
pub const CONSOLE_SESSION_LIFETIME_MS_MIN: u64 = 1_000;
/// Longest `--session-lifetime`, ms: a day.
pub const CONSOLE_SESSION_LIFETIME_MS_MAX: u64 = 86_400_000;
/// Host names `--control-hosts` (with `AZQ_CONTROL_HOSTS`) may add at most.
pub const CONTROL_HOST_NAMES_MAX: usize = 64;
/// Messages one console "generate" action puts at most.
pub const ADMIN_GENERATE_MESSAGES_MAX: u64 = 10_000;
/// One-second samples the console's history keeps (ten minutes).
pub const HISTORY_SECOND_SAMPLES: usize = 600;
/// Ten-second samples the console's history keeps (one hour).
pub const HISTORY_TEN_SECOND_SAMPLES: usize = 360;
/// Time `azq healthcheck` waits to connect, send and hear back, ms each.
pub const HEALTHCHECK_TIMEOUT_MS: u64 = 2_000;
/// Time a stopping server waits for in-flight requests, and then for its log to write every
/// change, before it exits anyway, ms.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;
/// Unsent answers one connection holds before it stops parsing (and reading) requests: past
/// it, the connection writes them all before it serves the next pipelined request (pipelined
/// answers are otherwise written in one batch). One answer may exceed it (a Peek of 32 large
/// messages is about 2 MiB, a List Queues with metadata tens of MiB): the shard's bound below
/// covers what all its connections hold.
pub const CONNECTION_PENDING_OUTPUT_BYTES_MAX: usize = 256 * 1024;
/// Pipelined requests one connection has sent to the shards that own their queues before it
/// waits for their answers (`runtime::connection`): past it, it waits for them before it sends
/// the next. Each holds a mesh ticket and its request until answered.
pub const CONNECTION_SENT_MAX: usize = 64;
/// Unsent answers all the connections of one shard hold (counted from the start of each write
/// until it completes or fails); past it, requests that reach the queues answer 503
/// `ServerBusy`, unexecuted, until the writes drain or their connections time out.
pub const SHARD_PENDING_OUTPUT_BYTES_MAX: usize = 64 << 20;
/// Time a write to a client may make no progress before the connection is closed
/// (`--write-timeout`; nginx's `send_timeout` is the same idea, also 60 s by default), ms.
pub const WRITE_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Shortest `--write-timeout`, ms (the default is also the longest it may be set to).
pub const WRITE_TIMEOUT_MS_MIN: u64 = 100;
/// Timer-wheel entries one shard processes per step before it yields to requests; what is left
/// of the budget frees messages of cleared and deleted queues.
pub const TIMER_ENTRIES_PER_STEP_MAX: usize = 4096;
/// Pause between two such steps while more work is due, during which the shard serves requests.
pub const TIMER_STEP_PAUSE_US: u64 = 100;
/// Stored access policies (signed identifiers) one queue may have, as Azure: beyond it Set Queue
/// ACL answers 400 `InvalidXmlDocument`.
pub const SIGNED_IDENTIFIERS_MAX: usize = 5;
/// Longest signed identifier `Id`, characters, as Azure.
pub const SIGNED_IDENTIFIER_ID_CHARS_MAX: usize = 64;
/// CORS rules one account may have, as Azure: beyond it Set Service Properties answers 400.
pub const CORS_RULES_MAX: usize = 5;
/// Total text of an account's CORS rules (origins, methods, headers), bytes, as Azure's 2 KiB.
pub const CORS_RULES_TEXT_BYTES_MAX: usize = 2 * 1024;
/// Longest `Version` of Set Service Properties' `Logging`, `HourMetrics` and `MinuteMetrics`
/// (Azure's analytics version is `1.0`), bytes: beyond it 400 `InvalidXmlNodeValue`. Unbounded,
/// three versions merged from separate requests made a settings record longer than the log's
/// reader accepts (`RECORD_BODY_BYTES_MAX`).
pub const ANALYTICS_VERSION_BYTES_MAX: usize = 64;
/// Deepest element nesting accepted in a settings body (ACL, service properties need four).
pub const XML_DEPTH_MAX: usize = 8;
/// Longest analytics retention, days, as Azure.
pub const RETENTION_DAYS_MAX: u32 = 365;
/// How far a SharedKey or SharedKeyLite request's `x-ms-date` (or `Date`) may be from the
/// server's clock, either way, as Azure: beyond it 403 `AuthenticationFailed`, so a captured
/// request cannot be replayed later (`--skipRequestDateCheck` turns the check off).
pub const REQUEST_DATE_SKEW_MS_MAX: u64 = 15 * 60 * 1000;
/// Verified SAS signatures one shard remembers; beyond this the older half is forgotten.
pub const SAS_CACHE_ENTRIES_MAX: usize = 4096;
/// Longest SAS cache key (string-to-sign and signature) worth remembering, bytes: SDK tokens sign
/// about 150 bytes; longer ones are verified every time, which caps the cache near 2 MiB per shard.
pub const SAS_CACHE_KEY_BYTES_MAX: usize = 512;
/// Time a TLS client has to complete its handshake once connected, ms; then the connection is
/// closed (a client that connects and sends nothing, or plain HTTP that never becomes TLS).
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Time a connection has to send its PROXY protocol header once accepted (`--proxyProtocol`),
/// ms; then it is closed. The proxy sends it at once: only a client that is not the proxy waits.
pub const PROXY_HEADER_TIMEOUT_MS: u64 = 5_000;
/// Largest PROXY protocol header read, bytes: a v1 line is at most 107, a v2 header 16 plus its
/// addresses (216 for UNIX sockets) and TLVs; HAProxy's send-proxy-v2 options stay far below.
/// A longer one closes the connection.
pub const PROXY_HEADER_BYTES_MAX: usize = 4096;
/// TLS handshakes one shard runs at once; a connection beyond them is closed at once (there is
/// no session yet to answer 503 over), so a flood of idle connections cannot hold the shard's
/// connection slots for the whole handshake timeout.
pub const TLS_HANDSHAKES_IN_FLIGHT_PER_SHARD_MAX: usize = 1024;
/// TLS sessions one shard remembers for resumption (each shard keeps its own cache, so no lock
/// is shared between shards).
pub const TLS_SESSION_CACHE_ENTRIES_PER_SHARD: usize = 256;
/// Clock skew allowed when checking a bearer token's `nbf` and `exp`, seconds: Microsoft's token
/// validation default (5 minutes).
pub const BEARER_CLOCK_SKEW_S: u64 = 300;
/// Latest expiry of a user delegation key, from the time it is asked for, ms (7 days, as
/// Azure): a later `Expiry` is 400 `InvalidXmlNodeValue`.
pub const USER_DELEGATION_KEY_LIFETIME_MS_MAX: u64 = 7 * 24 * 3600 * 1000;
/// Memory glommio registers for io_uring buffers per shard. glommio's default (10 MiB) exceeds the
/// common 8 MiB `ulimit -l`, so azq asks for less; it only serves file I/O, which azq does not do.
pub const IO_MEMORY_BYTES_PER_SHARD: usize = 512 * 1024;

const _: () = assert!(REQUEST_BODY_BYTES_MAX > MESSAGE_TEXT_BYTES_MAX * XML_ESCAPE_BYTES_MAX);
const _: () = assert!(REQUEST_HEAD_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(GET_VISIBILITY_TIMEOUT_S_DEFAULT <= VISIBILITY_TIMEOUT_S_MAX);
const _: () = assert!(MESSAGE_TTL_S_DEFAULT <= VISIBILITY_TIMEOUT_S_MAX);
const _: () = assert!(SAS_CACHE_ENTRIES_MAX >= 2);
const _: () =
    assert!(LOG_FLUSH_BYTES_MAX as u64 + 2 * STORAGE_BLOCK_BYTES as u64 <= LOG_SEGMENT_BYTES);
const _: () = assert!(LOG_FLUSH_BYTES_MAX >= 2 * REQUEST_BODY_BYTES_MAX);
const _: () = assert!(SNAPSHOT_SYNC_BYTES % STORAGE_BLOCK_BYTES == 0);
const _: () = assert!(SNAPSHOT_REMOVAL_STEP_BYTES > 0);
const _: () = assert!(RECOVERY_KEPT_BYTES_MAX >= LOG_SEGMENT_BYTES);
const _: () =
    assert!(DISK_BYTES_PER_SHARD_MIN >= 3 * LOG_SEGMENT_BYTES + DISK_SERVED_RECORDS_BYTES);
const _: () = assert!(RECORD_BODY_BYTES_MAX >= 8 * (MESSAGE_TEXT_BYTES_MAX + METADATA_BYTES_MAX));
const _: () = assert!(RECORD_BODY_BYTES_MAX <= LOG_FLUSH_BYTES_MAX);
const _: () = assert!(13 + 25 * SNAPSHOT_NAMED_PUTS_PER_ENTRY_MAX <= RECORD_BODY_BYTES_MAX / 8);
const _: () = assert!(SHARD_PENDING_OUTPUT_BYTES_MAX >= 8 * CONNECTION_PENDING_OUTPUT_BYTES_MAX);
const _: () = assert!(WRITE_TIMEOUT_MS_DEFAULT <= IDLE_CONNECTION_TIMEOUT_MS);
const _: () = assert!(READ_DEADLINE_SWEEP_MS * 10 <= REQUEST_HEAD_TIMEOUT_MS);
const _: () = assert!(LOG_FLUSH_HOLD_GAP_US <= LOG_FLUSH_HOLD_US_MAX);
const _: () = assert!(LOG_FLUSH_HOLD_BACKOFF_MS_MIN <= LOG_FLUSH_HOLD_BACKOFF_MS_MAX);
