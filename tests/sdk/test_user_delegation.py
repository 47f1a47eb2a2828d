"""User delegation SAS for queues (keys since service version 2026-02-06), through the official
Python SDK's own paths: `QueueServiceClient.get_user_delegation_key` with a token credential over
HTTPS (`--oauth basic`), then `generate_queue_sas(user_delegation_key=…)`, the SAS used by a client
that holds nothing else. Then what must be refused, with Azure's codes: a tampered SAS, an expired
one, one whose key is not valid yet, one used on another queue or for an operation it does not
grant, a key asked for beyond seven days or with the account key; a SAS bound to a user
(`user_delegation_oid`, `sduoid`) works only with that user's token, across tenants too
(`delegated_user_tid`), and a token never carries a SAS beside it unchecked (a broken, forged or
another user's SAS is refused, a narrow one is not widened). Keys survive a restart: azq derives
them, it stores nothing. With its data on disk (AZQ_PERSISTENCE=disk), that restart must also keep
every queue, message and metadata it acknowledged before it (restart_witness.py compares them).
"""

import base64
import datetime
import json
import urllib.parse

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import (
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    generate_queue_sas,
)

from restart_witness import RestartWitness
from support import CLIENT_KWARGS, DEV_ACCOUNT, error_code, status_code, unique_queue_name
from test_https import TENANT, UnsignedTokenCredential, make_certificate, raw_request, trusting

# The identity the suite's tokens carry (`oid`), and a user of another tenant.
OTHER_TENANT = "5d1e3f7a-3c2b-4b8e-9f4f-0a1b2c3d4e5f"
ALL = QueueSasPermissions(read=True, add=True, update=True, process=True)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def in_hours(hours):
    return now() + datetime.timedelta(hours=hours)


class FixedIdentityCredential(UnsignedTokenCredential):
    """UnsignedTokenCredential whose tokens all carry one `oid` (and `tid`)."""

    def __init__(self, oid, tid=TENANT):
        super().__init__()
        self.oid, self.tid = oid, tid

    def get_token(self, *scopes, **kwargs):
        token = super().get_token(*scopes, **kwargs)
        header, payload, signature = token.token.split(".")
        decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        decoded["oid"], decoded["tid"] = self.oid, self.tid
        encoded = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=").decode()
        return token._replace(token=f"{header}.{encoded}.{signature}")


@pytest.fixture
def https_server(spawn_server, tmp_path):
    cert_path, key_path, _ = make_certificate(tmp_path)
    server = spawn_server(["--cert", str(cert_path), "--key", str(key_path), "--oauth", "basic"])
    server.cert_path = cert_path
    server.account_url = f"https://127.0.0.1:{server.port}/{DEV_ACCOUNT}"
    return server


def token_service(server, credential=None):
    return QueueServiceClient(
        server.account_url,
        credential=credential or FixedIdentityCredential("23657296-5cd5-45b0-a809-d972a7f4dfe1"),
        connection_verify=str(server.cert_path),
        **CLIENT_KWARGS,
    )


def sas_client(server, queue_name, token, credential=None):
    """A client that holds only `token` (and `credential` if given), as the SAS's user would."""
    return QueueClient.from_queue_url(
        f"{server.account_url}/{queue_name}?{token}",
        credential=credential,
        connection_verify=str(server.cert_path),
        **CLIENT_KWARGS,
    )


def new_queue(service):
    queue = service.get_queue_client(unique_queue_name("delegated"))
    queue.create_queue()
    return queue


def test_a_user_delegation_sas_made_by_the_sdk_works_for_queue_and_message_operations(https_server):
    with token_service(https_server) as service:
        start, expiry = now(), in_hours(2)
        key = service.get_user_delegation_key(start=start, expiry=expiry)
        # As the service answers: the token's identity, whole seconds, the queue service.
        assert key.signed_oid == "23657296-5cd5-45b0-a809-d972a7f4dfe1"
        assert key.signed_tid == TENANT
        assert key.signed_start == start.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert key.signed_expiry == expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert key.signed_service == "q"
        assert key.signed_version
        assert len(base64.b64decode(key.value)) == 32
        # The same request gives the same key, as Azure's does (the SDK's own test says so).
        again = service.get_user_delegation_key(start=start, expiry=expiry)
        assert (again.value, again.signed_start) == (key.value, key.signed_start)

        queue = new_queue(service)
        token = generate_queue_sas(
            DEV_ACCOUNT, queue.queue_name, None, permission=ALL, expiry=in_hours(1), user_delegation_key=key
        )
        assert "skoid=" in token and "sks=q" in token
        with sas_client(https_server, queue.queue_name, token) as delegated:
            delegated.send_message("delegated")
            assert delegated.get_queue_properties().approximate_message_count == 1
            [peeked] = delegated.peek_messages()
            assert peeked.content == "delegated"
            received = delegated.receive_message(visibility_timeout=60)
            updated = delegated.update_message(received, content="updated", visibility_timeout=0)
            assert [message.content for message in delegated.peek_messages()] == ["updated"]
            delegated.delete_message(received.id, updated.pop_receipt)
            assert delegated.peek_messages() == []
        queue.delete_queue()


def refusal(call):
    with pytest.raises(HttpResponseError) as raised:
        call()
    return status_code(raised.value), error_code(raised.value), str(raised.value)


def test_tampered_expired_and_wrongly_scoped_delegation_sas_are_refused_with_azures_codes(https_server):
    with token_service(https_server) as service:
        key = service.get_user_delegation_key(start=now(), expiry=in_hours(2))
        queue = new_queue(service)
        other = new_queue(service)
        reader = generate_queue_sas(
            DEV_ACCOUNT,
            queue.queue_name,
            None,
            permission=QueueSasPermissions(read=True),
            expiry=in_hours(1),
            user_delegation_key=key,
        )
        # Tampered: a wider grant, another identity, a longer key.
        for field, value in [("sp", "raup"), ("skoid", "someone-else"), ("ske", in_hours(100).strftime("%Y-%m-%dT%H:%M:%SZ"))]:
            fields = dict(urllib.parse.parse_qsl(reader))
            fields[field] = value
            tampered = urllib.parse.urlencode(fields)
            status, code, text = refusal(lambda: sas_client(https_server, queue.queue_name, tampered).peek_messages())
            assert (status, code) == (403, "AuthenticationFailed"), field
            assert "Signature did not match. String to sign used was" in text, text
        # Expired: a SAS whose window has passed.
        expired = generate_queue_sas(
            DEV_ACCOUNT,
            queue.queue_name,
            None,
            permission=ALL,
            start=now() - datetime.timedelta(hours=2),
            expiry=now() - datetime.timedelta(hours=1),
            user_delegation_key=key,
        )
        status, code, text = refusal(lambda: sas_client(https_server, queue.queue_name, expired).peek_messages())
        assert (status, code) == (403, "AuthenticationFailed")
        assert "Signature not valid in the specified time frame" in text, text
        # A key that is not valid yet signs a SAS that is not valid yet.
        later_key = service.get_user_delegation_key(start=in_hours(1), expiry=in_hours(2))
        early = generate_queue_sas(
            DEV_ACCOUNT, queue.queue_name, None, permission=ALL, expiry=in_hours(2), user_delegation_key=later_key
        )
        status, code, text = refusal(lambda: sas_client(https_server, queue.queue_name, early).peek_messages())
        assert (status, code) == (403, "AuthenticationFailed")
        assert "user delegation key is not valid" in text, text
        # Wrongly scoped: another queue, an operation it does not grant, one no SAS may do.
        status, code, _ = refusal(lambda: sas_client(https_server, other.queue_name, reader).peek_messages())
        assert (status, code) == (403, "AuthenticationFailed")
        status, code, _ = refusal(lambda: sas_client(https_server, queue.queue_name, reader).send_message("no"))
        assert (status, code) == (403, "AuthorizationPermissionMismatch")
        status, code, _ = refusal(lambda: sas_client(https_server, queue.queue_name, reader).set_queue_metadata({"a": "b"}))
        assert (status, code) == (403, "AuthorizationFailure")
        assert queue.peek_messages() == []
        queue.delete_queue()
        other.delete_queue()


def test_a_key_is_asked_for_with_a_token_for_at_most_seven_days(https_server):
    with token_service(https_server) as service:
        status, code, _ = refusal(lambda: service.get_user_delegation_key(start=now(), expiry=now() + datetime.timedelta(days=7, hours=1)))
        assert (status, code) == (400, "InvalidXmlNodeValue")
        status, code, _ = refusal(lambda: service.get_user_delegation_key(start=in_hours(2), expiry=in_hours(1)))
        assert (status, code) == (400, "InvalidXmlNodeValue")
        assert service.get_user_delegation_key(start=now(), expiry=now() + datetime.timedelta(days=6, hours=23))
    # The account key cannot ask for one: only authorization with Entra ID is supported.
    body = (
        "<?xml version='1.0' encoding='utf-8'?>\n<KeyInfo><Start>2026-01-01T00:00:00Z</Start>"
        "<Expiry>2026-01-02T00:00:00Z</Expiry></KeyInfo>"
    )
    status, headers, answer = raw_request(
        https_server,
        f"POST /{DEV_ACCOUNT}/?restype=service&comp=userdelegationkey HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"x-ms-version: 2026-04-06\r\nAuthorization: SharedKey {DEV_ACCOUNT}:{'A' * 43}=\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode(),
        trusting(https_server.cert_path),
    )
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed"), answer
    assert b"<AuthenticationErrorDetail>Only authentication scheme Bearer is supported" in answer


def test_a_sas_bound_to_a_user_works_only_with_that_users_token(https_server):
    user = "7d7b4b55-4c3f-4e50-9a55-3c1f2d6f9a10"
    with token_service(https_server) as service:
        key = service.get_user_delegation_key(start=now(), expiry=in_hours(2))
        queue = new_queue(service)
        token = generate_queue_sas(
            DEV_ACCOUNT,
            queue.queue_name,
            None,
            permission=ALL,
            expiry=in_hours(1),
            user_delegation_key=key,
            user_delegation_oid=user,
        )
        assert f"sduoid={user}" in token
        with sas_client(https_server, queue.queue_name, token, FixedIdentityCredential(user)) as bound:
            bound.send_message("for the delegated user")
        for credential in [None, FixedIdentityCredential("someone-else")]:
            status, code, _ = refusal(
                lambda: sas_client(https_server, queue.queue_name, token, credential).peek_messages()
            )
            assert (status, code) == (403, "AuthenticationFailed")
        assert [message.content for message in queue.peek_messages()] == ["for the delegated user"]

        # Across tenants: the key names the delegated user's tenant, whose token alone opens it.
        cross = service.get_user_delegation_key(start=now(), expiry=in_hours(2), delegated_user_tid=OTHER_TENANT)
        assert cross.signed_delegated_user_tid == OTHER_TENANT
        token = generate_queue_sas(
            DEV_ACCOUNT,
            queue.queue_name,
            None,
            permission=ALL,
            expiry=in_hours(1),
            user_delegation_key=cross,
            user_delegation_oid=user,
        )
        assert f"skdutid={OTHER_TENANT}" in token
        with sas_client(https_server, queue.queue_name, token, FixedIdentityCredential(user, OTHER_TENANT)) as away:
            assert len(away.peek_messages()) == 1
        status, code, _ = refusal(
            lambda: sas_client(https_server, queue.queue_name, token, FixedIdentityCredential(user)).peek_messages()
        )
        assert (status, code) == (403, "AuthenticationFailed")
        queue.delete_queue()


def test_a_bearer_token_never_carries_an_unchecked_sas(https_server):
    """Issue 41: with a bearer token, a SAS that did not read (a `sig` that is not base64, a
    broken field) was passed over and the token alone served the request. The SAS beside a
    token is now always checked and decides; the token must hold as well."""
    user = "7d7b4b55-4c3f-4e50-9a55-3c1f2d6f9a10"
    with token_service(https_server) as service:
        key = service.get_user_delegation_key(start=now(), expiry=in_hours(2))
        queue = new_queue(service)
        queue.send_message("kept")

        def sas(permission=ALL, oid=user):
            return generate_queue_sas(
                DEV_ACCOUNT,
                queue.queue_name,
                None,
                permission=permission,
                expiry=in_hours(1),
                user_delegation_key=key,
                user_delegation_oid=oid,
            )

        def altered(token, **fields):
            values = dict(urllib.parse.parse_qsl(token))
            values.update(fields)
            return urllib.parse.urlencode(values)

        mine = sas()
        with sas_client(https_server, queue.queue_name, mine, FixedIdentityCredential(user)) as bound:
            assert [message.content for message in bound.peek_messages()] == ["kept"]
        signature = dict(urllib.parse.parse_qsl(mine))["sig"]
        refused = [
            altered(mine, sig="!" + signature),  # does not read
            altered(mine, sig=base64.b64encode(bytes(32)).decode()),  # reads, forged
            sas(oid="someone-else"),  # another user's
            altered(sas(oid="someone-else"), sig="not base64!", skt="yesterday"),  # both
            altered(mine, sv=""),  # no version
        ]
        for token in refused:
            status, code, _ = refusal(
                lambda: sas_client(https_server, queue.queue_name, token, FixedIdentityCredential(user)).send_message(
                    "carried by the token"
                )
            )
            assert (status, code) == (403, "AuthenticationFailed"), token
        # A good SAS that only reads: the token does not widen it.
        reader = sas(permission=QueueSasPermissions(read=True))
        status, code, _ = refusal(
            lambda: sas_client(https_server, queue.queue_name, reader, FixedIdentityCredential(user)).send_message("no")
        )
        assert (status, code) == (403, "AuthorizationPermissionMismatch")
        assert [message.content for message in queue.peek_messages(max_messages=32)] == ["kept"]
        queue.delete_queue()


def test_a_delegation_sas_survives_a_restart(https_server):
    from conftest import persistent, start_server, stop_server

    with token_service(https_server) as service:
        key = service.get_user_delegation_key(start=now(), expiry=in_hours(2))
        queue = new_queue(service)
        token = generate_queue_sas(
            DEV_ACCOUNT, queue.queue_name, None, permission=ALL, expiry=in_hours(1), user_delegation_key=key
        )
        with sas_client(https_server, queue.queue_name, token) as delegated:
            delegated.send_message("before the restart")
        # On disk, the restart must keep everything acknowledged before it (restart_witness.py).
        witness = RestartWitness(service) if persistent() else None
        if witness:
            witness.before_restart()
    stop_server(https_server)
    again = start_server(
        https_server.binary, https_server.log_dir, https_server.extra_args, https_server.env, port=https_server.port
    )
    try:
        again.cert_path, again.account_url = https_server.cert_path, https_server.account_url
        with token_service(again) as service:
            if witness:
                witness.moved_to(service)
                witness.check_after_restart("SIGTERM of a server with its data on disk", again.log_tail)
                queue_again = service.get_queue_client(queue.queue_name)
                assert [message.content for message in queue_again.peek_messages(max_messages=32)] == [
                    "before the restart"
                ]
            else:
                service.get_queue_client(queue.queue_name).create_queue()  # in memory: gone
        with sas_client(again, queue.queue_name, token) as delegated:
            delegated.send_message("after the restart")
            assert "after the restart" in [message.content for message in delegated.peek_messages(max_messages=2)]
        # A key asked for again with the same times is the same key.
        with token_service(again) as service:
            assert service.get_user_delegation_key(
                start=datetime.datetime.strptime(key.signed_start, "%Y-%m-%dT%H:%M:%SZ"),
                expiry=datetime.datetime.strptime(key.signed_expiry, "%Y-%m-%dT%H:%M:%SZ"),
            ).value == key.value
    finally:
        stop_server(again)
