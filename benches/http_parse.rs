//! Criterion benchmarks of the HTTP request parser on the shapes of traffic azq serves most: a
//! Python-SDK Put Message (11 headers, 1 KiB body), 32 pipelined Get Messages, and a large body
//! arriving in many reads (which must cost linear time, not a re-parse per read).

use azq::http::{Parser, Progress};
use azq::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADERS_MAX, REQUEST_HEAD_BYTES_MAX};
use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

/// The headers the Azure Python SDK sends with every request.
const SDK_HEADERS: &str = concat!(
    "Host: 127.0.0.1:10001\r\n",
    "User-Agent: azsdk-python-storage-queue/12.12.0 Python/3.12.3 ",
    "(Linux-6.8.0-x86_64-with-glibc2.39)\r\n",
    "Accept-Encoding: gzip, deflate\r\n",
    "Accept: application/xml\r\n",
    "Connection: keep-alive\r\n",
    "x-ms-version: 2025-05-05\r\n",
    "x-ms-date: Tue, 03 Jun 2025 10:00:00 GMT\r\n",
    "x-ms-client-request-id: 6f1c2d4e-8a9b-11ef-9c3d-0242ac120002\r\n",
    "Authorization: SharedKey devstoreaccount1:2Nn0cDGCx2fVbXe5XbQzyVSH6OYUq+UktvWYGJ0gCQg=\r\n",
);

/// A Put Message request (11 headers) whose XML body is `body_bytes` long.
fn put_message(body_bytes: usize) -> Vec<u8> {
    let envelope_start = "<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>";
    let envelope_end = "</MessageText></QueueMessage>";
    let text_bytes = body_bytes - envelope_start.len() - envelope_end.len();
    let body = format!("{envelope_start}{}{envelope_end}", "A".repeat(text_bytes));
    format!(
        "POST /devstoreaccount1/orders/messages?visibilitytimeout=0&messagettl=604800 HTTP/1.1\r\n\
         {SDK_HEADERS}Content-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `count` Get Messages requests (10 headers), back to back as a pipelining client sends them.
fn pipelined_get_messages(count: usize) -> Vec<u8> {
    let request = format!(
        "GET /devstoreaccount1/orders/messages?numofmessages=1&visibilitytimeout=30 HTTP/1.1\r\n\
         {SDK_HEADERS}Content-Length: 0\r\n\r\n"
    );
    request.repeat(count).into_bytes()
}

fn parser() -> Parser {
    Parser::new(
        REQUEST_HEAD_BYTES_MAX,
        REQUEST_HEADERS_MAX,
        REQUEST_BODY_BYTES_MAX,
    )
}

/// Parses every request in `buffer`, returning how many came out.
fn parse_all(parser: &mut Parser, buffer: &mut BytesMut) -> usize {
    let mut requests = 0;
    while let Ok(Progress::Complete(request)) = parser.parse(buffer) {
        criterion::black_box(request);
        requests += 1;
    }
    requests
}

fn bench_parse(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("http_parse");

    let put = put_message(1024);
    group.throughput(Throughput::Bytes(put.len() as u64));
    group.bench_function("put_message_1_kib", |bencher| {
        let mut parser = parser();
        bencher.iter_batched(
            || BytesMut::from(&put[..]),
            |mut buffer| assert_eq!(parse_all(&mut parser, &mut buffer), 1),
            BatchSize::SmallInput,
        )
    });

    let gets = pipelined_get_messages(32);
    group.throughput(Throughput::Bytes(gets.len() as u64));
    group.bench_function("get_messages_32_pipelined", |bencher| {
        let mut parser = parser();
        bencher.iter_batched(
            || BytesMut::from(&gets[..]),
            |mut buffer| assert_eq!(parse_all(&mut parser, &mut buffer), 32),
            BatchSize::SmallInput,
        )
    });

    // A near-maximal body in 1460-byte reads (one TCP segment each), as a slow client sends it.
    let large_put = put_message(REQUEST_BODY_BYTES_MAX);
    const READ_BYTES: usize = 1460;
    group.throughput(Throughput::Bytes(large_put.len() as u64));
    group.bench_function("put_message_400_kib_in_segments", |bencher| {
        let mut parser = parser();
        bencher.iter(|| {
            let mut buffer = BytesMut::with_capacity(large_put.len());
            let mut requests = 0;
            for segment in large_put.chunks(READ_BYTES) {
                buffer.extend_from_slice(segment);
                requests += parse_all(&mut parser, &mut buffer);
            }
            assert_eq!(requests, 1);
        })
    });

    group.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
