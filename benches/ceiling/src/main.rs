//! `azq-ceiling --response FILE [--port PORT]`: the ceiling of issue 27, a do-nothing HTTP/1.1
//! responder. It parses every request head with httparse and reads past its body
//! (Content-Length), pipelined requests included, and answers each with the bytes of FILE (a
//! real azq Put response, captured by scripts/bench-ceiling.sh), storing nothing. Only a GET
//! gets another answer, an empty queue's Get Queue Metadata (`METADATA_RESPONSE`): azq-loadgen
//! asks for the queues' depths before it starts and after it ends. One tokio
//! current-thread runtime on one thread, like one shard of azq's portable backend: what any
//! server must spend per request on this machine's loopback, against which azq's rate and CPU
//! per request are read. It prints azq's ready line (`listening on http://127.0.0.1:PORT`), so
//! the scripts wait for it as for azq. Loopback only.

use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Headers one request may have; more closes the connection (azq allows as many).
const HEADERS_MAX: usize = 64;
/// The read buffer's first size, and how much it grows by when a request needs more.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// A request head and body larger than this closes the connection (azq's own bound is similar:
/// a 64 KiB message, base64, in XML).
const REQUEST_BYTES_MAX: usize = 1024 * 1024;

/// The answer to every GET: Get Queue Metadata of an empty queue, all azq-loadgen reads of it.
const METADATA_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-ms-approximate-messages-count: 0\r\n\r\n";

fn main() {
    let mut response_path = None;
    let mut port = 0u16;
    let mut arguments = std::env::args().skip(1);
    while let Some(flag) = arguments.next() {
        let value = arguments.next();
        match (flag.as_str(), value) {
            ("--response", Some(path)) => response_path = Some(path),
            ("--port", Some(text)) => match text.parse() {
                Ok(number) => port = number,
                Err(_) => usage(&format!("--port {text}: not a port number")),
            },
            _ => usage(&format!("unknown or incomplete argument {flag}")),
        }
    }
    let Some(response_path) = response_path else {
        usage("--response FILE is required");
    };
    let response = match std::fs::read(&response_path) {
        Ok(bytes) if bytes.starts_with(b"HTTP/1.1 ") => bytes,
        Ok(_) => usage(&format!("{response_path}: not an HTTP/1.1 response")),
        Err(error) => usage(&format!("{response_path}: {error}")),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap_or_else(|error| usage(&format!("cannot start tokio: {error}")));
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(port, Rc::new(response)));
}

fn usage(problem: &str) -> ! {
    eprintln!("azq-ceiling: {problem}\nusage: azq-ceiling --response FILE [--port PORT]");
    std::process::exit(2);
}

async fn serve(port: u16, response: Rc<Vec<u8>>) {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap_or_else(|error| usage(&format!("cannot listen on 127.0.0.1:{port}: {error}")));
    let address = listener
        .local_addr()
        .unwrap_or_else(|error| usage(&format!("no local address: {error}")));
    println!("azq-ceiling listening on http://{address}");
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // As azq does: small responses leave at once.
                let _ = stream.set_nodelay(true);
                tokio::task::spawn_local(connection(stream, Rc::clone(&response)));
            }
            Err(error) => eprintln!("azq-ceiling: accept: {error}"),
        }
    }
}

/// One connection: read what arrived, answer every complete request in it with one write,
/// keep the partial rest for the next read.
async fn connection(mut stream: TcpStream, response: Rc<Vec<u8>>) {
    let mut input = vec![0u8; READ_BUFFER_BYTES];
    let mut filled = 0;
    let mut output = Vec::with_capacity(READ_BUFFER_BYTES);
    loop {
        if filled == input.len() {
            if input.len() >= REQUEST_BYTES_MAX {
                return;
            }
            input.resize(input.len() * 2, 0);
        }
        match stream.read(&mut input[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(read) => filled += read,
        }
        let mut start = 0;
        loop {
            match request_length(&input[start..filled]) {
                Ok(Some((length, is_get))) if start + length <= filled => {
                    output.extend_from_slice(if is_get { METADATA_RESPONSE } else { &response });
                    start += length;
                }
                Ok(_) => break,
                Err(()) => return,
            }
        }
        input.copy_within(start..filled, 0);
        filled -= start;
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
    }
}

/// The length of the request at the start of `bytes` (head and body) and whether it is a GET;
/// `None` while its head is incomplete; an error for what is not HTTP/1.1 with a Content-Length
/// body.
fn request_length(bytes: &[u8]) -> Result<Option<(usize, bool)>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut request = httparse::Request::new(&mut headers);
    let head_length = match request.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let mut body_length = 0;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            body_length = std::str::from_utf8(header.value)
                .ok()
                .and_then(|text| text.trim().parse::<usize>().ok())
                .ok_or(())?;
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(());
        }
    }
    Ok(Some((
        head_length + body_length,
        request.method == Some("GET"),
    )))
}

#[cfg(test)]
mod tests {
    use super::request_length;

    #[test]
    fn request_lengths_cover_head_and_body_and_wait_for_partial_heads() {
        let put = b"POST /a/q/messages HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(request_length(put), Ok(Some((put.len(), false))));
        // Two pipelined requests: the first one's length only.
        let two = [&put[..], &put[..]].concat();
        assert_eq!(request_length(&two), Ok(Some((put.len(), false))));
        assert_eq!(request_length(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(
            request_length(b"GET / HTTP/1.1\r\n\r\n"),
            Ok(Some((18, true)))
        );
        assert_eq!(request_length(b"\x00\x01 nonsense\r\n\r\n"), Err(()));
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(request_length(chunked), Err(()));
        assert_eq!(
            request_length(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Err(())
        );
    }
}
