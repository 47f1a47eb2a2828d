//! HTTP/1.1 without any Azure knowledge: an incremental request parser on httparse (keep-alive,
//! pipelining, Content-Length and chunked bodies, `Expect: 100-continue`, HTTP/1.0) and a response
//! writer that encodes straight into a connection's output buffer; and `proxy`, the PROXY
//! protocol header a load balancer puts before a connection's first request
//! (`--proxyProtocol`).

pub mod parse;
pub mod proxy;
pub mod query;
pub mod request;
pub mod response;

pub use parse::{ParseError, Parser, Progress};
pub use query::Query;
pub use request::{KnownHeader, Method, Request};
pub use response::ResponseWriter;
