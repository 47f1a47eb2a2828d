"""Shared helpers of the SDK suite: the development account, client settings, error codes, polling.

Kept out of conftest.py so test modules can import them by name (`from support import ...`);
pytest puts this directory on sys.path because tests/sdk has no __init__.py.
"""

import re
import time
import uuid

# The well-known development account every Azure Storage emulator serves (see the contract).
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

# Keyword arguments for every SDK client the suite builds.
# retry_total=0: the SDK retries 5xx answers and dropped connections by default, which would hide
# exactly the server bugs this suite exists to find, and a retried Put Message could duplicate a message
# that an exactly-once test then counts.
# The timeouts bound a hung server: a test fails after read_timeout instead of hanging CI.
CLIENT_KWARGS = {"retry_total": 0, "connection_timeout": 10, "read_timeout": 30}

# How long polling helpers wait by default before they give up. Generous on purpose: CI runs on a
# 2-core machine shared with a compiler, and the wait ends as soon as the condition holds.
POLL_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.1

QUEUE_NAME_HINT_CHARS_MAX = 40


def connection_string(endpoint: str, account: str = DEV_ACCOUNT, key: str = DEV_KEY) -> str:
    """A connection string for `endpoint` (the account URL, `http://127.0.0.1:PORT/devstoreaccount1`)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
        f"QueueEndpoint={endpoint};"
    )


def error_code(error: Exception) -> str:
    """The Azure error code the SDK attached to `error`, as a plain string.

    The SDK stores either the raw `x-ms-error-code` header text or a StorageErrorCode enum member
    (a str subclass), depending on which layer mapped the error.
    """
    code = getattr(error, "error_code", None)
    if code is None:
        return ""
    return str(getattr(code, "value", code))


def status_code(error: Exception) -> int:
    """The HTTP status of the response behind an SDK error, or 0 when there was none."""
    response = getattr(error, "response", None)
    return getattr(response, "status_code", 0) if response is not None else 0


def unique_queue_name(hint: str = "q") -> str:
    """A valid queue name unique to this call: a sanitised `hint` (for reading server logs) + 12 hex."""
    base = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-")[:QUEUE_NAME_HINT_CHARS_MAX].strip("-")
    suffix = uuid.uuid4().hex[:12]
    return f"{base}-{suffix}" if base else f"q{suffix}"


def wait_until(probe, what: str, timeout_s: float = POLL_TIMEOUT_S, interval_s: float = POLL_INTERVAL_S):
    """Call `probe()` until it returns a truthy value and return that value.

    Fails the test with `what` and the last value seen when `timeout_s` passes first. Tests use it
    instead of fixed sleeps: they wait only as long as the server needs, and a slow machine only
    makes them slower, never red.
    """
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last value: {last!r}")
        time.sleep(interval_s)


def collect_pages(page_iterator, pages_max: int) -> list:
    """Every page of an SDK `.by_page()` iterator as a list of lists, failing past `pages_max` pages.

    The bound turns a server that hands back the same continuation marker forever (Azurite does, for a
    prefixed listing) into a failure instead of a hung test.
    """
    pages = []
    for page in page_iterator:
        pages.append(list(page))
        if len(pages) > pages_max:
            raise AssertionError(
                f"listing went past {pages_max} pages; first items of the last pages: "
                f"{[page[:1] for page in pages[-3:]]!r}"
            )
    return pages
