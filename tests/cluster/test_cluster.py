"""Accounts divided between azq nodes behind HAProxy (scripts/cluster-demo.sh, deploy/haproxy).

The official Python SDK talks to the proxy unchanged, for several accounts, in both URL styles:
path style (http://127.0.0.1:PORT/ACCOUNT) and host style (http://ACCOUNT.queue.localhost:PORT).
Where *.localhost does not resolve to loopback (it does not everywhere: glibc leaves it to the
resolver), the host-style clients get a requests session that opens the TCP connection to
127.0.0.1 and leaves the request itself, Host header included, exactly as the SDK made it.

Where an account's queues live is checked by asking every node directly, bypassing the proxy.
"""

import os
import signal
import socket
from datetime import datetime, timedelta, timezone
from typing import Dict, List
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from azure.core.exceptions import HttpResponseError, ServiceResponseError
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.queue import QueueSasPermissions, QueueServiceClient, generate_queue_sas
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool

from cluster_demo import ACCOUNTS, Cluster, Node, leftover_processes, process_gone, stop_demo
from support import (
    CLIENT_KWARGS,
    collect_pages,
    error_code,
    status_code,
    unique_queue_name,
    wait_until,
)

URL_STYLES = ("path", "host")
LISTED_QUEUES_PER_ACCOUNT = 7
LIST_PAGE_SIZE = 3
LIST_PAGES_MAX = 10


def _localhost_subdomains_resolve() -> bool:
    """Whether a name under .localhost resolves, and only to loopback (RFC 6761 allows it)."""
    try:
        addresses = socket.getaddrinfo("azq-probe.queue.localhost", 80, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        return False
    return all(address[4][0] in ("127.0.0.1", "::1") for address in addresses)


HOST_STYLE_RESOLVES = _localhost_subdomains_resolve()


class LoopbackAdapter(HTTPAdapter):
    """Connects to 127.0.0.1 at the URL's port; the Host header keeps the URL's name."""

    def send(self, request, **kwargs):
        parts = urlsplit(request.url)
        request.headers["Host"] = parts.netloc
        request.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}"))
        return super().send(request, **kwargs)


# A PROXY protocol v2 header for a LOCAL connection (no client behind it), as HAProxy's health
# checks send: the nodes run with --proxyProtocol and close a connection that has none.
PROXY_V2_LOCAL = b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"


class ProxyHeaderConnection(HTTPConnection):
    """A connection that begins with `PROXY_V2_LOCAL`, to reach a node directly."""

    def connect(self):
        super().connect()
        self.sock.sendall(PROXY_V2_LOCAL)


class ProxyHeaderPool(HTTPConnectionPool):
    ConnectionCls = ProxyHeaderConnection


class ProxyHeaderAdapter(HTTPAdapter):
    """Plain HTTP over `ProxyHeaderConnection`s."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": ProxyHeaderPool}


def client(base_url: str, account: str, key: str, url_account: str = None) -> QueueServiceClient:
    """An SDK client for `account` through the proxy at `base_url`, path style; `url_account`
    puts another name in the URL (the -secondary endpoint)."""
    return QueueServiceClient(
        f"{base_url}/{url_account or account}",
        credential={"account_name": account, "account_key": key},
        **CLIENT_KWARGS,
    )


def node_client(node: Node, account: str, key: str) -> QueueServiceClient:
    """An SDK client for `account` on `node` directly, bypassing the proxy: its connections
    begin with a PROXY header, as the node requires."""
    session = requests.Session()
    session.mount("http://", ProxyHeaderAdapter())
    return QueueServiceClient(
        f"{node.url}/{account}",
        credential={"account_name": account, "account_key": key},
        transport=RequestsTransport(session=session, session_owner=True),
        **CLIENT_KWARGS,
    )


def proxy_client(cluster: Cluster, account: str, style: str, secondary=False) -> QueueServiceClient:
    """An SDK client for `account` through the proxy, in URL style `style` (path or host)."""
    key = cluster.accounts[account]
    url_account = f"{account}-secondary" if secondary else account
    if style == "path":
        return client(cluster.endpoint, account, key, url_account)
    extra = {}
    if not HOST_STYLE_RESOLVES:
        session = requests.Session()
        session.mount("http://", LoopbackAdapter())
        extra["transport"] = RequestsTransport(session=session, session_owner=True)
    return QueueServiceClient(
        f"http://{url_account}.queue.localhost:{cluster.port}",
        credential={"account_name": account, "account_key": key},
        **CLIENT_KWARGS,
        **extra,
    )


def names(service: QueueServiceClient, prefix: str) -> List[str]:
    """Every queue name under `prefix`, page by page (LIST_PAGE_SIZE a page)."""
    pages = collect_pages(
        service.list_queues(name_starts_with=prefix, results_per_page=LIST_PAGE_SIZE).by_page(),
        LIST_PAGES_MAX,
    )
    return [queue.name for page in pages for queue in page]


def holders(cluster: Cluster, account: str, prefix: str) -> List[Node]:
    """The nodes that hold a queue of `account` under `prefix`, asked directly."""
    key = cluster.accounts[account]
    return [node for node in cluster.nodes if names(node_client(node, account, key), prefix)]


def create_queues(cluster: Cluster, prefix: str, per_style: int) -> Dict[str, List[str]]:
    """`per_style` queues per account and URL style through the proxy; the names by account."""
    created = {}
    for account in ACCOUNTS:
        created[account] = []
        for style in URL_STYLES:
            service = proxy_client(cluster, account, style)
            for index in range(per_style):
                name = f"{prefix}-{style}{index}"
                service.create_queue(name)
                created[account].append(name)
    return created


def test_every_node_serves_every_account(cluster):
    # AZURITE_ACCOUNTS reached every node: each one authenticates each account.
    for node in cluster.nodes:
        for account in ACCOUNTS:
            assert names(node_client(node, account, cluster.accounts[account]), "none-") == []


@pytest.mark.parametrize("style", URL_STYLES)
def test_sdk_works_unchanged_through_the_proxy(cluster, style):
    for account in ACCOUNTS:
        service = proxy_client(cluster, account, style)
        queue = service.get_queue_client(unique_queue_name(f"sdk-{style}"))
        queue.create_queue(metadata={"tenant": account})
        for index in range(3):
            queue.send_message(f"{account} message {index}")
        assert [m.content for m in queue.peek_messages(max_messages=32)] == [
            f"{account} message {index}" for index in range(3)
        ]
        leased = queue.receive_message(visibility_timeout=30)
        queue.update_message(
            leased, pop_receipt=leased.pop_receipt, visibility_timeout=0, content="updated"
        )
        received = list(queue.receive_messages(messages_per_page=32, visibility_timeout=30))
        assert sorted(m.content for m in received) == sorted(
            ["updated", f"{account} message 1", f"{account} message 2"]
        )
        for message in received:
            queue.delete_message(message)
        properties = queue.get_queue_properties()
        assert properties.metadata == {"tenant": account}
        assert properties.approximate_message_count == 0
        queue.delete_queue()


def test_both_url_styles_reach_the_same_queue(cluster):
    # A message put with one style is read with the other, and the secondary endpoint (read
    # only) sees it too: all three land on the node that holds the account.
    for account in ACCOUNTS:
        name = unique_queue_name("styles")
        proxy_client(cluster, account, "path").create_queue(name)
        proxy_client(cluster, account, "host").get_queue_client(name).send_message("hello")
        for style in URL_STYLES:
            secondary = proxy_client(cluster, account, style, secondary=True)
            assert [m.content for m in secondary.get_queue_client(name).peek_messages()] == [
                "hello"
            ]
        received = proxy_client(cluster, account, "path").get_queue_client(name).receive_message()
        assert received.content == "hello"


def test_each_account_lives_on_exactly_one_node(cluster):
    prefix = unique_queue_name("placement")
    created = create_queues(cluster, prefix, per_style=2)
    placement = {}
    for account in ACCOUNTS:
        found = holders(cluster, account, prefix)
        assert len(found) == 1, f"{account}'s queues are on nodes {[n.index for n in found]}"
        (holder,) = found
        key = cluster.accounts[account]
        assert names(node_client(holder, account, key), prefix) == sorted(created[account])
        placement[account] = holder.index
    # Ten accounts on one node would mean the proxy does not spread them at all.
    assert len(set(placement.values())) >= 2, placement


def test_list_queues_through_the_proxy_is_complete(cluster):
    prefix = unique_queue_name("listing")
    per_style = (LISTED_QUEUES_PER_ACCOUNT + 1) // 2
    created = create_queues(cluster, prefix, per_style)
    for account in ACCOUNTS:
        expected = sorted(created[account])
        for style in URL_STYLES:
            for secondary in (False, True):
                listed = names(proxy_client(cluster, account, style, secondary), prefix)
                assert listed == expected, (account, style, secondary)


def peek_from(source_address: str, port: int, target: str):
    """Sends `GET target` to the proxy at 127.0.0.1:`port` from `source_address` (another
    loopback address than the proxy's own, 127.0.0.1); the status and x-ms-error-code."""
    with socket.create_connection(("127.0.0.1", port), timeout=10,
                                  source_address=(source_address, 0)) as connection:
        connection.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx-ms-version: 2026-10-06\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
    codes = [value for name, value in headers.items() if name.lower() == "x-ms-error-code"]
    return int(head[0].split(" ")[1]), (codes or [None])[0]


def test_a_sas_ip_range_sees_the_client_behind_the_proxy(cluster):
    # HAProxy passes the client's address on in a PROXY v2 header (send-proxy-v2, through both
    # tiers) and the nodes run with --proxyProtocol: a SAS bound to the client's address works
    # through the proxy, and one bound to the proxy's own address (127.0.0.1, which is what
    # the node's socket sees) does not. The client connects from 127.0.0.2.
    account = ACCOUNTS[0]
    name = unique_queue_name("sip")
    queue = proxy_client(cluster, account, "path").get_queue_client(name)
    queue.create_queue()
    queue.send_message("for the client only")

    def target(sip):
        token = generate_queue_sas(
            account, name, cluster.accounts[account], permission=QueueSasPermissions(read=True),
            expiry=datetime.now(timezone.utc) + timedelta(hours=1), ip=sip,
        )
        return f"/{account}/{name}/messages?peekonly=true&{token}"

    assert peek_from("127.0.0.2", cluster.port, target("127.0.0.2")) == (200, None)
    assert peek_from("127.0.0.2", cluster.port, target("127.0.0.1")) == (
        403, "AuthorizationSourceIPMismatch")
    assert peek_from("127.0.0.2", cluster.port, target("127.0.0.1-127.0.0.9")) == (200, None)


def assert_outage(cluster: Cluster, victim_accounts, other_accounts, queue_name: str):
    """The victim node's accounts get HAProxy's 503 ServerBusy in every URL style; the others
    answer as before, their message still in place."""
    for account in victim_accounts:
        for style in URL_STYLES:
            service = proxy_client(cluster, account, style)
            for operation in (
                lambda: names(service, ""),
                lambda: service.get_queue_client(queue_name).send_message("lost"),
                lambda: service.get_queue_client(queue_name).peek_messages(),
            ):
                with pytest.raises(HttpResponseError) as raised:
                    try:
                        operation()
                    except ServiceResponseError:
                        # Once in CI, a POST here got its connection closed unanswered. HAProxy
                        # may send a request that is not a connection's first over an idle
                        # connection to the node; if the node has closed it, HAProxy closes the
                        # client's connection so that the client retries (as with the node
                        # directly; the SDKs retry by default, these clients do not). So once:
                        # the retry must then get the 503.
                        operation()
                assert status_code(raised.value) == 503, (account, style, raised.value)
                assert error_code(raised.value) == "ServerBusy", (account, style)
    for account in other_accounts:
        for style in URL_STYLES:
            service = proxy_client(cluster, account, style)
            assert names(service, "") == [queue_name]
            queue = service.get_queue_client(queue_name)
            assert [m.content for m in queue.peek_messages()] == [f"{account} survives"]


def test_stopping_a_node_fails_only_its_accounts(start_cluster):
    cluster = start_cluster(3)
    queue_name = "survivor"
    placement = {}
    for account in ACCOUNTS:
        queue = proxy_client(cluster, account, "path").get_queue_client(queue_name)
        queue.create_queue()
        queue.send_message(f"{account} survives")
        (holder,) = holders(cluster, account, queue_name)
        placement[account] = holder
    # The node with the most accounts stops; at least one other node keeps some.
    victim = max(cluster.nodes, key=lambda n: sum(h is n for h in placement.values()))
    victim_accounts = [a for a, holder in placement.items() if holder is victim]
    other_accounts = [a for a, holder in placement.items() if holder is not victim]
    assert victim_accounts and other_accounts, {a: h.index for a, h in placement.items()}

    os.kill(victim.pid, signal.SIGTERM)
    wait_until(lambda: process_gone(victim.pid), f"node {victim.index} to exit")
    # At once, while HAProxy may still count the node as up (its connect is refused) ...
    assert_outage(cluster, victim_accounts, other_accounts, queue_name)
    # ... and once its health check has marked it down: the ring is unchanged, so the victim's
    # accounts are not sent to another node (which would answer 404, or split them).
    wait_until(
        lambda: cluster.haproxy_server_status(victim) == "DOWN",
        f"HAProxy to mark node {victim.index} down",
    )
    assert_outage(cluster, victim_accounts, other_accounts, queue_name)
    # No queue of the victim's accounts appeared anywhere else.
    for account in victim_accounts:
        key = cluster.accounts[account]
        for node in cluster.nodes:
            if node is not victim:
                assert names(node_client(node, account, key), "") == []
    assert cluster.process.poll() is None, (
        "the demo stopped with one node down\n" + cluster.output()
    )


def test_ctrl_c_stops_every_process(start_cluster):
    cluster = start_cluster(2)
    assert stop_demo(cluster, signal.SIGINT) == 130, cluster.output()
    assert leftover_processes(cluster) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", cluster.port), timeout=5).close()
