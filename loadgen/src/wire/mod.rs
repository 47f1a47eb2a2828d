//! The bytes on the wire, without I/O: requests encoded into a reused buffer and signed with
//! azq's own SharedKey code; responses parsed from a buffer (status, the headers the scenarios
//! need, a Content-Length or chunked body); and the fields of a Get Messages XML answer.
//!
//! - `mark`: what a producer writes at the start of a message text (send timestamp, put mark);
//!   the ground floor, which the command line and the metrics read too.
//! - `request`: requests encoded and signed; the hot path does not allocate.
//! - `response`: response heads and chunked bodies.
//! - `listing`: the messages of a Get or Peek answer.
//! - `exposition`: the server's `/_azq/metrics` (Prometheus text) and the series a run draws.

pub mod exposition;
pub mod listing;
pub mod mark;
pub mod request;
pub mod response;
