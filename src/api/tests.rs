//! Table tests of the request path's two halves, written against `Service`'s public face so they
//! hold whatever the inside of `api/` looks like: a request becomes a planned step (which shard,
//! which command, or which error), and an operation's reply becomes the exact response bytes.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{Health, Operation, Outcome, Service};
use crate::auth::shared_key::sign_shared_key;
use crate::auth::{Accounts, SigningKey};
use crate::auth::{DEVELOPMENT_ACCOUNT_KEY, DEVELOPMENT_ACCOUNT_NAME};
use crate::error::StorageError;
use crate::http::Request;
use crate::lifecycle::Lifecycle;
use crate::queue::{
    MessageId, MessageView, PopReceipt, QueueListing, Replicas, Reply, ServiceProperties,
    SignedIdentifier,
};

/// Sun, 22 Nov 2026 00:00:00 GMT.
const NOW_MS: u64 = 1_795_305_600_000;
const DATE: &str = "Sun, 22 Nov 2026 00:00:00 GMT";
const SHARDS: usize = 2;

fn service() -> Service {
    service_in(Arc::new(Lifecycle::new(NOW_MS)))
}

fn service_in(lifecycle: Arc<Lifecycle>) -> Service {
    let accounts = Accounts::new(&[(
        DEVELOPMENT_ACCOUNT_NAME.to_string(),
        vec![DEVELOPMENT_ACCOUNT_KEY.to_string()],
    )])
    .unwrap();
    let health = Health {
        lifecycle,
        backend: "portable",
    };
    Service::new(
        accounts,
        SHARDS,
        true,
        "127.0.0.1:10001".to_string(),
        health,
    )
}

/// A request signed with SharedKey by the development account, as the SDKs sign it.
fn signed(method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Request {
    let mut all: Vec<(&str, &str)> = vec![
        ("Host", "127.0.0.1:10001"),
        ("x-ms-date", DATE),
        ("x-ms-version", "2026-04-06"),
    ];
    all.extend_from_slice(headers);
    let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
    let signature = sign_shared_key(
        method,
        target,
        &all,
        body.len() as u64,
        DEVELOPMENT_ACCOUNT_NAME,
        &key,
    )
    .unwrap();
    let authorization = format!("SharedKey {DEVELOPMENT_ACCOUNT_NAME}:{signature}");
    let length = body.len().to_string();
    all.push(("Authorization", &authorization));
    if !body.is_empty() {
        all.push(("Content-Length", &length));
    }
    Request::from_parts(
        method,
        target,
        &all,
        Bytes::copy_from_slice(body.as_bytes()),
    )
}

fn planned(request: &Request) -> String {
    let plan = service().plan(
        request,
        NOW_MS,
        IpAddr::from([127, 0, 0, 1]),
        &Replicas::default(),
    );
    format!("{:?}", plan.step)
}

const Q: &str = r#"QueueKey { account: "devstoreaccount1", name: "myqueue" }"#;
const RECEIPT: &str = "AQAAAAIAAAADAAAAAQIDBAUGBwg=";
/// `RECEIPT` as a URL carries it.
const RECEIPT_IN_URL: &str = "AQAAAAIAAAADAAAAAQIDBAUGBwg%3D";
const ID: &str = "01234567-89ab-4def-8edc-ba9876543210";

#[test]
fn requests_become_steps() {
    // The queue `q` of the development account lives on shard 1 of 2.
    let on_q = |command: String| format!("Shard {{ shard: 1, command: {command} }}");
    let message_id = format!("{:?}", MessageId::parse(ID).unwrap());
    let receipt = "PopReceipt { slot: 1, generation: 2, lease: 3, tag: 578437695752307201 }";
    let put_body = "<QueueMessage><MessageText>hi</MessageText></QueueMessage>";
    let table: Vec<(Request, String)> = vec![
        (
            signed("PUT", "/devstoreaccount1/myqueue", &[("x-ms-meta-b", "2"), ("x-ms-meta-A", "1")], ""),
            on_q(format!(
                r#"CreateQueue {{ queue: {Q}, metadata: [("A", "1"), ("b", "2")] }}"#
            )),
        ),
        (
            signed("DELETE", "/devstoreaccount1/myqueue", &[], ""),
            format!("Replicated {{ shard: 1, command: DeleteQueue {{ queue: {Q} }} }}"),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue?comp=metadata", &[], ""),
            on_q(format!("GetQueueMetadata {{ queue: {Q} }}")),
        ),
        (
            signed("HEAD", "/devstoreaccount1/myqueue?comp=metadata", &[], ""),
            on_q(format!("GetQueueMetadata {{ queue: {Q} }}")),
        ),
        (
            signed("PUT", "/devstoreaccount1/myqueue?comp=metadata", &[("x-ms-meta-k", "v")], ""),
            on_q(format!(
                r#"SetQueueMetadata {{ queue: {Q}, metadata: [("k", "v")] }}"#
            )),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue?comp=acl", &[], ""),
            on_q(format!("GetQueueAcl {{ queue: {Q} }}")),
        ),
        (
            signed(
                "PUT",
                "/devstoreaccount1/myqueue?comp=acl",
                &[],
                "<SignedIdentifiers><SignedIdentifier><Id>p</Id><AccessPolicy>\
                 <Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>",
            ),
            format!(
                "Replicated {{ shard: 1, command: SetQueueAcl {{ queue: {Q}, identifiers: \
                 [SignedIdentifier {{ id: \"p\", access_policy: Some(AccessPolicy {{ start: \
                 None, expiry: None, permission: Some(\"r\") }}) }}] }} }}"
            ),
        ),
        (
            signed(
                "GET",
                "/devstoreaccount1?comp=list&prefix=a&marker=b&maxresults=9000&include=metadata",
                &[],
                "",
            ),
            "EveryShard(ListQueues { account: \"devstoreaccount1\", prefix: \"a\", marker: \
             \"b\", results_max: 5000, include_metadata: true })"
                .to_string(),
        ),
        (
            signed("GET", "/devstoreaccount1/?comp=list", &[], ""),
            "EveryShard(ListQueues { account: \"devstoreaccount1\", prefix: \"\", marker: \"\", \
             results_max: 5000, include_metadata: false })"
                .to_string(),
        ),
        (
            signed("POST", "/devstoreaccount1/myqueue/messages?visibilitytimeout=5&messagettl=-1", &[], put_body),
            on_q(format!(
                "PutMessage {{ queue: {Q}, text: b\"hi\", visibility_timeout_s: 5, ttl_s: None }}"
            )),
        ),
        (
            signed("POST", "/devstoreaccount1/myqueue/messages", &[], put_body),
            on_q(format!(
                "PutMessage {{ queue: {Q}, text: b\"hi\", visibility_timeout_s: 0, ttl_s: \
                 Some(604800) }}"
            )),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages?numofmessages=32&visibilitytimeout=9", &[], ""),
            on_q(format!(
                "GetMessages {{ queue: {Q}, count: 32, visibility_timeout_s: 9 }}"
            )),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages", &[], ""),
            on_q(format!(
                "GetMessages {{ queue: {Q}, count: 1, visibility_timeout_s: 30 }}"
            )),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages?peekonly=true&numofmessages=3", &[], ""),
            on_q(format!("PeekMessages {{ queue: {Q}, count: 3 }}")),
        ),
        (
            signed("DELETE", "/devstoreaccount1/myqueue/messages", &[], ""),
            on_q(format!("ClearMessages {{ queue: {Q} }}")),
        ),
        (
            signed(
                "PUT",
                &format!("/devstoreaccount1/myqueue/messages/{ID}?popreceipt={RECEIPT_IN_URL}&visibilitytimeout=0"),
                &[],
                "",
            ),
            on_q(format!(
                "UpdateMessage {{ queue: {Q}, message_id: {message_id}, pop_receipt: {receipt}, \
                 visibility_timeout_s: 0, text: None }}"
            )),
        ),
        (
            signed(
                "PUT",
                &format!("/devstoreaccount1/myqueue/messages/{ID}?popreceipt={RECEIPT_IN_URL}&visibilitytimeout=1"),
                &[],
                put_body,
            ),
            on_q(format!(
                "UpdateMessage {{ queue: {Q}, message_id: {message_id}, pop_receipt: {receipt}, \
                 visibility_timeout_s: 1, text: Some(b\"hi\") }}"
            )),
        ),
        (
            signed(
                "DELETE",
                &format!("/devstoreaccount1/myqueue/messages/{ID}?popreceipt={RECEIPT_IN_URL}"),
                &[],
                "",
            ),
            on_q(format!(
                "DeleteMessage {{ queue: {Q}, message_id: {message_id}, pop_receipt: {receipt} }}"
            )),
        ),
        (
            signed("GET", "/devstoreaccount1/?restype=service&comp=properties", &[], ""),
            format!("Answer(ServiceProperties({:?}))", ServiceProperties::default()),
        ),
        (
            signed("GET", "/devstoreaccount1/?restype=service&comp=stats", &[], ""),
            "Fail(InvalidQueryParameterValue)".to_string(),
        ),
        // Errors found while planning: nothing reaches a shard.
        (
            signed("PUT", "/devstoreaccount1/MyQueue", &[], ""),
            "Fail(InvalidResourceName)".to_string(),
        ),
        (
            signed("PUT", "/devstoreaccount1/qq", &[], ""),
            "Fail(ResourceNameLengthOutOfRange)".to_string(),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages?numofmessages=33", &[], ""),
            "Fail(OutOfRangeQueryParameterValue)".to_string(),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages?numofmessages=x", &[], ""),
            "Fail(InvalidQueryParameterValue)".to_string(),
        ),
        (
            signed("POST", "/devstoreaccount1/myqueue/messages?visibilitytimeout=10&messagettl=10", &[], put_body),
            // The service's recorded answer (docs/PARITY.md): invalid, not out of range.
            "Fail(InvalidQueryParameterValue)".to_string(),
        ),
        (
            signed("POST", "/devstoreaccount1/myqueue/messages", &[], "<QueueMessage/>"),
            "Fail(InvalidXmlDocument)".to_string(),
        ),
        (
            signed("DELETE", &format!("/devstoreaccount1/myqueue/messages/{ID}"), &[], ""),
            "Fail(MissingRequiredQueryParameter)".to_string(),
        ),
        (
            signed("DELETE", "/devstoreaccount1/myqueue/messages/not-an-id?popreceipt=AQAAAAIAAAADAAAAAQIDBAUGBwg%3D", &[], ""),
            "Fail(MessageNotFound)".to_string(),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue?comp=metadata&timeout=-1", &[], ""),
            "Fail(OutOfRangeQueryParameterValue)".to_string(),
        ),
        (
            signed("PUT", "/devstoreaccount1-secondary/q", &[], ""),
            "Fail(InsufficientAccountPermissions)".to_string(),
        ),
        (
            signed("GET", "/nosuchaccount/q?comp=metadata", &[], ""),
            "Fail(ResourceNotFound)".to_string(),
        ),
        (
            Request::from_parts("GET", "/devstoreaccount1/myqueue?comp=metadata", &[], Bytes::new()),
            "Fail(AuthenticationFailed)".to_string(),
        ),
        (
            signed("PATCH", "/devstoreaccount1/myqueue", &[], ""),
            "Fail(UnsupportedHttpVerb)".to_string(),
        ),
        (
            Request::from_parts("OPTIONS", "/devstoreaccount1/myqueue", &[], Bytes::new()),
            "Fail(CorsRequiredHeaderMissing)".to_string(),
        ),
        (
            Request::from_parts(
                "OPTIONS",
                "/devstoreaccount1/myqueue",
                &[("Origin", "http://a"), ("Access-Control-Request-Method", "GET")],
                Bytes::new(),
            ),
            "Fail(CorsPreflightFailure)".to_string(),
        ),
    ];
    for (request, expected) in table {
        assert_eq!(
            planned(&request),
            expected,
            "{}",
            String::from_utf8_lossy(&request.head)
        );
    }
}

#[test]
fn secondary_serves_stats_and_reads() {
    let stats = signed(
        "GET",
        "/devstoreaccount1-secondary/?restype=service&comp=stats",
        &[],
        "",
    );
    assert_eq!(planned(&stats), "Answer(Done)");
    let read = signed(
        "GET",
        "/devstoreaccount1-secondary/myqueue?comp=metadata",
        &[],
        "",
    );
    assert_eq!(
        planned(&read),
        format!("Shard {{ shard: 1, command: GetQueueMetadata {{ queue: {Q} }} }}")
    );
}

/// The response to `request` for `operation`'s `outcome`, with the request ID masked. List
/// Queues' listing arrives as the parts of two shards, dealt out in turn.
fn response(
    request: &Request,
    operation: Operation,
    outcome: Result<Reply, StorageError>,
) -> String {
    let service = service();
    let plan = service.plan(
        request,
        NOW_MS,
        IpAddr::from([127, 0, 0, 1]),
        &Replicas::default(),
    );
    assert_eq!(plan.response.operation, Some(operation));
    let outcome = match outcome {
        Ok(Reply::Queues(queues)) if operation == Operation::ListQueues => {
            let mut parts = vec![Vec::new(), Vec::new()];
            for (index, queue) in queues.into_iter().enumerate() {
                parts[index % 2].push(queue);
            }
            Outcome::Parts(
                parts
                    .into_iter()
                    .map(|part| Ok(Reply::Queues(part)))
                    .collect(),
            )
        }
        outcome => Outcome::Reply(outcome),
    };
    let mut out = BytesMut::new();
    service.respond(request, &plan.response, outcome, NOW_MS, &mut out);
    mask_request_id(std::str::from_utf8(&out).unwrap())
}

fn mask_request_id(text: &str) -> String {
    let mut masked = String::new();
    for line in text.split_inclusive("\r\n") {
        if line.starts_with("x-ms-request-id: ") {
            masked.push_str("x-ms-request-id: ID\r\n");
        } else if let Some(at) = line.find("RequestId:") {
            masked.push_str(&line[..at]);
            masked.push_str("RequestId:ID");
            masked.push_str(&line[at + "RequestId:".len() + 36..]);
        } else {
            masked.push_str(line);
        }
    }
    masked
}

/// The head every answer to `signed` starts with after its status line.
fn common_head(status: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nServer: azq/{}\r\nx-ms-request-id: ID\r\nx-ms-version: \
         2026-04-06\r\nDate: {DATE}\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn view(receipt: bool, text: &str) -> MessageView {
    MessageView {
        message_id: MessageId::parse(ID).unwrap(),
        insertion_ms: NOW_MS,
        expiration_ms: NOW_MS + 1000,
        pop_receipt: receipt.then_some(PopReceipt {
            slot: 1,
            generation: 2,
            lease: 3,
            tag: 0x0807_0605_0403_0201,
        }),
        time_next_visible_ms: NOW_MS + 2000,
        dequeue_count: 1,
        text: Bytes::copy_from_slice(text.as_bytes()),
    }
}

#[test]
fn replies_become_responses() {
    let put_body = "<QueueMessage><MessageText>hi</MessageText></QueueMessage>";
    let xml = "Content-Type: application/xml\r\n";
    let empty = "Content-Length:          0\r\n\r\n";
    // A masked request ID is 34 bytes shorter than the 36 of the real one.
    let length = |body: &str| {
        let unmasked = body.len() + 34 * body.matches("RequestId:ID").count();
        format!("Content-Length: {unmasked:>10}\r\n\r\n{body}")
    };
    let declaration = r#"<?xml version="1.0" encoding="utf-8"?>"#;
    let message_times = "<InsertionTime>Sun, 22 Nov 2026 00:00:00 GMT</InsertionTime>\
        <ExpirationTime>Sun, 22 Nov 2026 00:00:01 GMT</ExpirationTime>";
    let table: Vec<(Request, Operation, Result<Reply, StorageError>, String)> = vec![
        (
            signed("PUT", "/devstoreaccount1/myqueue", &[], ""),
            Operation::CreateQueue,
            Ok(Reply::QueueCreated),
            format!("{}{empty}", common_head("201 Created")),
        ),
        (
            signed("PUT", "/devstoreaccount1/myqueue", &[], ""),
            Operation::CreateQueue,
            Ok(Reply::QueueExists),
            format!("{}{empty}", common_head("204 No Content")),
        ),
        (
            signed("PUT", "/devstoreaccount1/myqueue", &[], ""),
            Operation::CreateQueue,
            Err(StorageError::QueueAlreadyExists),
            format!(
                "{}x-ms-error-code: QueueAlreadyExists\r\n{xml}{}",
                common_head("409 The specified queue already exists."),
                length(&format!(
                    "{declaration}<Error><Code>QueueAlreadyExists</Code><Message>The specified \
                     queue already exists.\nRequestId:ID\nTime:2026-11-22T00:00:00.0000000Z\
                     </Message></Error>"
                ))
            ),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue?comp=metadata", &[("x-ms-client-request-id", "c")], ""),
            Operation::GetQueueMetadata,
            Ok(Reply::Metadata {
                metadata: vec![("Alpha".to_string(), "1".to_string())],
                approximate_messages_count: 7,
            }),
            format!(
                "{}x-ms-client-request-id: c\r\nDate: {DATE}\r\n\
                 x-ms-approximate-messages-count: 7\r\nx-ms-meta-Alpha: 1\r\n{empty}",
                common_head("200 OK").replace(&format!("Date: {DATE}\r\n"), "")
            ),
        ),
        (
            signed("HEAD", "/devstoreaccount1/myqueue?comp=metadata", &[], ""),
            Operation::GetQueueMetadata,
            Err(StorageError::QueueNotFound),
            // HEAD: the error's headers, its length, and no body.
            format!(
                "{}x-ms-error-code: QueueNotFound\r\n{xml}Content-Length:        \
                 {}\r\n\r\n",
                common_head("404 The specified queue does not exist."),
                declaration.len()
                    + 34
                    + "<Error><Code>QueueNotFound</Code><Message>The specified queue does not \
                       exist.\nRequestId:ID\nTime:2026-11-22T00:00:00.0000000Z</Message></Error>"
                        .len()
            ),
        ),
        (
            signed(
                "GET",
                "/devstoreaccount1?comp=list&prefix=q&maxresults=1&include=metadata",
                &[],
                "",
            ),
            Operation::ListQueues,
            Ok(Reply::Queues(vec![
                QueueListing {
                    name: "qb".to_string(),
                    metadata: Some(Vec::new()),
                },
                QueueListing {
                    name: "qa".to_string(),
                    metadata: Some(vec![("k".to_string(), "v".to_string())]),
                },
            ])),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!(
                    "{declaration}<EnumerationResults ServiceEndpoint=\"http://127.0.0.1:10001/\
                     devstoreaccount1/\"><Prefix>q</Prefix><MaxResults>1</MaxResults><Queues>\
                     <Queue><Name>qa</Name><Metadata><k>v</k></Metadata></Queue></Queues>\
                     <NextMarker>qb</NextMarker></EnumerationResults>"
                ))
            ),
        ),
        (
            signed("GET", "/devstoreaccount1/?comp=list&marker=qa", &[], ""),
            Operation::ListQueues,
            Ok(Reply::Queues(vec![QueueListing {
                name: "qa".to_string(),
                metadata: None,
            }])),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!(
                    "{declaration}<EnumerationResults ServiceEndpoint=\"http://127.0.0.1:10001/\
                     devstoreaccount1/\"><Marker>qa</Marker><Queues><Queue><Name>qa</Name>\
                     </Queue></Queues><NextMarker /></EnumerationResults>"
                ))
            ),
        ),
        (
            signed("POST", "/devstoreaccount1/myqueue/messages", &[], put_body),
            Operation::PutMessage,
            Ok(Reply::Messages(vec![view(true, "")])),
            format!(
                "{}{xml}{}",
                common_head("201 Created"),
                length(&format!(
                    "{declaration}<QueueMessagesList><QueueMessage><MessageId>{ID}</MessageId>\
                     {message_times}<PopReceipt>{RECEIPT}</PopReceipt><TimeNextVisible>Sun, 22 \
                     Nov 2026 00:00:02 GMT</TimeNextVisible></QueueMessage></QueueMessagesList>"
                ))
            ),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages", &[], ""),
            Operation::GetMessages,
            Ok(Reply::Messages(vec![view(true, "a<b")])),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!(
                    "{declaration}<QueueMessagesList><QueueMessage><MessageId>{ID}</MessageId>\
                     {message_times}<PopReceipt>{RECEIPT}</PopReceipt><TimeNextVisible>Sun, 22 \
                     Nov 2026 00:00:02 GMT</TimeNextVisible><DequeueCount>1</DequeueCount>\
                     <MessageText>a&lt;b</MessageText></QueueMessage></QueueMessagesList>"
                ))
            ),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages?peekonly=true", &[], ""),
            Operation::PeekMessages,
            Ok(Reply::Messages(vec![view(false, "x")])),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!(
                    "{declaration}<QueueMessagesList><QueueMessage><MessageId>{ID}</MessageId>\
                     {message_times}<DequeueCount>1</DequeueCount><MessageText>x</MessageText>\
                     </QueueMessage></QueueMessagesList>"
                ))
            ),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue/messages", &[], ""),
            Operation::GetMessages,
            Ok(Reply::Messages(Vec::new())),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!("{declaration}<QueueMessagesList />"))
            ),
        ),
        (
            signed(
                "PUT",
                &format!("/devstoreaccount1/myqueue/messages/{ID}?popreceipt={RECEIPT_IN_URL}&visibilitytimeout=2"),
                &[],
                "",
            ),
            Operation::UpdateMessage,
            Ok(Reply::Updated {
                pop_receipt: PopReceipt {
                    slot: 1,
                    generation: 2,
                    lease: 3,
                    tag: 0x0807_0605_0403_0201,
                },
                time_next_visible_ms: NOW_MS + 2000,
            }),
            format!(
                "{}x-ms-popreceipt: {RECEIPT}\r\nx-ms-time-next-visible: Sun, 22 Nov 2026 \
                 00:00:02 GMT\r\n{empty}",
                common_head("204 No Content")
            ),
        ),
        (
            signed("DELETE", "/devstoreaccount1/myqueue/messages", &[], ""),
            Operation::ClearMessages,
            Ok(Reply::Done),
            format!("{}{empty}", common_head("204 No Content")),
        ),
        (
            signed("DELETE", "/devstoreaccount1/myqueue", &[], ""),
            Operation::DeleteQueue,
            Ok(Reply::Done),
            format!("{}{empty}", common_head("204 No Content")),
        ),
        (
            signed("PUT", "/devstoreaccount1/myqueue?comp=acl", &[], "<SignedIdentifiers/>"),
            Operation::SetQueueAcl,
            Ok(Reply::Done),
            format!("{}{empty}", common_head("204 No Content")),
        ),
        (
            signed("GET", "/devstoreaccount1/myqueue?comp=acl", &[], ""),
            Operation::GetQueueAcl,
            Ok(Reply::AccessPolicies(
                vec![SignedIdentifier {
                    id: "p".to_string(),
                    access_policy: None,
                }]
                .into(),
            )),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!(
                    "{declaration}<SignedIdentifiers><SignedIdentifier><Id>p</Id>\
                     </SignedIdentifier></SignedIdentifiers>"
                ))
            ),
        ),
        (
            signed(
                "PUT",
                "/devstoreaccount1/?restype=service&comp=properties",
                &[],
                "<StorageServiceProperties/>",
            ),
            Operation::SetServiceProperties,
            Ok(Reply::Done),
            format!("{}{empty}", common_head("202 Accepted")),
        ),
        (
            signed("GET", "/devstoreaccount1-secondary/?restype=service&comp=stats", &[], ""),
            Operation::GetServiceStats,
            Ok(Reply::Done),
            format!(
                "{}{xml}{}",
                common_head("200 OK"),
                length(&format!(
                    "{declaration}<StorageServiceStats><GeoReplication><Status>live</Status>\
                     <LastSyncTime>{DATE}</LastSyncTime></GeoReplication></StorageServiceStats>"
                ))
            ),
        ),
    ];
    for (request, operation, outcome, expected) in table {
        assert_eq!(
            response(&request, operation, outcome),
            expected,
            "{}",
            String::from_utf8_lossy(&request.head)
        );
    }
}

#[test]
fn service_properties_response_is_the_settings_document() {
    let request = signed(
        "GET",
        "/devstoreaccount1/?restype=service&comp=properties",
        &[],
        "",
    );
    let text = response(
        &request,
        Operation::GetServiceProperties,
        Ok(Reply::ServiceProperties(Arc::new(
            ServiceProperties::default(),
        ))),
    );
    let mut body = BytesMut::new();
    super::settings_xml::service_properties_into(&mut body, &ServiceProperties::default());
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.starts_with(&common_head("200 OK")), "{text}");
    assert!(text.ends_with(&format!("\r\n\r\n{body}")), "{text}");
}

#[test]
fn host_style_list_names_the_host_as_endpoint() {
    // Signed for the host-style URL: the canonical resource is /account/.
    let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
    let headers = [
        ("Host", "devstoreaccount1.queue.localhost:10001"),
        ("x-ms-date", DATE),
        ("x-ms-version", "2026-04-06"),
    ];
    let signature = sign_shared_key(
        "GET",
        "/?comp=list",
        &headers,
        0,
        DEVELOPMENT_ACCOUNT_NAME,
        &key,
    )
    .unwrap();
    let authorization = format!("SharedKey {DEVELOPMENT_ACCOUNT_NAME}:{signature}");
    let mut all = headers.to_vec();
    all.push(("Authorization", &authorization));
    let request = Request::from_parts("GET", "/?comp=list", &all, Bytes::new());
    let text = response(
        &request,
        Operation::ListQueues,
        Ok(Reply::Queues(Vec::new())),
    );
    assert!(
        text.contains(
            "ServiceEndpoint=\"http://devstoreaccount1.queue.localhost:10001/\"><Queues />"
        ),
        "{text}"
    );
}

#[test]
fn health_follows_the_lifecycle_without_credentials() {
    let lifecycle = Arc::new(Lifecycle::new(NOW_MS - 61_000));
    let service = service_in(lifecycle.clone());
    let answer = |method: &str, target: &str| {
        // A Host the control plane answers to, as every HTTP/1.1 client sends one.
        let request = Request::from_parts(method, target, &[("Host", "127.0.0.1")], Bytes::new());
        let plan = service.plan(
            &request,
            NOW_MS,
            IpAddr::from([127, 0, 0, 1]),
            &Replicas::default(),
        );
        let outcome = Outcome::Reply(match plan.step {
            super::Step::Answer(reply) => Ok(reply),
            super::Step::Fail(error) => Err(error),
            other => panic!("{other:?}"),
        });
        let mut out = BytesMut::new();
        service.respond(&request, &plan.response, outcome, NOW_MS, &mut out);
        mask_request_id(std::str::from_utf8(&out).unwrap())
    };
    let body = |state: &str| {
        format!("{{\"status\":\"{state}\",\"shards\":2,\"backend\":\"portable\",\"uptime_s\":61}}")
    };
    let starting = answer("GET", "/_azq/health");
    assert!(starting.starts_with("HTTP/1.1 503 "), "{starting}");
    assert!(starting.ends_with(&body("starting")), "{starting}");
    lifecycle.set_serving();
    let serving = answer("GET", "/_azq/health");
    assert!(serving.starts_with("HTTP/1.1 200 OK\r\n"), "{serving}");
    assert!(
        serving.contains("Content-Type: application/json\r\n"),
        "{serving}"
    );
    assert!(serving.ends_with(&body("serving")), "{serving}");
    let head = answer("HEAD", "/_azq/health");
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    lifecycle.request_stop();
    assert!(answer("GET", "/_azq/health").ends_with(&body("draining")));
    // Other verbs and other paths under /_azq/ are Azure errors.
    assert!(answer("PUT", "/_azq/health").starts_with("HTTP/1.1 405 "));
    assert!(answer("GET", "/_azq/nothing").starts_with("HTTP/1.1 400 "));
}

/// The whole answer to `request` on a probe port, executed as the runtime would (a probe's step
/// is an answer planning already wrote, or an error), with the request ID masked.
fn probe_response(surface: super::Surface, request: &Request) -> String {
    let service = service();
    let plan = service.plan_on(
        surface,
        request,
        NOW_MS,
        IpAddr::from([127, 0, 0, 1]),
        &Replicas::default(),
    );
    let outcome = match plan.step {
        super::Step::Admin(super::AdminStep::Answer(answer)) => Outcome::Admin(answer),
        super::Step::Fail(error) => Outcome::Reply(Err(error)),
        step => panic!("a probe planned {step:?}"),
    };
    let mut out = BytesMut::new();
    service.respond(request, &plan.response, outcome, NOW_MS, &mut out);
    mask_request_id(std::str::from_utf8(&out).unwrap())
}

/// A request to the table port signed with the table service's SharedKey layout.
fn table_signed(method: &str, target: &str, accept: &str) -> Request {
    use crate::auth::shared_key::{write_table_string_to_sign, SharedKeyScheme};
    let mut headers: Vec<(&str, &str)> = vec![
        ("Host", "127.0.0.1:10002"),
        ("x-ms-date", DATE),
        ("x-ms-version", "2019-02-02"),
        ("Accept", accept),
    ];
    let unsigned = Request::from_parts(method, target, &headers, Bytes::new());
    let mut string_to_sign = Vec::new();
    write_table_string_to_sign(
        SharedKeyScheme::SharedKey,
        method,
        unsigned.target(),
        unsigned.headers(),
        DEVELOPMENT_ACCOUNT_NAME,
        &mut string_to_sign,
    )
    .unwrap();
    let key = SigningKey::from_base64(DEVELOPMENT_ACCOUNT_KEY).unwrap();
    let authorization = format!(
        "SharedKey {DEVELOPMENT_ACCOUNT_NAME}:{}",
        key.sign_base64(&string_to_sign)
    );
    headers.push(("Authorization", &authorization));
    Request::from_parts(method, target, &headers, Bytes::new())
}

#[test]
fn probe_ports_answer_readiness_checks_and_nothing_else() {
    use super::Surface::{Blob, Table};
    // Blob List Containers, as Aspire's health check asks it (one result per page).
    let list = probe_response(
        Blob,
        &signed("GET", "/devstoreaccount1?comp=list&maxresults=1", &[], ""),
    );
    assert!(list.starts_with(&common_head("200 OK")), "{list}");
    assert!(list.ends_with(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults ServiceEndpoint=\"\
         http://127.0.0.1:10001/devstoreaccount1/\"><MaxResults>1</MaxResults><Containers />\
         <NextMarker /></EnumerationResults>"
    ));
    let properties = probe_response(
        Blob,
        &signed(
            "GET",
            "/devstoreaccount1/?restype=service&comp=properties",
            &[],
            "",
        ),
    );
    assert!(properties.contains("<StaticWebsite><Enabled>false</Enabled>"));
    // Table Query Tables, in the OData flavour asked.
    let tables = probe_response(
        Table,
        &table_signed(
            "GET",
            "/devstoreaccount1/Tables",
            "application/json;odata=minimalmetadata",
        ),
    );
    assert!(tables.contains("\r\nContent-Type: application/json;odata=minimalmetadata;"));
    assert!(tables.ends_with(
        "{\"odata.metadata\":\"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables\",\
         \"value\":[]}"
    ));
    let bare = probe_response(
        Table,
        &table_signed(
            "GET",
            "/devstoreaccount1/Tables()",
            "application/json;odata=nometadata",
        ),
    );
    assert!(bare.ends_with("\r\n\r\n{\"value\":[]}"), "{bare}");
    // Anything else: 501, in each port's error format.
    let blob_write = probe_response(Blob, &signed("PUT", "/devstoreaccount1/pictures", &[], ""));
    // The blob port's error writes its message as the reason phrase, as every Azure error does.
    assert!(
        blob_write.starts_with("HTTP/1.1 501 azq serves queues only: "),
        "{blob_write}"
    );
    assert!(blob_write.contains("x-ms-error-code: NotImplemented\r\n"));
    assert!(blob_write.contains("<Code>NotImplemented</Code><Message>azq serves queues only"));
    let table_write = probe_response(
        Table,
        &table_signed("POST", "/devstoreaccount1/Tables", "application/json"),
    );
    assert!(table_write.starts_with("HTTP/1.1 501 "), "{table_write}");
    assert!(table_write.contains(
        "{\"odata.error\":{\"code\":\"NotImplemented\",\"message\":{\"lang\":\"en-US\",\
         \"value\":\"azq serves queues only"
    ));
    // Credentials are checked as Azure checks them: the table port does not take the queue
    // service's layout, nor anything unsigned.
    let queue_layout = probe_response(Table, &signed("GET", "/devstoreaccount1/Tables", &[], ""));
    assert!(queue_layout.starts_with("HTTP/1.1 403 "), "{queue_layout}");
    assert!(queue_layout.contains("\"code\":\"AuthenticationFailed\""));
    let unsigned = Request::from_parts(
        "GET",
        "/devstoreaccount1?comp=list",
        &[("Host", "127.0.0.1:10000")],
        Bytes::new(),
    );
    let refused = probe_response(Blob, &unsigned);
    assert!(
        refused.contains("<Code>AuthenticationFailed</Code>"),
        "{refused}"
    );
    // An unknown account is the service's 404, as on the queue port.
    let unknown = probe_response(Blob, &signed("GET", "/nobody?comp=list", &[], ""));
    assert!(unknown.starts_with("HTTP/1.1 404 "), "{unknown}");
}
