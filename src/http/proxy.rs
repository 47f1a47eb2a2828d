//! The PROXY protocol header (HAProxy's `send-proxy` v1 text and `send-proxy-v2` binary) that a
//! load balancer puts before a connection's first byte, saying whom the connection is for: with
//! `--proxyProtocol` every connection must begin with one, and the client address it carries is
//! the one a SAS `sip` is checked against and the request log names. Parsed by the `ppp` crate;
//! this is the push-parser shape around it (complete, partial, refused), as `parse` has for
//! requests, and the choice of address.

use std::net::IpAddr;

use ppp::{v1, v2, HeaderResult, PartialResult};

/// What the bytes received so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// A whole header of `header_bytes` bytes (what follows is the client's), for `client`:
    /// `None` when the header names no client address (v1 `UNKNOWN`, a v2 `LOCAL` connection
    /// such as the proxy's own health check, or a UNIX socket): the connection's own peer
    /// address stands.
    Complete {
        /// The client's address.
        client: Option<IpAddr>,
        /// The header's length, to skip.
        header_bytes: usize,
    },
    /// Not yet a whole header: read more.
    Partial,
    /// Not a PROXY header, or a broken one; says why.
    Refused(String),
}

/// Reads the header at the start of `input`; a header (or its beginning) longer than
/// `header_bytes_max` is refused.
pub fn parse(input: &[u8], header_bytes_max: usize) -> ProxyHeader {
    let result = HeaderResult::parse(input);
    // ppp counts a v1 line with too few fields as incomplete even once its CR LF arrived: no
    // byte to come can complete it.
    let v1_line_ended = matches!(result, HeaderResult::V1(_)) && input.contains(&b'\n');
    if result.is_incomplete() && !v1_line_ended {
        return if input.len() >= header_bytes_max {
            ProxyHeader::Refused(format!("no whole header in {header_bytes_max} bytes"))
        } else {
            ProxyHeader::Partial
        };
    }
    let (client, header_bytes) = match result {
        HeaderResult::V1(Ok(header)) => {
            let client = match header.addresses {
                v1::Addresses::Tcp4(addresses) => Some(IpAddr::V4(addresses.source_address)),
                v1::Addresses::Tcp6(addresses) => Some(IpAddr::V6(addresses.source_address)),
                v1::Addresses::Unknown => None,
            };
            (client, header.header.len())
        }
        HeaderResult::V2(Ok(header)) => {
            let client = match (header.command, header.addresses) {
                (v2::Command::Proxy, v2::Addresses::IPv4(addresses)) => {
                    Some(IpAddr::V4(addresses.source_address))
                }
                (v2::Command::Proxy, v2::Addresses::IPv6(addresses)) => {
                    Some(IpAddr::V6(addresses.source_address))
                }
                _ => None,
            };
            (client, header.len())
        }
        HeaderResult::V1(Err(error)) => return ProxyHeader::Refused(format!("v1: {error}")),
        HeaderResult::V2(Err(error)) => return ProxyHeader::Refused(format!("v2: {error}")),
    };
    if header_bytes > header_bytes_max {
        return ProxyHeader::Refused(format!("header of {header_bytes} bytes"));
    }
    // Both versions' headers are built on (a prefix of) the input.
    debug_assert!(header_bytes <= input.len());
    ProxyHeader::Complete {
        client,
        header_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, ProxyHeader};
    use std::net::IpAddr;

    /// A v2 header: PROXY (or LOCAL) over TCP/IPv4 from 192.0.2.7:5000 to 10.0.0.1:10001, with
    /// `tlv_bytes` of TLVs.
    fn v2(command: u8, tlv_bytes: usize) -> Vec<u8> {
        let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        header.push(0x20 | command);
        header.push(0x11);
        header.extend_from_slice(&((12 + tlv_bytes) as u16).to_be_bytes());
        header.extend_from_slice(&[192, 0, 2, 7, 10, 0, 0, 1]);
        header.extend_from_slice(&5000u16.to_be_bytes());
        header.extend_from_slice(&10001u16.to_be_bytes());
        // NOOP TLVs (type 4) of 1 byte each: 4 bytes apiece.
        for _ in 0..tlv_bytes / 4 {
            header.extend_from_slice(&[0x04, 0, 1, 0]);
        }
        header
    }

    fn complete(client: Option<&str>, header_bytes: usize) -> ProxyHeader {
        ProxyHeader::Complete {
            client: client.map(|text| text.parse::<IpAddr>().unwrap()),
            header_bytes,
        }
    }

    #[test]
    fn header_table() {
        let v1_line = "PROXY TCP4 192.0.2.7 10.0.0.1 5000 10001\r\n";
        let v1_six = "PROXY TCP6 2001:db8::7 2001:db8::1 5000 10001\r\n";
        let request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let cases: Vec<(Vec<u8>, ProxyHeader)> = vec![
            (
                format!("{v1_line}{request}").into_bytes(),
                complete(Some("192.0.2.7"), v1_line.len()),
            ),
            (
                v1_six.as_bytes().to_vec(),
                complete(Some("2001:db8::7"), v1_six.len()),
            ),
            (b"PROXY UNKNOWN\r\n".to_vec(), complete(None, 15)),
            (
                [v2(1, 0), request.into()].concat(),
                complete(Some("192.0.2.7"), 28),
            ),
            (v2(1, 8), complete(Some("192.0.2.7"), 36)),
            // A LOCAL connection (the proxy's health check) names no client.
            (v2(0, 0), complete(None, 28)),
            // `azq healthcheck`'s: LOCAL, no address at all.
            (
                b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec(),
                complete(None, 16),
            ),
            // Partial headers, of either version, wait for more.
            (b"PROXY TCP4 192.0.2.7".to_vec(), ProxyHeader::Partial),
            (b"PRO".to_vec(), ProxyHeader::Partial),
            (v2(1, 0)[..20].to_vec(), ProxyHeader::Partial),
            (v2(1, 0)[..5].to_vec(), ProxyHeader::Partial),
        ];
        for (input, expected) in cases {
            assert_eq!(
                parse(&input, 4096),
                expected,
                "{:?}",
                String::from_utf8_lossy(&input)
            );
        }
        // Refused: no header at all, a broken one, or one past the bound.
        let refused: Vec<(Vec<u8>, usize)> = vec![
            (request.as_bytes().to_vec(), 4096),
            (b"PROXY TCP4 192.0.2.7 nowhere 1 2\r\n".to_vec(), 4096),
            (b"PROXY TCP9 1.2.3.4 1.2.3.4 1 2\r\n".to_vec(), 4096),
            (b"PROXY TCP4 nonsense\r\nGET / HTTP/1.1\r\n".to_vec(), 4096),
            (b"PROXY TCP4 1.2.3.4\r\n".to_vec(), 4096),
            (v2(1, 64), 64),
            (v2(1, 64)[..40].to_vec(), 32),
            ([v2(1, 0), vec![0; 200]].concat()[..12].to_vec(), 8),
        ];
        for (input, header_bytes_max) in refused {
            assert!(
                matches!(parse(&input, header_bytes_max), ProxyHeader::Refused(_)),
                "{:?}",
                String::from_utf8_lossy(&input)
            );
        }
        // A v2 header whose version nibble is wrong.
        let mut wrong_version = v2(1, 0);
        wrong_version[12] = 0x31;
        assert!(matches!(
            parse(&wrong_version, 4096),
            ProxyHeader::Refused(_)
        ));
    }
}
