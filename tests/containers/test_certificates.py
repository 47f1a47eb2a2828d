"""HTTPS as the Testcontainers Azurite modules set it up: their commands, their certificate paths,
and the files copied in as they copy them (owner and mode), then the official Python SDK over
HTTPS against each.

What the libraries do (read in their sources):
- Node, `@testcontainers/azurite` 12.1 (packages/modules/azurite/src/azurite-container.ts):
  entrypoint `azurite`, command `--blobHost 0.0.0.0 --blobPort 10000 --queueHost 0.0.0.0
  --queuePort 10001 --tableHost 0.0.0.0 --tablePort 10002`, then for `withSsl(cert, key)`
  `--cert /azurite-cert.pem --key /azurite-key.pem`, for `withSslPfx(pfx, password)` `--cert
  /azurite-cert.pfx --pwd PASSWORD`, and `withOAuth()` adds `--oauth basic`. The contents are
  copied before the start by one put-archive to `/` of a tar made by archiver 7 (tar-stream):
  no owner given, so uid 0, gid 0 and no names; the certificate (PEM or PFX) mode 0644, the key
  0600. Its 12.x lines need Node 22, which this machine lacks, so the archive is made here with
  those headers and put through podman's Docker-compatible API as the library puts it.
- Java, `org.testcontainers:azure` AzuriteContainer: the image's entrypoint, command `azurite
  --blobHost 0.0.0.0 --queueHost 0.0.0.0 --tableHost 0.0.0.0 --cert /cert.pem --key /key.pem`
  (or `--cert /cert.pfx --pwd PASSWORD`), the files copied with `withCopyFileToContainer`:
  commons-compress tar entries carrying the host file's uid, gid, owner names and mode (here a
  CI runner's 1001:1001, the key or archive 0600). Java is not run here; the same archive is.
Docker extracts such an archive with the owners its headers name; podman 4.3's API gives every
file to root, so `put_archive` sets the headers' owners itself, and each test checks the owner
and mode the file has in the container.

Azurite's image runs as root, which reads those files whoever owns them. azq's image starts as
root too, reads them, then runs as 65532 (AZQ_RUN_AS): checked in /proc. Started unprivileged
from the first instruction (`--user 65532:65532`, what the image did before), the Node key is
unreadable, and azq says so.
"""

import base64
import datetime
import io
import ipaddress
import json
import os
import tarfile
import time
import uuid
from pathlib import Path

import docker
import pytest
from azure.core.credentials import AccessToken
from azure.storage.queue import QueueServiceClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from conftest import CLIENT_KWARGS, podman, unique

PFX_PASSWORD = "azq-testcontainers"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
EVERY_ADDRESS = ["--blobHost", "0.0.0.0", "--queueHost", "0.0.0.0", "--tableHost", "0.0.0.0"]
# @testcontainers/azurite 12.x: the hosts and the three ports, always.
NODE_COMMAND = [
    "--blobHost", "0.0.0.0", "--blobPort", "10000", "--queueHost", "0.0.0.0", "--queuePort",
    "10001", "--tableHost", "0.0.0.0", "--tablePort", "10002",
]
# A CI runner's user, as Java's tar entries carry the host file's owner.
HOST_UID, HOST_GID, HOST_USER = 1001, 1001, "runner"
# What the modules wait for: Node and .NET the three lines, Java the three ports.
LISTENING = "Table service is successfully listening at https://0.0.0.0:10002"


@pytest.fixture(scope="module")
def certificate():
    """A self-signed ECDSA certificate for 127.0.0.1 and localhost: {"cert": PEM bytes, "key":
    PKCS#8 PEM bytes, "pfx": PKCS#12 bytes (PFX_PASSWORD)}."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "azq testcontainers")])
    now = datetime.datetime.now(datetime.timezone.utc)
    made = (
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
    return {
        "cert": made.public_bytes(serialization.Encoding.PEM),
        "key": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        "pfx": pkcs12.serialize_key_and_certificates(
            b"azq", key, made, None,
            serialization.BestAvailableEncryption(PFX_PASSWORD.encode()),
        ),
    }


def archive(entries) -> bytes:
    """A tar of `entries` (name, content, mode, uid, gid, owner name), ustar as both libraries
    write it, ending with the two zero blocks that end an archive, as Node's tar-stream writes
    it. Python's tarfile then pads to a 10 KiB record; podman's copier stops reading after the
    two zero blocks and closes its pipe, so a PUT with that padding can fail with a 500 "passing
    bulk input to subprocess: write |1: broken pipe" (containers/buildah#6573; Testcontainers
    for .NET trims it the same way)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, content, mode, uid, gid, owner in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(content), mode, uid, gid
            info.uname = info.gname = owner
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(content))
        members_end = tar.offset
    written = buffer.getvalue()
    end = members_end + 2 * tarfile.BLOCKSIZE
    assert len(written) >= end and not written[members_end:].strip(b"\0"), "not zeros at the end"
    return written[:end]


def put_archive(entries):
    """A `before_start` that puts `entries` at `/` through the Docker-compatible API, as both
    libraries do (PUT /containers/{id}/archive?path=/, no copyUIDGID). Docker gives each file the
    owner its tar header names; podman 4.3 gives them all to root. So the owners are then set
    as the headers say, in the container's file system (`podman mount`), which makes podman's
    result Docker's."""

    def put(name):
        client = docker.from_env()
        try:
            assert client.api.put_archive(name, "/", archive(entries))
        finally:
            client.close()
        root = Path(podman("mount", name).stdout.strip())
        try:
            for entry, _, _, uid, gid, _ in entries:
                os.chown(root / entry, uid, gid)
        finally:
            podman("umount", name)

    return put


def node_files(certificate, kind):
    """What @testcontainers/azurite copies for withSsl ("pem") or withSslPfx ("pfx")."""
    if kind == "pem":
        return [("azurite-cert.pem", certificate["cert"], 0o644, 0, 0, ""),
                ("azurite-key.pem", certificate["key"], 0o600, 0, 0, "")]
    return [("azurite-cert.pfx", certificate["pfx"], 0o644, 0, 0, "")]


def java_files(certificate, kind):
    """What AzuriteContainer (Java) copies for withSsl(pem, key) or withSsl(pfx, password), from
    files a CI runner owns, the key and the archive private to it."""
    owner = (HOST_UID, HOST_GID, HOST_USER)
    if kind == "pem":
        return [("cert.pem", certificate["cert"], 0o644, *owner),
                ("key.pem", certificate["key"], 0o600, *owner)]
    return [("cert.pfx", certificate["pfx"], 0o600, *owner)]


def owner_and_mode(container, path: str) -> tuple:
    """The uid, gid and mode `path` has in the container's file system (`podman mount`; `podman
    cp` out would report every file as root's)."""
    root = Path(podman("mount", container.name).stdout.strip())
    try:
        found = os.stat(root / path.lstrip("/"))
    finally:
        podman("umount", container.name)
    return found.st_uid, found.st_gid, found.st_mode & 0o7777


def process_ids(container) -> list:
    """The real, effective, saved and file-system uids and gids of the container's azq (pid 1
    inside; the same numbers on the host under rootful podman)."""
    pid = container.inspect()["State"]["Pid"]
    status = open(f"/proc/{pid}/status").read().splitlines()
    fields = {line.split(":")[0]: line.split()[1:] for line in status}
    return fields["Uid"] + fields["Gid"]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class UnsignedTokenCredential:
    """A TokenCredential handing out unsigned JWTs with Azure AD's claims (`--oauth basic` checks
    the claims, not the signature, as Azurite does)."""

    def get_token(self, *scopes, **kwargs):
        now = int(time.time())
        claims = {
            "aud": "https://storage.azure.com", "iss": f"https://sts.windows.net/{TENANT}/",
            "iat": now - 60, "nbf": now - 60, "exp": now + 3600, "oid": str(uuid.uuid4()),
            "tid": TENANT, "ver": "1.0",
        }
        header = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        return AccessToken(f"{header}.{b64url(json.dumps(claims).encode())}.", now + 3600)


def round_trip_over_https(container, certificate, tmp_path, credential=None):
    """The SDK over HTTPS, trusting only the test's certificate: with the connection string the
    modules build (account key), or with `credential` on the queue endpoint."""
    trusted = tmp_path / "trusted.pem"
    trusted.write_bytes(certificate["cert"])
    if credential is None:
        service = QueueServiceClient.from_connection_string(
            container.connection_string("https"), connection_verify=str(trusted), **CLIENT_KWARGS
        )
    else:
        service = QueueServiceClient(container.url(10001, "https"), credential=credential,
                                     connection_verify=str(trusted), **CLIENT_KWARGS)
    with service:
        queue = service.get_queue_client(unique("https"))
        queue.create_queue()
        queue.send_message("over HTTPS, as Testcontainers set it up")
        [message] = queue.receive_messages(max_messages=1)
        assert message.content == "over HTTPS, as Testcontainers set it up"
        queue.delete_message(message)
        queue.delete_queue()


CASES = {
    # name: (run options, command, files(certificate), bearer token)
    "node-withSsl": (
        ("--entrypoint", "azurite"),
        [*NODE_COMMAND, "--cert", "/azurite-cert.pem", "--key", "/azurite-key.pem"],
        lambda certificate: node_files(certificate, "pem"), False,
    ),
    "node-withSslPfx": (
        ("--entrypoint", "azurite"),
        [*NODE_COMMAND, "--cert", "/azurite-cert.pfx", "--pwd", PFX_PASSWORD],
        lambda certificate: node_files(certificate, "pfx"), False,
    ),
    "node-withSsl-withOAuth": (
        ("--entrypoint", "azurite"),
        [*NODE_COMMAND, "--cert", "/azurite-cert.pem", "--key", "/azurite-key.pem",
         "--oauth", "basic"],
        lambda certificate: node_files(certificate, "pem"), True,
    ),
    "java-withSsl-pem": (
        (),
        ["azurite", *EVERY_ADDRESS, "--cert", "/cert.pem", "--key", "/key.pem"],
        lambda certificate: java_files(certificate, "pem"), False,
    ),
    "java-withSsl-pfx": (
        (),
        ["azurite", *EVERY_ADDRESS, "--cert", "/cert.pfx", "--pwd", PFX_PASSWORD],
        lambda certificate: java_files(certificate, "pfx"), False,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_testcontainers_certificates(run, certificate, tmp_path, case):
    options, command, files, bearer = CASES[case]
    entries = files(certificate)
    container = run(*options, command=command, before_start=put_archive(entries))
    logs = container.wait_for_log(LISTENING)
    assert "azq listening on https://0.0.0.0:10001 " in logs, logs
    # Copied as the library copies them: the owner and mode its tar headers give.
    for name, _, mode, uid, gid, _ in entries:
        assert owner_and_mode(container, f"/{name}") == (uid, gid, mode), name
    # Read as root, then served as 65532 (real, effective, saved and file-system ids).
    assert process_ids(container) == ["65532"] * 8, process_ids(container)
    assert container.healthcheck()
    credential = UnsignedTokenCredential() if bearer else None
    round_trip_over_https(container, certificate, tmp_path, credential)


def test_started_unprivileged_the_root_only_key_is_refused_clearly(run, certificate):
    # The image as it was before it started as root: @testcontainers/azurite's key (uid 0, mode
    # 0600) cannot be read, and azq names the file and the reason.
    container = run(
        "--entrypoint", "azurite", "--user", "65532:65532",
        command=[*NODE_COMMAND, "--cert", "/azurite-cert.pem", "--key", "/azurite-key.pem"],
        before_start=put_archive(node_files(certificate, "pem")),
    )
    assert container.wait_for_exit() == 2
    logs = container.logs()
    assert "cannot read /azurite-key.pem: Permission denied" in logs, logs
