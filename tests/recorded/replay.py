#!/usr/bin/env python3
"""Replays the real Azure Queue service's recorded answers against azq and compares them.

The official SDKs record their test suites against the real service: each request and the
service's exact status, headers and body. This tool takes the essence of every recorded request
(method, path, query, the headers that matter, body), sends it to azq, and compares what matters
of the answer: the status, `x-ms-error-code`, an error's reason phrase (the service writes the
error's message there) and the shape of the XML body (element and attribute names in order, not
values such as ids, receipts and dates).

    tests/recorded/replay.py                      # the recordings PyPI ships (see below)
    tests/recorded/replay.py --recordings DIR     # recordings of any supported format in DIR
    tests/recorded/replay.py --endpoint http://127.0.0.1:10001   # an azq already running

Where the recordings come from (they are never copied into this repository):
- By default, the source distribution of azure-storage-queue 12.0.0 on PyPI, the one release
  whose sdist ships its tests/recordings (139 vcrpy cassettes recorded against the service in
  October 2019), fetched with `pip download` into a temporary directory.
- `--recordings DIR`: files found under DIR, any mix of
  - vcrpy cassettes (`*.yaml`): azure-sdk-for-python's sdk/storage/azure-storage-queue/
    tests/recordings up to its move to the test proxy (e.g. `git checkout` a 2022 commit);
  - test-proxy recordings (`*.json` with `Entries`): azure-sdk-for-python after the move, kept
    in the Azure/azure-sdk-assets repository under the tag named by the package's assets.json;
  - JavaScript browser recordings (`*.json` with `recordings`): azure-sdk-for-js's
    sdk/storage/storage-queue/recordings/browsers (no request headers were recorded there, so
    metadata set through headers cannot be replayed faithfully).

How a recording is replayed:
- Each file starts from a fresh namespace: every queue of the account is deleted and the
  service properties are reset first. Recorded queue names are random per recording, so keeping
  them verbatim in a fresh namespace is a consistent mapping (and keeps the name tests intact).
- Any `<account>.queue.core.windows.net` becomes the development account, path style;
  `<account>-secondary` its secondary endpoint.
- Requests are signed again with SharedKey (the recorded signatures were made with the real
  account's key). A SAS is regenerated with the development key from its recorded fields, its
  times moved by the distance between the recording and now, as are the dates of stored access
  policies, so a SAS valid (or expired) then is valid (or expired) now (a time the test proxy
  sanitized away, `se=end`, becomes one that keeps the token valid). A request the service
  refused with 403 AuthenticationFailed is signed with a wrong key.
- Message ids and pop receipts the service handed out are mapped to the ones azq handed out,
  by position in the message lists and from Update Message's `x-ms-popreceipt`.

Interactions that cannot be replayed meaningfully are counted as skipped, with the reason, and
never as agreement: a request that reads messages after a lease, delay or time to live set earlier
in the recording ended in between (the recording waited; a replay does not), OAuth and user
delegation SAS (the replay runs over plain HTTP without tokens, and a user delegation SAS
cannot be signed again without the service's key), and requests to hosts other than a queue
endpoint.

The run ends with "N of M replayed interactions agree", the skipped ones by reason, and each
difference. Differences that are documented and accepted are listed in KNOWN_DIFFERENCES with
their reason; the exit status is 1 if any other difference appears (or, with --strict, any
difference at all), so the gate catches a regression.
"""

from __future__ import annotations

import argparse
import base64
import collections
import dataclasses
import datetime
import email.utils
import glob
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import xml.etree.ElementTree as ElementTree
import zipfile
import tarfile

DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
# Any other key: signatures made with it fail, as the recorded ones failed on the service.
WRONG_KEY = base64.b64encode(b"not the account key, not the account key!!").decode()
DEFAULT_SOURCE = "azure-storage-queue==12.0.0"
# The sdist the figures in docs/PARITY.md were measured on: the ground truth must not change
# under the gate unnoticed.
DEFAULT_SOURCE_SHA256 = "e56a744ed9fdea7e51750142429a192e0c26f67b0e113e9d56abfad674d0d844"
REQUEST_TIMEOUT_S = 30
STARTUP_TIMEOUT_S = 30

DEFAULT_SERVICE_PROPERTIES = (
    b'<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0'
    b"</Version><Delete>false</Delete><Read>false</Read><Write>false</Write><RetentionPolicy>"
    b"<Enabled>false</Enabled></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version>"
    b"<Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"
    b"</HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled>"
    b"<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors />"
    b"</StorageServiceProperties>"
)

# Recorded request headers that are sent again. Everything else (Authorization, dates, framing,
# transport) is the replay's own business.
FORWARDED_HEADERS = {
    "content-type",
    "accept",
    "origin",
    "access-control-request-method",
    "access-control-request-headers",
    "if-match",
    "if-none-match",
}

# Kinds of difference found by replaying and kept on purpose, with the reason (docs/PARITY.md
# explains them). Any other difference fails the run; a kind that no longer occurs is reported,
# so the list stays honest.
KNOWN_DIFFERENCES: dict[str, str] = {
    "error details": (
        "the service adds diagnostic elements after <Message> to some errors (LineNumber, "
        "LinePosition and Reason for InvalidXmlDocument; QueryParameterName, "
        "QueryParameterValue, Reason, MinimumAllowed, MaximumAllowed for query parameters); "
        "azq writes Code and Message only, which are what the SDKs act on (they show any "
        "other element as additional information)"
    ),
}


# --- Recordings -----------------------------------------------------------------------------


@dataclasses.dataclass
class Interaction:
    method: str
    uri: str
    headers: dict[str, str]  # lowercased names
    body: bytes | None
    status: int
    response_headers: dict[str, str]  # lowercased names
    response_body: str
    headers_recorded: bool = True
    # The status line's reason phrase, where the format records it (vcrpy cassettes do).
    reason: str | None = None


@dataclasses.dataclass
class Recording:
    name: str
    interactions: list[Interaction]


def first_value(value):
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return "" if value is None else str(value)


def lowered(headers) -> dict[str, str]:
    return {str(name).lower(): first_value(value) for name, value in (headers or {}).items()}


def as_bytes(body) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, list) and all(isinstance(piece, str) for piece in body):
        return "".join(body).encode("utf-8")  # the test proxy splits text bodies into lines
    return json.dumps(body).encode("utf-8")


def load_vcr_yaml(path: str) -> Recording:
    import yaml  # PyYAML; tests/sdk/requirements.txt installs it into .venv

    class Loader(yaml.SafeLoader):
        pass

    # The async cassettes pickle aiohttp's URL objects; nothing of them is needed.
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    with open(path, encoding="utf-8") as file:
        document = yaml.load(file, Loader=Loader)
    interactions = []
    for item in document.get("interactions") or []:
        request, response = item["request"], item["response"]
        body = response.get("body") or {}
        interactions.append(
            Interaction(
                method=request["method"],
                uri=request["uri"],
                headers=lowered(request.get("headers")),
                body=as_bytes(request.get("body")),
                status=int(response["status"]["code"]),
                response_headers=lowered(response.get("headers")),
                response_body=first_value(body.get("string")) if isinstance(body, dict) else "",
                reason=response["status"].get("message"),
            )
        )
    return Recording(os.path.basename(path), interactions)


def load_json(path: str) -> Recording:
    with open(path, encoding="utf-8-sig") as file:
        document = json.load(file)
    interactions = []
    if "Entries" in document:  # test proxy
        for entry in document["Entries"]:
            response_body = entry.get("ResponseBody")
            if isinstance(response_body, list):  # text split into lines, as request bodies
                response_body = "".join(piece for piece in response_body if isinstance(piece, str))
            interactions.append(
                Interaction(
                    method=entry["RequestMethod"],
                    uri=entry["RequestUri"],
                    headers=lowered(entry.get("RequestHeaders")),
                    body=as_bytes(entry.get("RequestBody")),
                    status=int(entry["StatusCode"]),
                    response_headers=lowered(entry.get("ResponseHeaders")),
                    response_body=response_body if isinstance(response_body, str) else "",
                )
            )
    elif "recordings" in document:  # azure-sdk-for-js browser recordings
        for entry in document["recordings"]:
            query = urllib.parse.urlencode(entry.get("query") or {}, quote_via=urllib.parse.quote)
            uri = entry["url"] + ("?" + query if query else "")
            interactions.append(
                Interaction(
                    method=entry["method"],
                    uri=uri,
                    headers={},
                    body=as_bytes(entry.get("requestBody")),
                    status=int(entry["status"]),
                    response_headers=lowered(entry.get("responseHeaders")),
                    response_body=entry.get("response") or "",
                    headers_recorded=False,
                )
            )
    else:
        raise ValueError("neither a test-proxy nor a JavaScript recording")
    return Recording(os.path.relpath(path), interactions)


def load_directory(directory: str) -> list[Recording]:
    recordings = []
    for path in sorted(glob.glob(os.path.join(directory, "**", "*"), recursive=True)):
        if path.endswith(".yaml"):
            recordings.append(load_vcr_yaml(path))
        elif path.endswith(".json"):
            try:
                recordings.append(load_json(path))
            except (ValueError, KeyError) as error:
                print(f"not a recording, ignored: {path} ({error})", file=sys.stderr)
    return recordings


def download_recordings(spec: str, workdir: str) -> str:
    """Fetches the sdist of `spec` from PyPI and unpacks its tests/recordings; returns the dir."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-binary", ":all:", "--no-deps", "--dest", workdir, spec],
        check=True,
    )
    (archive,) = [name for name in os.listdir(workdir) if name.endswith((".zip", ".tar.gz"))]
    target = os.path.join(workdir, "recordings")
    os.makedirs(target)
    path = os.path.join(workdir, archive)
    if spec == DEFAULT_SOURCE:
        with open(path, "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
        if digest != DEFAULT_SOURCE_SHA256:
            raise SystemExit(f"{archive}: sha256 {digest}, expected {DEFAULT_SOURCE_SHA256}")
    if archive.endswith(".zip"):
        with zipfile.ZipFile(path) as bundle:
            members = [(name, bundle.read(name)) for name in bundle.namelist()
                       if "/tests/recordings/" in name and not name.endswith("/")]
    else:
        with tarfile.open(path) as bundle:
            members = [(member.name, bundle.extractfile(member).read()) for member in bundle
                       if "/tests/recordings/" in member.name and member.isfile()]
    if not members:
        raise SystemExit(f"{archive} ships no tests/recordings")
    for name, data in members:
        with open(os.path.join(target, os.path.basename(name)), "wb") as file:
            file.write(data)
    return target


# --- Signing ----------------------------------------------------------------------------------


def header_sort_key(name: str):
    """The service's collation of canonicalized header names: `-` only breaks ties, `_` sorts
    before digits and digits before letters (docs: azure-queue-contract, SharedKey)."""
    def weight(text: str):
        return [(0 if char == "_" else 1 if char.isdigit() else 2, char) for char in text]
    return (weight(name.replace("-", "")), name)


def canonicalized_resource(account: str, raw_path: str, raw_query: str) -> str:
    resource = "/" + account + raw_path
    values = collections.defaultdict(list)
    for name, value in urllib.parse.parse_qsl(raw_query, keep_blank_values=True):
        values[name.lower()].append(value)
    for name in sorted(values):
        resource += "\n" + name + ":" + ",".join(sorted(values[name]))
    return resource


def shared_key(method, raw_path, raw_query, headers: dict[str, str], body_length, key) -> str:
    get = lambda name: headers.get(name, "")  # noqa: E731
    canonical_headers = "".join(
        f"{name}:{headers[name].strip()}\n"
        for name in sorted((n for n in headers if n.startswith("x-ms-")), key=header_sort_key)
    )
    string_to_sign = "\n".join([
        method, get("content-encoding"), get("content-language"),
        str(body_length) if body_length else "", get("content-md5"), get("content-type"),
        "", get("if-modified-since"), get("if-match"), get("if-none-match"),
        get("if-unmodified-since"), get("range"),
    ]) + "\n" + canonical_headers + canonicalized_resource(DEV_ACCOUNT, raw_path, raw_query)
    signature = hmac.new(base64.b64decode(key), string_to_sign.encode("utf-8"), hashlib.sha256)
    return f"SharedKey {DEV_ACCOUNT}:{base64.b64encode(signature.digest()).decode()}"


SAS_FIELDS = ("sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "ses", "si", "sig", "sr")


def sign_sas(fields: dict[str, str], queue: str | None, key: str) -> str:
    get = lambda name: fields.get(name, "")  # noqa: E731
    if "ss" in fields or "srt" in fields:
        lines = [DEV_ACCOUNT, get("sp"), get("ss"), get("srt"), get("st"), get("se"),
                 get("sip"), get("spr"), get("sv")]
        if get("sv") >= "2020-12-06":
            lines.append(get("ses"))
        string_to_sign = "\n".join(lines) + "\n"
    else:
        string_to_sign = "\n".join([get("sp"), get("st"), get("se"),
                                    f"/queue/{DEV_ACCOUNT}/{queue or ''}", get("si"),
                                    get("sip"), get("spr"), get("sv")])
    signature = hmac.new(base64.b64decode(key), string_to_sign.encode("utf-8"), hashlib.sha256)
    return base64.b64encode(signature.digest()).decode()


ISO_RE = re.compile(r"(\d{4}-\d{2}-\d{2})(T(\d{2}):(\d{2})(:(\d{2})(\.\d+)?)?Z)?")


def shift_iso(text: str, offset_s: int) -> str:
    """Moves an ISO 8601 instant by `offset_s`, keeping its form (date only, minutes, seconds)."""
    match = ISO_RE.fullmatch(text.strip())
    if not match:
        return text
    date, clock = match.group(1), match.group(2)
    parsed = datetime.datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc)
    if clock:
        parsed = parsed.replace(hour=int(match.group(3)), minute=int(match.group(4)),
                                second=int(match.group(6) or 0))
    moved = parsed + datetime.timedelta(seconds=offset_s)
    if not clock:
        return moved.strftime("%Y-%m-%d")
    if match.group(5) is None:
        return moved.strftime("%Y-%m-%dT%H:%MZ")
    return moved.strftime("%Y-%m-%dT%H:%M:%S") + (match.group(7) or "") + "Z"


def http_date(unix_s: float) -> str:
    return email.utils.formatdate(unix_s, usegmt=True)


def parse_http_date(text: str) -> float | None:
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


# --- Comparison ---------------------------------------------------------------------------------


def xml_root(text: str):
    text = text.lstrip("\ufeff").strip()
    if not text:
        return None
    return ElementTree.fromstring(text.encode("utf-8"))


def shape(element) -> tuple:
    """Element and attribute names, recursively, in document order: the body without values."""
    return (element.tag, tuple(sorted(element.attrib)), tuple(shape(child) for child in element))


def render_shape(node: tuple) -> str:
    tag, attributes, children = node
    head = tag + ("[" + ",".join(attributes) + "]" if attributes else "")
    if not children:
        return head
    return head + "(" + " ".join(render_shape(child) for child in children) + ")"


def error_code(headers: dict[str, str], body: str) -> str | None:
    code = headers.get("x-ms-error-code")
    if code:
        return code
    match = re.search(r"<Code>([^<]*)</Code>", body or "")
    return match.group(1) if match else None


def operation_name(method: str, path_parts: list[str], query: dict[str, str]) -> str:
    comp, restype = query.get("comp", ""), query.get("restype", "")
    if method == "OPTIONS":
        return "Preflight"
    if not path_parts:
        if comp == "list":
            return "List Queues"
        if restype == "service" and comp == "properties":
            return "Set Service Properties" if method == "PUT" else "Get Service Properties"
        if restype == "service" and comp == "stats":
            return "Get Service Stats"
        if restype == "service" and comp == "userdelegationkey":
            return "Get User Delegation Key"
        return f"{method} account"
    if len(path_parts) == 1:
        if comp == "metadata":
            return "Set Queue Metadata" if method == "PUT" else "Get Queue Metadata"
        if comp == "acl":
            return "Set Queue ACL" if method == "PUT" else "Get Queue ACL"
        return {"PUT": "Create Queue", "DELETE": "Delete Queue"}.get(method, f"{method} queue")
    if len(path_parts) == 2 and path_parts[1] == "messages":
        if method == "GET":
            return "Peek Messages" if query.get("peekonly") == "true" else "Get Messages"
        return {"POST": "Put Message", "DELETE": "Clear Messages"}.get(method, f"{method} messages")
    if len(path_parts) == 3 and path_parts[1] == "messages":
        names = {"PUT": "Update Message", "DELETE": "Delete Message"}
        return names.get(method, f"{method} message")
    return f"{method} {'/'.join(path_parts)}"


@dataclasses.dataclass
class Outcome:
    recording: str
    index: int
    operation: str
    verdict: str  # "agree", "differ", "skip"
    kind: str = ""  # for differ: "status", "code", "reason", "shape", "body"; for skip: the reason
    detail: str = ""


# --- Replay -------------------------------------------------------------------------------------


class Azq:
    """A running azq: started here (`--inMemoryPersistence`, port 0) or given by --endpoint."""

    def __init__(self, binary: str | None, endpoint: str | None):
        self.process = None
        if endpoint:
            parsed = urllib.parse.urlsplit(endpoint)
            self.host, self.port = parsed.hostname, parsed.port or 80
            return
        self.process = subprocess.Popen(
            [binary, "--queueHost", "127.0.0.1", "--queuePort", "0", "--shards", "2",
             "--inMemoryPersistence", "--silent"],
            stdout=subprocess.PIPE, text=True,
            env={name: value for name, value in os.environ.items() if name != "AZURITE_ACCOUNTS"},
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        line = self.process.stdout.readline()
        match = re.match(r"azq listening on http://([\d.]+):(\d+)", line)
        if not match or time.monotonic() > deadline:
            self.stop()
            raise SystemExit(f"azq did not start: {line!r}")
        self.host, self.port = match.group(1), int(match.group(2))

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STARTUP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def send(self, method: str, target: str, headers: dict[str, str], body: bytes | None):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            connection.putheader("Host", f"{self.host}:{self.port}")
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body or b"")))
            connection.endheaders(body or None)
            response = connection.getresponse()
            data = response.read()
            headers = {k.lower(): v for k, v in response.getheaders()}
            # The reason phrase travels with the headers, under a name no header can have.
            headers[":reason"] = response.reason
            return response.status, headers, data
        finally:
            connection.close()

    def signed(self, method: str, target: str, body: bytes = b"", headers=None):
        path, _, query = target.partition("?")
        headers = {"x-ms-date": http_date(time.time()), "x-ms-version": "2019-02-02",
                   **(headers or {})}
        headers["Authorization"] = shared_key(method, path, query,
                                              {k.lower(): v for k, v in headers.items()},
                                              len(body), DEV_KEY)
        return self.send(method, target, headers, body)

    def reset(self):
        """Deletes every queue of the development account and resets its service properties."""
        marker = ""
        names = []
        while True:
            status, _, body = self.signed(
                "GET", f"/{DEV_ACCOUNT}/?comp=list" + (f"&marker={marker}" if marker else ""))
            assert status == 200, body
            root = xml_root(body.decode("utf-8"))
            names += [name.text for name in root.iter("Name")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                break
        for name in names:
            status, _, body = self.signed("DELETE", f"/{DEV_ACCOUNT}/{name}")
            assert status == 204, body
        status, _, body = self.signed(
            "PUT", f"/{DEV_ACCOUNT}/?restype=service&comp=properties", DEFAULT_SERVICE_PROPERTIES,
            {"Content-Type": "application/xml"})
        assert status == 202, body


class RecordingReplay:
    """The state of one recording's replay: time offset, id and receipt maps, message clocks."""

    def __init__(self, azq: Azq, recording: Recording):
        self.azq = azq
        self.recording = recording
        self.message_ids: dict[str, str] = {}
        self.receipts: dict[str, str] = {}
        self.markers: dict[str, str] = {}
        # Queues this recording names: a listing with others shows the real account's
        # leftovers, which a fresh namespace cannot have.
        self.own_queues = {
            urllib.parse.unquote(part)
            for interaction in recording.interactions
            for part in urllib.parse.urlsplit(interaction.uri).path.split("/")[1:2] if part
        }
        # Recorded messages of each queue, by id: when a hold (initial delay or lease) recorded
        # for it ends, if one was, and when it expires; unix seconds on the service's clock.
        self.clocks: dict[str, dict[str, tuple[float | None, float]]] = collections.defaultdict(
            dict)
        started = None
        for interaction in recording.interactions:
            started = recorded_time(interaction)
            if started:
                break
        self.offset_s = int(time.time() - started) if started else 0

    def run(self) -> list[Outcome]:
        self.azq.reset()
        self.prime_service_properties()
        return [self.replay(index, interaction)
                for index, interaction in enumerate(self.recording.interactions)]

    def prime_service_properties(self):
        """Service properties are the account's, not the recording's: a recording that reads
        them saw whatever earlier tests had left. The first recorded Get Service Properties
        answer stands for that state (the recording's own Set requests, replayed on top of it,
        change what they changed), so azq starts from it."""
        for interaction in self.recording.interactions:
            parsed = urllib.parse.urlsplit(interaction.uri)
            if (interaction.method == "GET" and "comp=properties" in parsed.query
                    and interaction.status == 200 and not parsed.hostname.split(".")[0]
                    .endswith("-secondary")):
                body = interaction.response_body.lstrip("\ufeff").encode("utf-8")
                status, _, answer = self.azq.signed(
                    "PUT", f"/{DEV_ACCOUNT}/?restype=service&comp=properties", body,
                    {"Content-Type": "application/xml"})
                assert status == 202, answer
                return

    def replay(self, index: int, interaction: Interaction) -> Outcome:
        parsed = urllib.parse.urlsplit(interaction.uri)
        host = parsed.hostname or ""
        path_parts = [part for part in parsed.path.split("/") if part]
        query_pairs = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
        query = dict(query_pairs)
        operation = operation_name(
            interaction.method, [urllib.parse.unquote(part) for part in path_parts], query)
        outcome = lambda verdict, kind="", detail="": Outcome(  # noqa: E731
            self.recording.name, index, operation, verdict, kind, detail)

        if ".queue." not in host:
            return outcome("skip", "not a queue endpoint", host)
        if "skoid" in query or "oauth" in self.recording.name.lower():
            return outcome("skip", "OAuth or user delegation SAS (the replay runs over HTTP "
                           "without tokens, and cannot sign again with the service's key)")
        secondary = host.split(".")[0].endswith("-secondary")
        queue = urllib.parse.unquote(path_parts[0]) if path_parts else None
        waited = self.waited_for_time(queue, operation, service_time(interaction))

        # Path: the account, then the recorded path with ids mapped.
        mapped_parts = list(path_parts)
        if len(mapped_parts) == 3 and mapped_parts[1] == "messages":
            mapped_parts[2] = self.message_ids.get(mapped_parts[2], mapped_parts[2])
        account = DEV_ACCOUNT + ("-secondary" if secondary else "")
        path = "/" + account + "/" + "/".join(mapped_parts)
        if parsed.path in ("", "/") or (not path_parts and parsed.path.endswith("/")):
            path = "/" + account + "/"
        elif not path_parts:
            path = "/" + account

        # Query: receipts mapped; a SAS signed again with its times moved to now.
        sas = {name: value for name, value in query_pairs if name in SAS_FIELDS}
        is_sas = "sig" in sas
        sent_pairs = []
        for name, value in query_pairs:
            if name == "popreceipt":
                value = self.receipts.get(value, value)
            if name == "marker":
                value = self.markers.get(value, value)
            if is_sas and name in ("st", "se"):
                value = shift_iso(value, self.offset_s)
                # The test proxy sanitizes SAS times (`se=end`): the service accepted the
                # token, so any time that keeps it valid stands for it.
                if not ISO_RE.fullmatch(value):
                    moved = time.time() + (3600 if name == "se" else -3600)
                    value = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moved))
            if is_sas and name == "sig":
                continue
            sent_pairs.append((name, value))
        recorded_code = error_code(interaction.response_headers, interaction.response_body)
        authentication_failed = (interaction.status, recorded_code) == (403, "AuthenticationFailed")
        key = WRONG_KEY if authentication_failed else DEV_KEY
        if is_sas:
            fields = dict(sent_pairs)
            sent_pairs.append(("sig", sign_sas(fields, queue, key)))
        raw_query = urllib.parse.urlencode(sent_pairs, quote_via=urllib.parse.quote, safe="")
        target = path + ("?" + raw_query if raw_query else "")

        headers = {name: value for name, value in interaction.headers.items()
                   if name in FORWARDED_HEADERS
                   or (name.startswith("x-ms-") and name not in ("x-ms-date", "x-ms-meta"))}
        headers["x-ms-date"] = http_date(time.time())
        headers.setdefault("x-ms-version", interaction.response_headers.get("x-ms-version",
                                                                             "2019-02-02"))
        body = interaction.body
        if body is not None and operation == "Set Queue ACL":
            body = re.sub(rb"<(Start|Expiry)>([^<]*)</\1>",
                          lambda m: b"<%s>%s</%s>" % (m.group(1), shift_iso(
                              m.group(2).decode(), self.offset_s).encode(), m.group(1)), body)
        if not is_sas and interaction.method != "OPTIONS":
            headers["Authorization"] = shared_key(interaction.method, path, raw_query,
                                                  {k.lower(): v for k, v in headers.items()},
                                                  len(body or b""), key)
        status, live_headers, live_body = self.azq.send(interaction.method, target, headers, body)
        live_text = live_body.decode("utf-8", errors="replace")

        difference = compare(interaction, status, live_headers, live_text)
        self.learn(interaction, queue, live_headers, live_text)
        if waited:
            return outcome("skip", "time had to pass between recorded requests", waited)
        foreign = self.foreign_queues(interaction)
        if foreign:
            return outcome("skip", "the recorded account held queues the recording did not "
                           "create", ", ".join(sorted(foreign)[:3]))
        if difference:
            return outcome("differ", *difference)
        return outcome("agree")

    def waited_for_time(self, queue, operation, at) -> str:
        """Why the recorded answer depends on time passing since an earlier interaction, if it
        does: a message's lease, initial delay or time to live ended in between."""
        if queue is None or at is None or operation not in (
                "Get Messages", "Peek Messages", "Update Message", "Get Queue Metadata"):
            return ""
        for visible_at, expires_at in self.clocks.get(queue, {}).values():
            for label, instant in (("a lease or delay", visible_at),
                                   ("a time to live", expires_at)):
                if instant is not None and instant <= at:
                    return f"{label} ended {int(at - instant)} s before this request"
        return ""

    def foreign_queues(self, interaction) -> set[str]:
        try:
            root = xml_root(interaction.response_body)
        except ElementTree.ParseError:
            return set()
        if root is None or root.tag != "EnumerationResults":
            return set()
        return {name.text for name in root.iter("Name")} - self.own_queues

    def learn(self, interaction, queue, live_headers, live_text):
        """Maps recorded ids, receipts and markers to live ones; follows the recorded messages'
        clocks."""
        try:
            recorded_root, live_root = xml_root(interaction.response_body), xml_root(live_text)
        except ElementTree.ParseError:
            recorded_root = live_root = None
        if recorded_root is not None and live_root is not None:
            recorded_marker = recorded_root.findtext("NextMarker")
            if recorded_marker:
                self.markers[recorded_marker] = live_root.findtext("NextMarker") or ""

        at = service_time(interaction) or 0
        operation_clocks = self.clocks[queue] if queue else {}
        recorded_messages = messages_of(interaction.response_body)
        live_messages = messages_of(live_text)
        for recorded, live in zip(recorded_messages, live_messages):
            if recorded.get("MessageId") and live.get("MessageId"):
                self.message_ids[recorded["MessageId"]] = live["MessageId"]
            if recorded.get("PopReceipt") and live.get("PopReceipt"):
                self.receipts[recorded["PopReceipt"]] = live["PopReceipt"]
        for recorded in recorded_messages:
            identifier = recorded.get("MessageId")
            if not identifier:
                continue
            visible_at, expires_at = operation_clocks.get(identifier, (None, float("inf")))
            inserted = parse_http_date(recorded.get("InsertionTime", ""))
            next_visible = parse_http_date(recorded.get("TimeNextVisible", ""))
            if next_visible is not None and inserted is not None:
                # Held only if it becomes visible later than it was inserted (a Put with a
                # delay, any Get); an immediately visible Put holds nothing.
                visible_at = next_visible if next_visible > inserted else None
            expires_at = parse_http_date(recorded.get("ExpirationTime", "")) or expires_at
            operation_clocks[identifier] = (visible_at, expires_at)
        recorded_receipt = interaction.response_headers.get("x-ms-popreceipt")
        if recorded_receipt and live_headers.get("x-ms-popreceipt"):
            self.receipts[recorded_receipt] = live_headers["x-ms-popreceipt"]
        if recorded_receipt and queue:
            parts = [p for p in urllib.parse.urlsplit(interaction.uri).path.split("/") if p]
            visible = parse_http_date(
                interaction.response_headers.get("x-ms-time-next-visible", ""))
            if len(parts) == 3 and visible:
                _, expires_at = operation_clocks.get(parts[2], (None, float("inf")))
                # A lease of a second or more (visibilitytimeout=0 makes it visible at once;
                # the Date header and the time next visible may round apart by a second).
                held = visible if visible > at + 1 else None
                operation_clocks[parts[2]] = (held, expires_at)
        if queue and 200 <= interaction.status < 300:
            parts = [p for p in urllib.parse.urlsplit(interaction.uri).path.split("/") if p]
            if interaction.method == "DELETE" and len(parts) == 3:
                operation_clocks.pop(parts[2], None)
            elif interaction.method == "DELETE":
                operation_clocks.clear()


def service_time(interaction: Interaction) -> float | None:
    """When the service answered, on its own clock (message times are on it too)."""
    return parse_http_date(interaction.response_headers.get("date", "")) or recorded_time(
        interaction)


def recorded_time(interaction: Interaction) -> float | None:
    """When the client sent the request, on its clock (SAS and policy times are on it)."""
    return (parse_http_date(interaction.headers.get("x-ms-date", ""))
            or parse_http_date(interaction.headers.get("date", ""))
            or parse_http_date(interaction.response_headers.get("date", "")))


def messages_of(text: str) -> list[dict[str, str]]:
    try:
        root = xml_root(text)
    except ElementTree.ParseError:
        return []
    if root is None or root.tag != "QueueMessagesList":
        return []
    return [{child.tag: (child.text or "") for child in message} for message in root]


def compare(interaction, status, live_headers, live_text):
    """The first way the live answer differs from the recorded one, as (kind, detail), or None."""
    recorded_code = error_code(interaction.response_headers, interaction.response_body)
    live_code = error_code(live_headers, live_text)
    if status != interaction.status:
        return ("status", f"recorded {interaction.status} {recorded_code or ''}".strip()
                + f", azq {status} {live_code or ''}".rstrip())
    if recorded_code != live_code:
        return ("code", f"recorded {recorded_code}, azq {live_code}")
    # The service writes an error's message as the reason phrase; the legacy SDKs' exception
    # texts start with it. Successes carry the standard phrases, which are not compared.
    live_reason = live_headers.get(":reason")
    if interaction.status >= 400 and interaction.reason and live_reason != interaction.reason:
        return ("reason", f"recorded {interaction.reason!r}, azq {live_reason!r}")
    if interaction.method == "HEAD":
        return None
    try:
        recorded_root = xml_root(interaction.response_body)
    except ElementTree.ParseError:
        return None  # not XML (or not recorded as text): nothing to compare
    try:
        live_root = xml_root(live_text)
    except ElementTree.ParseError as error:
        return ("body", f"azq's body is not XML: {error}")
    if recorded_root is None and live_root is None:
        return None
    if recorded_root is None or live_root is None:
        return ("body", f"recorded {'no body' if recorded_root is None else 'a body'}, azq "
                + ("no body" if live_root is None else "a body"))
    recorded_shape, live_shape = shape(recorded_root), shape(live_root)
    if recorded_shape != live_shape and recorded_shape[:2] == live_shape[:2] == ("Error", ()):
        recorded_children, live_children = recorded_shape[2], live_shape[2]
        if recorded_children[: len(live_children)] == live_children:
            extra = " ".join(
                render_shape(child) for child in recorded_children[len(live_children):])
            return ("error details", f"the service adds {extra}")
    if recorded_shape != live_shape:
        return ("shape", f"recorded {render_shape(recorded_shape)}, azq {render_shape(live_shape)}")
    return None


# --- Report -------------------------------------------------------------------------------------


def difference_key(outcome: Outcome) -> tuple[str, str, str]:
    return (outcome.operation, outcome.kind, outcome.detail)


def report(outcomes: list[Outcome], verbose: bool, strict: bool) -> int:
    replayed = [o for o in outcomes if o.verdict != "skip"]
    agreed = [o for o in replayed if o.verdict == "agree"]
    skipped = [o for o in outcomes if o.verdict == "skip"]
    differing = [o for o in replayed if o.verdict == "differ"]
    recordings = len({o.recording for o in outcomes})
    print(f"{len(agreed)} of {len(replayed)} replayed interactions agree "
          f"({len(outcomes)} recorded in {recordings} recordings, {len(skipped)} skipped)")
    for reason, count in collections.Counter(o.kind for o in skipped).most_common():
        print(f"  skipped {count}: {reason}")
    groups = collections.defaultdict(list)
    for outcome in differing:
        groups[difference_key(outcome)].append(outcome)
    unexpected = sum(1 for o in differing if o.kind not in KNOWN_DIFFERENCES)
    known = len(differing) - unexpected
    if known:
        print(f"  {known} of the differences are known and kept: see below")
    for key, members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        operation, kind, detail = key
        label = "known" if kind in KNOWN_DIFFERENCES else "NOT KNOWN"
        print(f"  differ {len(members)}: {operation}, {kind}: {detail} [{label}]")
        for member in members[: None if verbose else 3]:
            print(f"      {member.recording} #{member.index}")
    for kind, reason in KNOWN_DIFFERENCES.items():
        seen = any(o.kind == kind for o in differing)
        print(f"  known difference, {kind}{'' if seen else ' (no longer seen)'}: {reason}")
    if verbose:
        for outcome in skipped:
            print(f"  skip {outcome.recording} #{outcome.index} {outcome.operation}: "
                  f"{outcome.kind} {outcome.detail}")
    if strict and differing:
        return 1
    return 1 if unexpected else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recordings", action="append", metavar="DIR",
                        help="replay the recordings under DIR instead of the PyPI ones")
    parser.add_argument("--source", default=DEFAULT_SOURCE,
                        help=f"the PyPI sdist whose tests/recordings to replay ({DEFAULT_SOURCE})")
    parser.add_argument("--endpoint", help="an azq already running, e.g. http://127.0.0.1:10001")
    parser.add_argument("--azq-bin", default=os.environ.get("AZQ_BIN", "target/release/azq"))
    parser.add_argument("--only", help="replay only recordings whose name contains this")
    parser.add_argument("--json", metavar="FILE", help="write every outcome to FILE")
    parser.add_argument("--verbose", action="store_true", help="list every difference and skip")
    parser.add_argument("--strict", action="store_true", help="fail on known differences too")
    arguments = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="azq-recordings-")
    azq = None
    try:
        recordings = []
        for directory in arguments.recordings or [download_recordings(arguments.source, workdir)]:
            recordings += load_directory(directory)
        if arguments.only:
            recordings = [r for r in recordings if arguments.only in r.name]
        if not recordings:
            raise SystemExit("no recordings found")
        azq = Azq(arguments.azq_bin, arguments.endpoint)
        outcomes = []
        for recording in recordings:
            outcomes += RecordingReplay(azq, recording).run()
        if arguments.json:
            with open(arguments.json, "w", encoding="utf-8") as file:
                json.dump([dataclasses.asdict(o) for o in outcomes], file, indent=1)
        return report(outcomes, arguments.verbose, arguments.strict)
    finally:
        if azq:
            azq.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
