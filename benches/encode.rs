//! Message XML benchmarks: encoding a 32-message Get Messages body and a Put reply into a reused
//! output buffer as the connection loop does, and reading the text of a 1 KiB Put body (the
//! unescape and the check for characters XML forbids).

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use azq::api::xml::{self, MessageFields};
use azq::queue::{MessageId, MessageView, PopReceipt};

fn messages(count: usize, text_bytes: usize) -> Vec<MessageView> {
    let text = Bytes::from("m".repeat(text_bytes));
    (0..count)
        .map(|index| MessageView {
            message_id: MessageId(0x1234_5678_9abc_4def_8123_4567_89ab_cdef ^ index as u128),
            insertion_ms: 1_795_305_600_000 + index as u64,
            expiration_ms: 1_795_910_400_000,
            pop_receipt: Some(PopReceipt {
                slot: index as u32,
                generation: 1,
                lease: 2,
                tag: 0x0807_0605_0403_0201 ^ index as u64,
            }),
            time_next_visible_ms: 1_795_305_630_000,
            dequeue_count: 1,
            text: text.clone(),
        })
        .collect()
}

fn encode(criterion: &mut Criterion) {
    let batch = messages(32, 1024);
    let mut out = BytesMut::with_capacity(64 * 1024);
    let mut group = criterion.benchmark_group("encode");
    group.throughput(Throughput::Elements(32));
    group.bench_function("get_messages_32x1KiB", |bencher| {
        bencher.iter(|| {
            out.clear();
            xml::messages(&mut out, &batch, MessageFields::Get);
            criterion::black_box(out.len())
        })
    });
    group.finish();
    let single = messages(1, 1024);
    criterion.bench_function("encode/put_message_reply", |bencher| {
        bencher.iter(|| {
            out.clear();
            xml::messages(&mut out, &single, MessageFields::Put);
            criterion::black_box(out.len())
        })
    });
}

fn decode(criterion: &mut Criterion) {
    let body = format!(
        "<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
        "m".repeat(1024)
    );
    criterion.bench_function("decode/put_message_text_1KiB", |bencher| {
        bencher.iter(|| xml::message_text(criterion::black_box(body.as_bytes())).unwrap())
    });
}

criterion_group!(benches, encode, decode);
criterion_main!(benches);
