"""Access beyond the account key, through the official Python SDK: account and service SAS, stored
access policies, queue ACLs, service properties, several accounts, SharedKeyLite, host-style URLs and
CORS.

Tests that change account-wide settings (service properties, CORS) or need another account start a
server of their own with `spawn_server`, so the shared server's account stays as every other test
expects it. SharedKeyLite and CORS preflights are raw HTTP (the SDK never sends them), signed here
with an independent implementation of the contract's string-to-sign.
"""

import base64
import datetime
import hashlib
import hmac
import urllib.parse

import pytest
import requests
import urllib3.util.connection
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
from azure.storage.queue import (
    AccessPolicy,
    AccountSasPermissions,
    CorsRule,
    Metrics,
    QueueAnalyticsLogging,
    QueueClient,
    QueueSasPermissions,
    QueueServiceClient,
    ResourceTypes,
    RetentionPolicy,
    generate_account_sas,
    generate_queue_sas,
)

from support import CLIENT_KWARGS, DEV_ACCOUNT, DEV_KEY, connection_string, error_code, status_code, unique_queue_name

# Keys of the accounts the isolation test configures through AZURITE_ACCOUNTS.
FIRST_ACCOUNT = "acctfirst"
FIRST_KEYS = (
    base64.b64encode(b"first account, primary key").decode(),
    base64.b64encode(b"first account, secondary key").decode(),
)
SECOND_ACCOUNT = "acctsecond"
SECOND_KEY = base64.b64encode(b"second account key").decode()

ORIGIN = "https://app.example"
# Raw requests give up after this long instead of hanging the suite.
RAW_TIMEOUT_S = 10
# A policy start in the past.
POLICY_START = "2020-01-01T00:00:00Z"


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def in_hours(hours):
    return now() + datetime.timedelta(hours=hours)


def assert_refused(raised, status, code):
    assert (status_code(raised.value), error_code(raised.value)) == (status, code)


def account_sas(resource_types="sco", permission="rwdlacup", **kwargs):
    kwargs.setdefault("expiry", in_hours(1))
    return generate_account_sas(DEV_ACCOUNT, DEV_KEY, resource_types, permission, **kwargs)


def sas_service(server, token):
    return QueueServiceClient(account_url=server.endpoint, credential=token, **CLIENT_KWARGS)


def sas_queue(server, name, token):
    return QueueClient(account_url=server.endpoint, queue_name=name, credential=token, **CLIENT_KWARGS)


@pytest.fixture
def queue_name(service_client, request):
    """A unique queue name; whatever exists under it is deleted afterwards."""
    name = unique_queue_name(request.node.name)
    yield name
    try:
        service_client.delete_queue(name)
    except ResourceNotFoundError:
        pass


# --- account SAS ------------------------------------------------------------------------------------


def test_account_sas_covers_service_container_and_object_operations(server, queue_name):
    token = account_sas()
    service = sas_service(server, token)
    # Service: List Queues and Get Service Properties.
    assert isinstance(service.get_service_properties(), dict)
    # Container: create, metadata, delete.
    queue = service.get_queue_client(queue_name)
    queue.create_queue(metadata={"owner": "sas"})
    assert queue.get_queue_properties().metadata == {"owner": "sas"}
    assert queue_name in [item.name for item in service.list_queues(name_starts_with=queue_name)]
    # Object: put, peek, get, update, delete.
    queue.send_message("through an account SAS")
    assert [message.content for message in queue.peek_messages()] == ["through an account SAS"]
    received = queue.receive_message(visibility_timeout=60)
    updated = queue.update_message(received, content="updated", visibility_timeout=0)
    assert [message.content for message in queue.peek_messages()] == ["updated"]
    received = queue.receive_message(visibility_timeout=60)
    queue.delete_message(received)
    assert queue.peek_messages() == []
    queue.delete_queue()
    assert updated.pop_receipt


def test_expired_account_sas_is_authentication_failed(server, queue):
    token = account_sas(expiry=in_hours(-1), start=in_hours(-2))
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")


def test_expired_sas_without_a_start_says_its_expiry_is_not_after_now(server, queue):
    # The JavaScript SDK's live test "create queue with invalid SAS should fail" signs no `st`;
    # the service then takes now as the start and reports the window as empty, in these words
    # (its answers to expired links that carry no `st`), not as a time frame.
    expiry = in_hours(-24).replace(microsecond=0)
    token = account_sas(expiry=expiry)
    assert "st=" not in token
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")
    text = str(raised.value)
    expected = f"authenticationerrordetail:Signed expiry time [{expiry:%a, %d %b %Y %H:%M:%S} GMT] must be after signed start time ["
    assert expected in text, text
    start = text.split(expected, 1)[1].split("]", 1)[0]
    started = datetime.datetime.strptime(start, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=datetime.timezone.utc)
    assert started > expiry, text
    # With a start, an expired SAS is still outside its time frame.
    token = account_sas(start=in_hours(-48), expiry=expiry)
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert "authenticationerrordetail:Signature not valid in the specified time frame: Start [" in str(raised.value)


def test_account_sas_not_yet_valid_is_authentication_failed(server, queue):
    token = account_sas(start=in_hours(1), expiry=in_hours(2))
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")
    # The SDK shows Azure's AuthenticationErrorDetail with the error: what was wrong, in the
    # service's words.
    assert "authenticationerrordetail:Signature not valid in the specified time frame: Start [" in str(
        raised.value
    ), str(raised.value)


def test_account_sas_without_the_permission_is_permission_mismatch(server, queue):
    sas_client = sas_queue(server, queue.queue_name, account_sas(permission="r"))
    assert sas_client.peek_messages() == []
    with pytest.raises(HttpResponseError) as raised:
        sas_client.send_message("not allowed")
    assert_refused(raised, 403, "AuthorizationPermissionMismatch")
    assert queue.peek_messages() == []


def test_account_sas_without_the_resource_type_is_resource_type_mismatch(server, queue):
    # Objects only: queue-level and account-level operations are out of reach.
    token = account_sas(resource_types=ResourceTypes(object=True))
    sas_queue(server, queue.queue_name, token).send_message("objects are fine")
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue.queue_name, token).get_queue_properties()
    assert_refused(raised, 403, "AuthorizationResourceTypeMismatch")
    with pytest.raises(HttpResponseError) as raised:
        list(sas_service(server, token).list_queues())
    assert_refused(raised, 403, "AuthorizationResourceTypeMismatch")


def test_account_sas_for_another_service_is_service_mismatch(server, queue):
    token = account_sas(services="b")
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthorizationServiceMismatch")


def test_https_only_account_sas_over_http_is_protocol_mismatch(server, queue):
    token = account_sas(protocol="https")
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthorizationProtocolMismatch")
    assert sas_queue(server, queue.queue_name, account_sas(protocol="https,http")).peek_messages() == []


def test_account_sas_ip_range_is_checked_against_the_client(server, queue):
    assert sas_queue(server, queue.queue_name, account_sas(ip="127.0.0.0-127.0.0.255")).peek_messages() == []
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue.queue_name, account_sas(ip="10.0.0.1")).peek_messages()
    assert_refused(raised, 403, "AuthorizationSourceIPMismatch")


def test_account_sas_signed_with_a_wrong_key_is_authentication_failed(server, queue):
    wrong_key = base64.b64encode(b"not the account key").decode()
    token = generate_account_sas(DEV_ACCOUNT, wrong_key, "sco", "r", expiry=in_hours(1))
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")


def test_account_sas_of_the_layout_before_2020_12_06_is_accepted(server, queue):
    """The SDK always signs the current layout; this token signs the older one (no `ses` line)."""
    fields = {
        "sv": "2019-12-12",
        "ss": "q",
        "srt": "o",
        "sp": "r",
        "se": in_hours(1).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    string_to_sign = "\n".join(
        [DEV_ACCOUNT, fields["sp"], fields["ss"], fields["srt"], "", fields["se"], "", "", fields["sv"], ""]
    )
    signature = base64.b64encode(
        hmac.new(base64.b64decode(DEV_KEY), string_to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    token = urllib.parse.urlencode({**fields, "sig": signature})
    assert sas_queue(server, queue.queue_name, token).peek_messages() == []


# --- service SAS and stored access policies --------------------------------------------------------


def test_service_sas_without_a_policy_grants_its_permissions(server, queue):
    reader = generate_queue_sas(
        DEV_ACCOUNT, queue.queue_name, DEV_KEY, permission=QueueSasPermissions(read=True), expiry=in_hours(1)
    )
    adder = generate_queue_sas(
        DEV_ACCOUNT, queue.queue_name, DEV_KEY, permission=QueueSasPermissions(add=True), expiry=in_hours(1)
    )
    sas_queue(server, queue.queue_name, adder).send_message("added")
    assert [message.content for message in sas_queue(server, queue.queue_name, reader).peek_messages()] == ["added"]
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue.queue_name, reader).send_message("no")
    assert_refused(raised, 403, "AuthorizationPermissionMismatch")
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue.queue_name, adder).receive_message()
    assert_refused(raised, 403, "AuthorizationPermissionMismatch")
    # The signature names its queue: it opens no other.
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name + "x", reader).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")


def test_service_sas_creating_its_queue_is_an_authorization_failure(server, queue_name):
    # Azure/Azurite#662: the service answers AuthorizationFailure (no service SAS permission
    # covers creating a queue); Azurite answers AuthorizationPermissionMismatch.
    everything = QueueSasPermissions(read=True, add=True, update=True, process=True)
    token = generate_queue_sas(DEV_ACCOUNT, queue_name, DEV_KEY, permission=everything, expiry=in_hours(1))
    with pytest.raises(HttpResponseError) as raised:
        sas_queue(server, queue_name, token).create_queue()
    assert_refused(raised, 403, "AuthorizationFailure")


def test_service_sas_with_a_policy_takes_missing_fields_from_it(server, queue):
    queue.set_queue_access_policy(
        {
            "processors": AccessPolicy(
                permission=QueueSasPermissions(read=True, process=True), start=POLICY_START, expiry=in_hours(1)
            ),
            "adders": AccessPolicy(permission=QueueSasPermissions(add=True)),
        }
    )
    processor = sas_queue(
        server, queue.queue_name, generate_queue_sas(DEV_ACCOUNT, queue.queue_name, DEV_KEY, policy_id="processors")
    )
    # "adders" has no expiry: the SAS supplies it.
    adder = sas_queue(
        server,
        queue.queue_name,
        generate_queue_sas(DEV_ACCOUNT, queue.queue_name, DEV_KEY, policy_id="adders", expiry=in_hours(1)),
    )
    adder.send_message("via policy")
    received = processor.receive_message(visibility_timeout=60)
    assert received.content == "via policy"
    processor.delete_message(received)
    with pytest.raises(HttpResponseError) as raised:
        processor.send_message("no")
    assert_refused(raised, 403, "AuthorizationPermissionMismatch")


def test_service_sas_setting_a_field_its_policy_sets_is_refused(server, queue):
    queue.set_queue_access_policy({"readers": AccessPolicy(permission="r", expiry=in_hours(1))})
    token = generate_queue_sas(
        DEV_ACCOUNT, queue.queue_name, DEV_KEY, policy_id="readers", permission=QueueSasPermissions(read=True)
    )
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")


def test_service_sas_stops_working_when_its_policy_goes(server, queue):
    queue.set_queue_access_policy({"readers": AccessPolicy(permission="r", expiry=in_hours(1))})
    token = generate_queue_sas(DEV_ACCOUNT, queue.queue_name, DEV_KEY, policy_id="readers")
    assert sas_queue(server, queue.queue_name, token).peek_messages() == []
    queue.set_queue_access_policy({})
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")
    unknown = generate_queue_sas(DEV_ACCOUNT, queue.queue_name, DEV_KEY, policy_id="nobody")
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue.queue_name, unknown).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")


def test_recreated_queue_does_not_inherit_the_deleted_queues_policies(server, service_client, queue_name):
    queue = service_client.get_queue_client(queue_name)
    queue.create_queue()
    queue.set_queue_access_policy({"readers": AccessPolicy(permission="r", expiry=in_hours(1))})
    token = generate_queue_sas(DEV_ACCOUNT, queue_name, DEV_KEY, policy_id="readers")
    assert sas_queue(server, queue_name, token).peek_messages() == []
    queue.delete_queue()
    queue.create_queue()
    assert queue.get_queue_access_policy() == {}
    with pytest.raises(ClientAuthenticationError) as raised:
        sas_queue(server, queue_name, token).peek_messages()
    assert_refused(raised, 403, "AuthenticationFailed")


# --- queue ACL ---------------------------------------------------------------------------------------


def test_queue_acl_round_trips_exactly(queue):
    start = datetime.datetime(2026, 11, 22, 0, 17, 36, tzinfo=datetime.timezone.utc)
    sent = {
        "readers": AccessPolicy(permission="r", start=start, expiry=start + datetime.timedelta(days=1)),
        # The SDK reads strings and writes whole seconds.
        "everything": AccessPolicy(permission="raup", expiry="2099-01-01T00:00:00.1234567Z"),
        "by-id-only": AccessPolicy(permission="p"),
        "x" * 64: AccessPolicy(start="2026-11-22T10:00Z"),
        "fifth": AccessPolicy(permission=QueueSasPermissions(add=True, update=True)),
    }
    expected = {
        "readers": ("r", "2026-11-22T00:17:36Z", "2026-11-23T00:17:36Z"),
        "everything": ("raup", None, "2099-01-01T00:00:00Z"),
        "by-id-only": ("p", None, None),
        "x" * 64: (None, "2026-11-22T10:00:00Z", None),
        "fifth": ("au", None, None),
    }
    queue.set_queue_access_policy(sent)
    got = queue.get_queue_access_policy()
    assert {name: (policy.permission, policy.start, policy.expiry) for name, policy in got.items()} == expected
    assert list(got) == list(expected), "in the order set"
    queue.set_queue_access_policy({})
    assert queue.get_queue_access_policy() == {}


@pytest.mark.parametrize(
    "policies, code",
    [
        ({f"p{index}": AccessPolicy(permission="r") for index in range(6)}, "InvalidXmlDocument"),
        ({"p": AccessPolicy(permission="rw")}, "InvalidXmlDocument"),
        ({"p": AccessPolicy(permission="pr")}, "InvalidXmlDocument"),
        ({"x" * 65: AccessPolicy(permission="r")}, "InvalidXmlNodeValue"),
    ],
    ids=["six-policies", "unknown-permission", "permission-order", "long-id"],
)
def test_invalid_queue_acl_is_refused_and_changes_nothing(queue, policies, code):
    queue.set_queue_access_policy({"kept": AccessPolicy(permission="r")})
    with pytest.raises(HttpResponseError) as raised:
        queue.set_queue_access_policy(policies)
    assert_refused(raised, 400, code)
    assert list(queue.get_queue_access_policy()) == ["kept"]


def test_queue_acl_of_a_missing_queue_is_queue_not_found(service_client, queue_name):
    queue = service_client.get_queue_client(queue_name)
    with pytest.raises(ResourceNotFoundError) as raised:
        queue.set_queue_access_policy({"p": AccessPolicy(permission="r")})
    assert_refused(raised, 404, "QueueNotFound")
    with pytest.raises(ResourceNotFoundError) as raised:
        queue.get_queue_access_policy()
    assert_refused(raised, 404, "QueueNotFound")


# --- service properties -------------------------------------------------------------------------------


def own_account(spawn_server):
    server = spawn_server()
    return server, QueueServiceClient.from_connection_string(connection_string(server.endpoint), **CLIENT_KWARGS)


def test_service_properties_round_trip(spawn_server):
    _, service = own_account(spawn_server)
    defaults = service.get_service_properties()
    assert defaults["cors"] == []
    assert defaults["analytics_logging"].read is False
    assert defaults["hour_metrics"].enabled is False

    logging = QueueAnalyticsLogging(read=True, write=True, delete=False, retention_policy=RetentionPolicy(True, 5))
    hour = Metrics(enabled=True, include_apis=True, retention_policy=RetentionPolicy(enabled=True, days=7))
    minute = Metrics(enabled=False)
    cors = [
        CorsRule([ORIGIN, "https://other.example"], ["GET", "PUT"], allowed_headers=["x-ms-meta-*"],
                 exposed_headers=["x-ms-*"], max_age_in_seconds=500),
        CorsRule(["*"], ["DELETE"]),
    ]
    service.set_service_properties(analytics_logging=logging, hour_metrics=hour, minute_metrics=minute, cors=cors)
    got = service.get_service_properties()
    got_logging = got["analytics_logging"]
    assert (got_logging.version, got_logging.read, got_logging.write, got_logging.delete) == (
        logging.version,
        logging.read,
        logging.write,
        logging.delete,
    )
    assert vars(got_logging.retention_policy) == vars(logging.retention_policy)
    for name, sent in (("hour_metrics", hour), ("minute_metrics", minute)):
        assert (got[name].version, got[name].enabled, got[name].include_apis) == (
            sent.version,
            sent.enabled,
            sent.include_apis,
        )
        assert vars(got[name].retention_policy) == vars(sent.retention_policy)
    assert [vars(rule) for rule in got["cors"]] == [vars(rule) for rule in cors]

    # Elements left out keep their values; an empty CORS list clears the rules.
    service.set_service_properties(cors=[])
    got = service.get_service_properties()
    assert got["cors"] == []
    assert got["hour_metrics"].enabled is True
    assert got["analytics_logging"].read is True


def test_more_than_five_cors_rules_are_refused(spawn_server):
    _, service = own_account(spawn_server)
    with pytest.raises(HttpResponseError) as raised:
        service.set_service_properties(cors=[CorsRule(["*"], ["GET"])] * 6)
    assert_refused(raised, 400, "InvalidXmlDocument")
    assert service.get_service_properties()["cors"] == []


# --- accounts and keys ---------------------------------------------------------------------------------


def test_a_second_account_cannot_see_or_touch_the_first_ones_queues(spawn_server):
    accounts = f"{FIRST_ACCOUNT}:{FIRST_KEYS[0]}:{FIRST_KEYS[1]};{SECOND_ACCOUNT}:{SECOND_KEY}"
    server = spawn_server(env={"AZURITE_ACCOUNTS": accounts})
    base = f"http://{server.host}:{server.port}"

    def client(account, key):
        return QueueServiceClient.from_connection_string(
            connection_string(f"{base}/{account}", account=account, key=key), **CLIENT_KWARGS
        )

    first = client(FIRST_ACCOUNT, FIRST_KEYS[0])
    second = client(SECOND_ACCOUNT, SECOND_KEY)
    first.create_queue("private")
    first.get_queue_client("private").send_message("first's")
    # Both keys of an account work.
    assert client(FIRST_ACCOUNT, FIRST_KEYS[1]).get_queue_client("private").peek_messages()[0].content == "first's"

    assert [item.name for item in second.list_queues()] == []
    with pytest.raises(ResourceNotFoundError) as raised:
        second.get_queue_client("private").peek_messages()
    assert_refused(raised, 404, "QueueNotFound")
    with pytest.raises(ResourceNotFoundError):
        second.delete_queue("private")
    # The second account's key does not open the first account's URL.
    intruder = client(FIRST_ACCOUNT, SECOND_KEY)
    with pytest.raises(ClientAuthenticationError) as raised:
        intruder.get_queue_client("private").receive_message()
    assert_refused(raised, 403, "AuthenticationFailed")
    # ACLs and properties are per account too.
    first.get_queue_client("private").set_queue_access_policy({"p": AccessPolicy(permission="r")})
    second.create_queue("private")
    assert second.get_queue_client("private").get_queue_access_policy() == {}
    first.set_service_properties(cors=[CorsRule([ORIGIN], ["GET"])])
    assert second.get_service_properties()["cors"] == []
    # The first account's queue is untouched.
    assert first.get_queue_client("private").get_queue_properties().approximate_message_count == 1
    # The development account is gone: AZURITE_ACCOUNTS replaces it.
    with pytest.raises(HttpResponseError) as raised:
        list(client(DEV_ACCOUNT, DEV_KEY).list_queues())
    assert_refused(raised, 404, "ResourceNotFound")


# --- SharedKeyLite, raw --------------------------------------------------------------------------------


def shared_key_lite(method, path, query, headers, account=DEV_ACCOUNT, key=DEV_KEY):
    """The Authorization header value: SharedKeyLite signs the verb, Content-MD5, Content-Type, Date,
    the x-ms-* headers and the resource with only `comp` of the query."""
    canonical_headers = "".join(
        f"{name.lower()}:{value.strip()}\n"
        for name, value in sorted(headers.items(), key=lambda item: item[0].lower())
        if name.lower().startswith("x-ms-")
    )
    resource = f"/{account}{path}"
    comp = urllib.parse.parse_qs(query).get("comp")
    if comp:
        resource += f"?comp={comp[0]}"
    string_to_sign = (
        f"{method}\n{headers.get('Content-MD5', '')}\n{headers.get('Content-Type', '')}\n\n"
        f"{canonical_headers}{resource}"
    )
    digest = hmac.new(base64.b64decode(key), string_to_sign.encode(), hashlib.sha256).digest()
    return f"SharedKeyLite {account}:{base64.b64encode(digest).decode()}"


def lite_request(server, method, path, query="", body=b"", key=DEV_KEY, content_type=""):
    headers = {
        "x-ms-date": now().strftime("%a, %d %b %Y %H:%M:%S GMT"),
        "x-ms-version": "2026-10-06",
    }
    if content_type:
        headers["Content-Type"] = content_type
    headers["Authorization"] = shared_key_lite(method, path, query, headers, key=key)
    url = f"http://{server.host}:{server.port}{path}" + (f"?{query}" if query else "")
    return requests.request(method, url, headers=headers, data=body, timeout=RAW_TIMEOUT_S)


def test_shared_key_lite_raw_requests(server, service_client, queue_name):
    path = f"/{DEV_ACCOUNT}/{queue_name}"
    assert lite_request(server, "PUT", path).status_code == 201
    body = b"<QueueMessage><MessageText>lite</MessageText></QueueMessage>"
    response = lite_request(server, "POST", f"{path}/messages", body=body, content_type="application/xml")
    assert response.status_code == 201, response.text
    response = lite_request(server, "GET", path, query="comp=metadata")
    assert response.status_code == 200
    assert response.headers["x-ms-approximate-messages-count"] == "1"
    assert [message.content for message in service_client.get_queue_client(queue_name).peek_messages()] == ["lite"]
    wrong_key = base64.b64encode(b"wrong").decode()
    response = lite_request(server, "GET", path, query="comp=metadata", key=wrong_key)
    assert (response.status_code, response.headers.get("x-ms-error-code")) == (403, "AuthenticationFailed")


# --- host-style URLs ----------------------------------------------------------------------------------


@pytest.fixture
def localhost_subdomains(monkeypatch, server):
    """Resolves every `*.localhost` name to the server's address, as browsers and systemd-resolved
    do, so the SDK can use host-style URLs on a machine whose resolver does not."""
    create_connection = urllib3.util.connection.create_connection

    def resolving(address, *args, **kwargs):
        host, port = address
        if host.endswith(".localhost"):
            host = server.host
        return create_connection((host, port), *args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", resolving)


def test_host_style_urls(server, service_client, queue_name, localhost_subdomains):
    account_url = f"http://{DEV_ACCOUNT}.queue.localhost:{server.port}"
    host_style = QueueServiceClient(
        account_url=account_url,
        credential={"account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
        **CLIENT_KWARGS,
    )
    queue = host_style.get_queue_client(queue_name)
    queue.create_queue()
    queue.send_message("host style")
    assert [item.name for item in host_style.list_queues(name_starts_with=queue_name)] == [queue_name]
    # The same queue, path style.
    assert [message.content for message in service_client.get_queue_client(queue_name).peek_messages()] == [
        "host style"
    ]
    # A SAS works host style too.
    token = account_sas()
    sas_client = QueueClient(account_url=account_url, queue_name=queue_name, credential=token, **CLIENT_KWARGS)
    assert sas_client.get_queue_properties().approximate_message_count == 1


# --- CORS ---------------------------------------------------------------------------------------------


def preflight(server, method, headers=None, origin=ORIGIN):
    request_headers = {"Access-Control-Request-Method": method}
    if origin is not None:
        request_headers["Origin"] = origin
    if headers:
        request_headers["Access-Control-Request-Headers"] = headers
    return requests.options(f"{server.endpoint}/anyqueue", headers=request_headers, timeout=RAW_TIMEOUT_S)


def test_cors_preflight_allowed_and_refused(spawn_server):
    server, service = own_account(spawn_server)
    refused = preflight(server, "PUT")
    assert (refused.status_code, refused.headers.get("x-ms-error-code")) == (403, "CorsPreflightFailure")

    service.set_service_properties(
        cors=[CorsRule([ORIGIN], ["GET", "PUT"], allowed_headers=["x-ms-meta-*", "content-type"], max_age_in_seconds=300)]
    )
    allowed = preflight(server, "PUT", headers="x-ms-meta-colour,content-type")
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert allowed.headers["Access-Control-Allow-Methods"] == "PUT"
    assert allowed.headers["Access-Control-Allow-Headers"] == "x-ms-meta-colour,content-type"
    assert allowed.headers["Access-Control-Max-Age"] == "300"

    for response in (
        preflight(server, "DELETE"),
        preflight(server, "GET", origin="https://evil.example"),
        preflight(server, "GET", headers="x-custom"),
    ):
        assert (response.status_code, response.headers.get("x-ms-error-code")) == (403, "CorsPreflightFailure")
        assert "Access-Control-Allow-Origin" not in response.headers
    missing_origin = preflight(server, "GET", origin=None)
    missing_code = missing_origin.headers.get("x-ms-error-code")
    assert (missing_origin.status_code, missing_code) == (400, "InvalidHeaderValue")
    assert "A required CORS header is not present." in missing_origin.text

    # An actual request from the allowed origin can be read by the browser.
    queue = service.get_queue_client("corsqueue")
    queue.create_queue()
    statuses = []
    queue.get_queue_properties(
        headers={"Origin": ORIGIN},
        raw_response_hook=lambda response: statuses.append(dict(response.http_response.headers)),
    )
    assert statuses[0]["Access-Control-Allow-Origin"] == ORIGIN
    assert statuses[0]["Vary"] == "Origin"
