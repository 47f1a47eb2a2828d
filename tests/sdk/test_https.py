"""HTTPS (`--cert`) and OAuth bearer tokens (`--oauth basic`), with the official Python SDK.

Each test starts its own servers (`spawn_server`): with a PEM certificate and key, a PKCS#12 archive
and its password (both made here with `cryptography`), or `--cert auto`, whose certificate the test
fetches from `/_azq/cert.pem` and trusts by its printed fingerprint. The SDK authenticates with a
TokenCredential that hands out a well-formed, unsigned JWT (azq checks claims, not signatures, as
Azurite does). Also over raw sockets: an expired or foreign token gets 401 with Azure's challenge
(naming the token's tenant) and detail, plain HTTP to the TLS port and a client that never starts
its handshake are closed, a bearer token over plain HTTP is refused (and `--oauth` without `--cert`
starts, refusing them). A token gets and sets queue ACLs; an X.509 v1 certificate serves. `--cert
auto` keeps its certificate in the data directory across a restart, and that restart keeps every
queue and message acknowledged before it (restart_witness.py compares them). Servers run on the
default backend and, where it matters, on the portable one too.
"""

import base64
import datetime
import hashlib
import ipaddress
import json
import pathlib
import re
import socket
import ssl
import time
import uuid

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import AccessPolicy, QueueServiceClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from restart_witness import RestartWitness
from support import CLIENT_KWARGS, DEV_ACCOUNT, connection_string, error_code, status_code, unique_queue_name


TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
PFX_PASSWORD = "azq-test-password"
# Bounds every raw socket wait: a server that hangs fails the test instead of CI.
SOCKET_TIMEOUT_S = 30

FINGERPRINT_LINE = re.compile(r"SHA-256 (?P<fingerprint>[0-9A-F:]{95})")


@pytest.fixture(params=[[], ["--runtime", "portable"]], ids=["default-backend", "portable"])
def runtime(request, monkeypatch):
    """The backend arguments of a test's servers: the suite run's own (its AZQ_ARGS, e.g.
    `--runtime io_uring`, and the backend it expects), then the portable one, whatever the run
    asks of its servers."""
    if request.param:
        monkeypatch.delenv("AZQ_EXPECT_BACKEND", raising=False)
        monkeypatch.delenv("AZQ_ARGS", raising=False)
    return request.param


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_jwt(
    audience="https://storage.azure.com",
    issuer=f"https://sts.windows.net/{TENANT}/",
    lifetime_s=3600,
    not_before_offset_s=-60,
) -> tuple:
    """A JWT with Azure AD's claims and no signature; returns (token, expires_on)."""
    now = int(time.time())
    expires_on = now + lifetime_s
    header = {"alg": "none", "typ": "JWT"}
    claims = {
        "aud": audience,
        "iss": issuer,
        "iat": now + not_before_offset_s,
        "nbf": now + not_before_offset_s,
        "exp": expires_on,
        "oid": str(uuid.uuid4()),
        "tid": TENANT,
        "ver": "1.0",
    }
    token = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}."
    return token, expires_on


class UnsignedTokenCredential:
    """A TokenCredential as azure-core takes one, handing out unsigned JWTs."""

    def __init__(self, **claims):
        self.claims = claims
        self.requests = 0

    def get_token(self, *scopes, **kwargs):
        self.requests += 1
        token, expires_on = unsigned_jwt(**self.claims)
        return AccessToken(token, expires_on)


def make_certificate(directory):
    """A self-signed ECDSA certificate for 127.0.0.1 and localhost: writes cert.pem, key.pem and
    cert.pfx (key and certificate, password PFX_PASSWORD) into `directory`; returns their paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "azq test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "cert.pem"
    key_path = directory / "key.pem"
    pfx_path = directory / "cert.pfx"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pfx_path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"azq", key, certificate, None, serialization.BestAvailableEncryption(PFX_PASSWORD.encode())
        )
    )
    return cert_path, key_path, pfx_path


def printed_fingerprint(server) -> str:
    """The SHA-256 fingerprint azq printed at start."""
    match = FINGERPRINT_LINE.search(server.stdout_path.read_text())
    assert match, server.log_tail()
    return match.group("fingerprint")


def fetch_served_certificate(server, destination):
    """Fetches /_azq/cert.pem without verifying (the point is to learn what to trust), checks it is
    the certificate azq printed the fingerprint of, and writes it to `destination`."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    status, headers, body = raw_request(
        server, b"GET /_azq/cert.pem HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", context
    )
    assert status == 200, body
    pem = body.decode()
    der = ssl.PEM_cert_to_DER_cert(pem)
    fingerprint = ":".join(f"{byte:02X}" for byte in hashlib.sha256(der).digest())
    assert fingerprint == printed_fingerprint(server)
    destination.write_text(pem)
    return destination


def raw_request(server, request: bytes, context=None):
    """Sends `request` over TLS with `context` (or plain TCP when None) and reads the answer until
    the server closes; returns (status, headers dict lower-cased, body)."""
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT_S) as plain:
        stream = context.wrap_socket(plain, server_hostname="127.0.0.1") if context else plain
        stream.sendall(request)
        answer = b""
        while True:
            try:
                chunk = stream.recv(65536)
            except ssl.SSLZeroReturnError:
                break
            if not chunk:
                break
            answer += chunk
            head, separator, rest = answer.partition(b"\r\n\r\n")
            if separator:
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                if length and len(rest) >= int(length.group(1)):
                    break
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def trusting(cert_path):
    """An SSL context that trusts `cert_path` only."""
    return ssl.create_default_context(cafile=str(cert_path))


def sdk_round_trip(server, credential, cert_path):
    """With the SDK over HTTPS: create a queue, send, receive, delete the message, delete the
    queue."""
    account_url = f"https://127.0.0.1:{server.port}/{DEV_ACCOUNT}"
    with QueueServiceClient(
        account_url, credential=credential, connection_verify=str(cert_path), **CLIENT_KWARGS
    ) as service:
        queue = service.get_queue_client(unique_queue_name("https"))
        queue.create_queue()
        sent = queue.send_message("over TLS, with a token")
        received = list(queue.receive_messages(max_messages=1))
        assert [message.content for message in received] == ["over TLS, with a token"]
        assert received[0].id == sent.id
        queue.delete_message(received[0])
        assert list(queue.peek_messages()) == []
        queue.delete_queue()


def test_token_credential_over_https_with_pem_files(spawn_server, tmp_path, runtime):
    cert_path, key_path, _ = make_certificate(tmp_path)
    server = spawn_server(
        ["--cert", str(cert_path), "--key", str(key_path), "--oauth", "basic", *runtime]
    )
    assert server.scheme == "https"
    credential = UnsignedTokenCredential()
    sdk_round_trip(server, credential, cert_path)
    assert credential.requests >= 1


def test_token_credential_over_https_with_a_pfx_archive(spawn_server, tmp_path, runtime):
    cert_path, _, pfx_path = make_certificate(tmp_path)
    server = spawn_server(["--cert", str(pfx_path), "--pwd", PFX_PASSWORD, "--oauth", "basic", *runtime])
    sdk_round_trip(server, UnsignedTokenCredential(), cert_path)


def test_token_credential_over_https_with_an_automatic_certificate(spawn_server, tmp_path, runtime):
    server = spawn_server(["--cert", "auto", "--oauth", "basic", *runtime])
    cert_path = fetch_served_certificate(server, tmp_path / "served.pem")
    sdk_round_trip(server, UnsignedTokenCredential(), cert_path)
    # The same certificate verifies for the other loopback names it was made for.
    assert raw_request_to(server, "localhost", trusting(cert_path)) == 200


def raw_request_to(server, hostname, context):
    """GET /_azq/health over TLS, verifying the certificate against `hostname`."""
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT_S) as plain:
        with context.wrap_socket(plain, server_hostname=hostname) as stream:
            stream.sendall(b"GET /_azq/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = stream.recv(4096)
                if not chunk:
                    break
                answer += chunk
    return int(answer.split()[1])


V1_CERTIFICATE = pathlib.Path(__file__).resolve().parent.parent / "data" / "v1-cert.pem"
V1_KEY = V1_CERTIFICATE.with_name("v1-key.pem")


def test_a_v1_certificate_serves_the_sdk(spawn_server, runtime):
    # X.509 v1, as `openssl x509 -req -signkey` makes (tests/tls.rs says how this one was made):
    # rustls's own check refuses it at load, azq serves it. Python's ssl (OpenSSL) trusts it and
    # matches `localhost` against its common name (a v1 certificate has no subjectAltName).
    server = spawn_server(["--cert", str(V1_CERTIFICATE), "--key", str(V1_KEY), "--oauth", "basic", *runtime])
    assert raw_request_to(server, "localhost", trusting(V1_CERTIFICATE)) == 200
    # urllib3 2 (under azure-core) never matches a host against a common name, so with a v1
    # certificate the SDK can only run with verification off (`connection_verify=False`).
    account_url = f"https://localhost:{server.port}/{DEV_ACCOUNT}"
    with QueueServiceClient(
        account_url, credential=UnsignedTokenCredential(), connection_verify=False, **CLIENT_KWARGS
    ) as service:
        queue = service.get_queue_client(unique_queue_name("v1cert"))
        queue.create_queue()
        queue.send_message("served with a v1 certificate")
        assert [message.content for message in queue.receive_messages()] == ["served with a v1 certificate"]
        queue.delete_queue()


def test_an_automatic_certificate_is_kept_across_restarts(spawn_server, tmp_path, monkeypatch):
    # On disk (whatever the suite's default), so the certificate has a data directory to live in.
    monkeypatch.setenv("AZQ_PERSISTENCE", "disk")
    first = spawn_server(["--cert", "auto"])
    kept = first.log_dir / "data" / "__azq__" / "cert.pem"
    assert kept.is_file(), first.log_tail()
    assert str(kept) in first.stdout_path.read_text()
    fingerprint = printed_fingerprint(first)
    # The kept file is what the server serves: trusting it is enough.
    assert raw_request_to(first, "127.0.0.1", trusting(kept)) == 200
    # The restart must keep everything acknowledged before it too (restart_witness.py).
    with shared_key_service(first, kept) as service:
        witness = RestartWitness(service)
        witness.before_restart()
    first.process.terminate()
    first.process.wait(timeout=SOCKET_TIMEOUT_S)
    # Same data directory, so the same certificate.
    from conftest import start_server

    again = start_server(first.binary, first.log_dir, first.extra_args)
    try:
        assert printed_fingerprint_after(again, first) == fingerprint
        assert raw_request_to(again, "127.0.0.1", trusting(kept)) == 200
        with shared_key_service(again, kept) as service:
            witness.moved_to(service)
            witness.check_after_restart("SIGTERM of a server with its data on disk", again.log_tail)
    finally:
        again.process.terminate()
        again.process.wait(timeout=SOCKET_TIMEOUT_S)


def shared_key_service(server, cert_path):
    """A QueueServiceClient of `server` over HTTPS with the account key, trusting `cert_path`."""
    return QueueServiceClient.from_connection_string(
        connection_string(server.endpoint).replace("DefaultEndpointsProtocol=http;", "DefaultEndpointsProtocol=https;"),
        connection_verify=str(cert_path),
        **CLIENT_KWARGS,
    )


def printed_fingerprint_after(again, first):
    """The fingerprint the restarted server printed (its output follows the first run's)."""
    matches = FINGERPRINT_LINE.findall(again.stdout_path.read_text())
    assert len(matches) == 2, again.log_tail()
    return matches[-1]


def test_an_expired_token_is_refused_with_azures_challenge(spawn_server, tmp_path, runtime):
    cert_path, key_path, _ = make_certificate(tmp_path)
    server = spawn_server(["--cert", str(cert_path), "--key", str(key_path), "--oauth", "basic", *runtime])
    expired = UnsignedTokenCredential(lifetime_s=-3600, not_before_offset_s=-7200)
    account_url = f"https://127.0.0.1:{server.port}/{DEV_ACCOUNT}"
    with QueueServiceClient(
        account_url, credential=expired, connection_verify=str(cert_path), **CLIENT_KWARGS
    ) as service:
        with pytest.raises(HttpResponseError) as raised:
            service.get_queue_client(unique_queue_name("expired")).create_queue()
    assert isinstance(raised.value, ClientAuthenticationError)
    assert status_code(raised.value) == 401
    assert error_code(raised.value) == "InvalidAuthenticationInfo"
    # The raw answer: Azure's challenge names where to get a token (a tenant GUID: the refused
    # token's own tenant, which an emulator's account stands in for; the JavaScript SDK follows
    # only a GUID) and for which resource, and the body says why in Azure's words.
    token, _ = unsigned_jwt(lifetime_s=-3600, not_before_offset_s=-7200)
    zero_tenant = "00000000-0000-0000-0000-000000000000"
    for bad, tenant, detail in [
        (token, TENANT, "Lifetime validation failed. The token is expired."),
        (unsigned_jwt(audience="https://vault.azure.net")[0], TENANT,
         "Audience validation failed. Audience did not match."),
        ("not-a-jwt", zero_tenant, "The token is not a well-formed JWT."),
    ]:
        status, headers, body = raw_request(
            server,
            f"GET /{DEV_ACCOUNT}?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-version: 2021-08-06\r\n"
            f"Authorization: Bearer {bad}\r\nConnection: close\r\n\r\n".encode(),
            trusting(cert_path),
        )
        assert status == 401, body
        assert headers["x-ms-error-code"] == "InvalidAuthenticationInfo"
        assert headers["www-authenticate"] == (
            f"Bearer authorization_uri=https://login.microsoftonline.com/{tenant}/oauth2/authorize "
            "resource_id=https://storage.azure.com"
        )
        assert b"<Code>InvalidAuthenticationInfo</Code>" in body
        assert f"<AuthenticationErrorDetail>{detail}</AuthenticationErrorDetail>".encode() in body


def test_a_valid_token_lists_queues_and_shared_key_still_works_over_https(spawn_server, tmp_path):
    cert_path, key_path, _ = make_certificate(tmp_path)
    server = spawn_server(["--cert", str(cert_path), "--key", str(key_path), "--oauth", "basic"])
    token, _ = unsigned_jwt(
        audience=f"https://{DEV_ACCOUNT}.queue.core.windows.net",
        issuer=f"https://login.microsoftonline.com/{TENANT}/v2.0",
    )
    status, _, body = raw_request(
        server,
        f"GET /{DEV_ACCOUNT}?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-version: 2021-08-06\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode(),
        trusting(cert_path),
    )
    assert status == 200, body
    # The account key over HTTPS, through a connection string.
    with QueueServiceClient.from_connection_string(
        connection_string(server.endpoint).replace("DefaultEndpointsProtocol=http;", "DefaultEndpointsProtocol=https;"),
        connection_verify=str(cert_path),
        **CLIENT_KWARGS,
    ) as service:
        queue = service.get_queue_client(unique_queue_name("sharedkey-https"))
        queue.create_queue()
        queue.send_message("signed with the key")
        assert [message.content for message in queue.receive_messages()] == ["signed with the key"]
        queue.delete_queue()


def test_a_bearer_token_gets_and_sets_a_queue_acl(spawn_server, tmp_path):
    # Azure's RBAC table lists data actions for Get and Set Queue ACL (queues/getAcl and
    # setAcl); Azurite refuses a bearer token on both, and azq did too (403).
    cert_path, key_path, _ = make_certificate(tmp_path)
    server = spawn_server(["--cert", str(cert_path), "--key", str(key_path), "--oauth", "basic"])
    account_url = f"https://127.0.0.1:{server.port}/{DEV_ACCOUNT}"
    with QueueServiceClient(
        account_url, credential=UnsignedTokenCredential(), connection_verify=str(cert_path), **CLIENT_KWARGS
    ) as service:
        queue = service.get_queue_client(unique_queue_name("acl-token"))
        queue.create_queue()
        policy = AccessPolicy(permission="raup", expiry="2099-01-01T00:00:00Z")
        queue.set_queue_access_policy(signed_identifiers={"by-token": policy})
        assert list(queue.get_queue_access_policy()) == ["by-token"]
        queue.delete_queue()


def test_a_bearer_token_over_plain_http_is_refused(spawn_server):
    server = spawn_server([])
    assert server.scheme == "http"
    token, _ = unsigned_jwt()
    status, headers, _ = raw_request(
        server,
        f"GET /{DEV_ACCOUNT}?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-version: 2021-08-06\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode(),
    )
    assert status == 403
    assert headers["x-ms-error-code"] == "AuthenticationFailed"
    # A plain HTTP server has no certificate to hand out.
    status, _, _ = raw_request(server, b"GET /_azq/cert.pem HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 404


def test_oauth_without_https_starts_and_refuses_bearer_tokens_per_request(spawn_server):
    # As Azurite: `--oauth basic` without `--cert` starts (it used to be refused at start); a
    # bearer token over plain HTTP is refused per request, the account key still works.
    server = spawn_server(["--oauth", "basic"])
    assert server.scheme == "http"
    assert "bearer tokens are refused over plain HTTP" in server.stderr_path.read_text()
    token, _ = unsigned_jwt()
    status, headers, _ = raw_request(
        server,
        f"GET /{DEV_ACCOUNT}?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-version: 2021-08-06\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode(),
    )
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed")
    with QueueServiceClient.from_connection_string(connection_string(server.endpoint), **CLIENT_KWARGS) as service:
        assert list(service.list_queues()) == []


def read_until_closed(stream) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as closed)."""
    received = b""
    while True:
        try:
            chunk = stream.recv(4096)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


def test_plain_http_to_the_tls_port_is_closed(spawn_server, runtime):
    server = spawn_server(["--cert", "auto", *runtime])
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT_S) as stream:
        stream.sendall(b"GET /_azq/health HTTP/1.1\r\nHost: x\r\n\r\n")
        received = read_until_closed(stream)
    # At most a TLS alert record (content type 21), never an HTTP answer.
    assert not received.startswith(b"HTTP/"), received
    assert received == b"" or received[0] == 21, received


def test_a_client_that_never_starts_its_handshake_is_dropped(spawn_server, runtime):
    server = spawn_server(["--cert", "auto", *runtime])
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT_S) as stream:
        # Nothing is sent: the handshake timeout closes the connection (a socket timeout would
        # raise and fail the test instead).
        assert read_until_closed(stream) == b""
    # The server still serves.
    cert_path = server.log_dir / "served.pem"
    fetch_served_certificate(server, cert_path)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"])
def test_tls_1_2_and_1_3_with_alpn_http_1_1(spawn_server, tmp_path, version):
    server = spawn_server(["--cert", "auto"])
    cert_path = fetch_served_certificate(server, tmp_path / "served.pem")
    context = trusting(cert_path)
    context.minimum_version = version
    context.maximum_version = version
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection((server.host, server.port), timeout=SOCKET_TIMEOUT_S) as plain:
        with context.wrap_socket(plain, server_hostname="127.0.0.1") as stream:
            assert stream.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
            assert stream.selected_alpn_protocol() == "http/1.1"
            # Two pipelined requests in one write, both answered on the one session.
            request = b"GET /_azq/health HTTP/1.1\r\nHost: x\r\n\r\n"
            stream.sendall(request + request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            answer = read_until_closed_tls(stream)
    assert answer.count(b"HTTP/1.1 200 OK") == 2, answer


def read_until_closed_tls(stream) -> bytes:
    """Everything until the server ends the TLS session (close_notify or EOF)."""
    received = b""
    while True:
        try:
            chunk = stream.recv(4096)
        except ssl.SSLZeroReturnError:
            return received
        if not chunk:
            return received
        received += chunk
