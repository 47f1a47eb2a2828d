//! testcontainers-modules' Azurite module (feature `azurite`), unchanged but for the image name:
//! it runs the command `azurite --blobHost 0.0.0.0 …` and waits for "Azurite Table service is
//! successfully listening at http://0.0.0.0:10002" on stdout. scripts/container-test.sh points it
//! at podman's Docker-compatible socket (DOCKER_HOST). The queue round trip is signed here with
//! SharedKey by hand: Rust has no stable official Azure queue SDK. The mapped port is read with
//! `podman port` where the library cannot read podman 4.3's port bindings (see below).

use std::io::{Read, Write};
use std::net::TcpStream;

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use hmac::{Hmac, Mac};
use testcontainers_modules::azurite::{Azurite, QUEUE_PORT};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::ImageExt;

const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// One SharedKey-signed request on a fresh connection: the status and the body.
fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let date = httpdate();
    let length = if body.is_empty() {
        String::new()
    } else {
        body.len().to_string()
    };
    let content_type = if body.is_empty() {
        ""
    } else {
        "application/xml"
    };
    let (resource, query) = path.split_once('?').unwrap_or((path, ""));
    let mut canonical_query = String::new();
    let mut pairs: Vec<(&str, &str)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter_map(|p| p.split_once('='))
        .collect();
    pairs.sort();
    for (name, value) in pairs {
        canonical_query.push_str(&format!("\n{name}:{value}"));
    }
    let string_to_sign = format!(
        "{method}\n\n\n{length}\n\n{content_type}\n\n\n\n\n\n\nx-ms-date:{date}\n\
         x-ms-version:2026-04-06\n/{ACCOUNT}{resource}{canonical_query}"
    );
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&BASE64.decode(KEY).unwrap()).unwrap();
    mac.update(string_to_sign.as_bytes());
    let signature = BASE64.encode(mac.finalize().into_bytes());
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx-ms-date: {date}\r\n\
         x-ms-version: 2026-04-06\r\nAuthorization: SharedKey {ACCOUNT}:{signature}\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !content_type.is_empty() {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_string();
    (status, body)
}

/// Now in RFC 1123, without a date crate: days since the epoch to a civil date.
fn httpdate() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let month_name = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {month_name} {year} {:02}:{:02}:{:02} GMT",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// The host port podman mapped `container_port` of container `id` to (`podman port`).
fn podman_port(id: &str, container_port: u16) -> u16 {
    let output = std::process::Command::new("podman")
        .args(["port", id, &format!("{container_port}/tcp")])
        .output()
        .expect("podman runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let first = text
        .lines()
        .next()
        .unwrap_or_else(|| panic!("podman port: {output:?}"));
    first
        .rsplit(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("a port")
}

#[tokio::test]
async fn testcontainers_modules_azurite_starts_azq() {
    let Ok(image) = std::env::var("AZQ_IMAGE") else {
        eprintln!("skipped: AZQ_IMAGE unset (run through scripts/container-test.sh)");
        return;
    };
    let (name, tag) = image.rsplit_once(':').expect("IMAGE:TAG");
    let container = Azurite::default()
        .with_name(name)
        .with_tag(tag)
        .start()
        .await
        .expect("the module starts the image and sees its ready line");
    // Docker reports the binding's HostIp as 0.0.0.0; podman 4.3's compatible API leaves it
    // empty, which testcontainers 0.27 skips (PortNotExposed): then ask podman itself.
    let port = match container.get_host_port_ipv4(QUEUE_PORT).await {
        Ok(port) => port,
        Err(_) => podman_port(container.id(), 10001),
    };
    let queue = format!("/{ACCOUNT}/rust-testcontainers");
    assert_eq!(request(port, "PUT", &queue, "").0, 201);
    let put =
        "<QueueMessage><MessageText>through testcontainers-modules</MessageText></QueueMessage>";
    assert_eq!(
        request(port, "POST", &format!("{queue}/messages"), put).0,
        201
    );
    let (status, body) = request(port, "GET", &format!("{queue}/messages"), "");
    assert_eq!(status, 200);
    assert!(
        body.contains("<MessageText>through testcontainers-modules</MessageText>"),
        "{body}"
    );
}
