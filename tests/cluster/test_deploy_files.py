"""The deployment files that cannot run here (no container runtime, no Envoy binary) at least
agree with each other and with the HAProxy configuration the cluster tests run.

HAProxy checks its full configuration itself (`haproxy -c`); the YAML files are parsed, and the
facts that must match across them are compared: the number of nodes, their order, the accounts
passed to every node, one volume per node. Envoy's hash-key regexes are checked with Python's
re, whose syntax agrees with RE2 for these patterns.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
NODE_COUNT = 3


def load_all(path: Path) -> list:
    with open(path) as file:
        return list(yaml.safe_load_all(file))


def test_haproxy_accepts_the_deploy_configuration():
    env = {**os.environ, **{f"AZQ_NODE{n}": f"127.0.0.1:{10000 + n}" for n in range(1, 4)}}
    checked = subprocess.run(
        ["haproxy", "-c", "-f", DEPLOY / "haproxy/haproxy.cfg", "-f", DEPLOY / "haproxy/nodes.cfg"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_nodes_cfg_has_a_ring_member_and_a_checked_listen_section_per_node():
    text = (DEPLOY / "haproxy/nodes.cfg").read_text()
    members = re.findall(
        r"^    server node(\d+) abns@azq-node(\d+) id (\d+) send-proxy-v2$", text, re.M
    )
    assert members == [(str(n), str(n), str(n)) for n in range(1, NODE_COUNT + 1)]
    for node in range(1, NODE_COUNT + 1):
        section = re.search(rf"^listen node{node}\n((?:    .*\n)+)", text, re.M)
        assert section, f"no listen node{node}"
        # The client's address goes on in a PROXY v2 header, through both tiers.
        assert f"bind abns@azq-node{node} accept-proxy\n" in section.group(1)
        assert re.search(
            rf'server azq "\$\{{AZQ_NODE{node}-azq-{node}:10001\}}" check send-proxy-v2 ',
            section.group(1),
        )
    # The ring itself is never health-checked (a down node must not move its accounts).
    ring = re.search(r"^backend accounts\n((?:    .*\n)+)", text, re.M).group(1)
    assert " check" not in ring


def test_compose_runs_one_node_per_ring_member_each_with_its_volume():
    compose = load_all(DEPLOY / "compose.yaml")[0]
    nodes = {
        name: service for name, service in compose["services"].items() if name.startswith("azq-")
    }
    assert sorted(nodes) == [f"azq-{n}" for n in range(1, NODE_COUNT + 1)]
    volumes = set()
    for name, service in nodes.items():
        assert "AZURITE_ACCOUNTS" in service["environment"]
        assert service["healthcheck"]["test"] == ["CMD", "/usr/local/bin/azq", "healthcheck"]
        command = service["command"]
        assert command[0].startswith("--"), "the image's entrypoint is azq: arguments only"
        assert command[command.index("--location") + 1] == "/data"
        assert command[command.index("--queuePort") + 1] == "10001"
        assert "--proxyProtocol" in command
        (volume,) = service["volumes"]
        assert volume.endswith(":/data")
        volumes.add(volume.split(":")[0])
    assert len(volumes) == NODE_COUNT
    proxy = compose["services"]["proxy"]
    assert proxy["command"][1:] == [
        "-f",
        "/usr/local/etc/haproxy/haproxy.cfg",
        "-f",
        "/usr/local/etc/haproxy/nodes.cfg",
    ]


def test_kubernetes_pods_match_the_ring_members_in_order():
    documents = {
        (doc["kind"], doc["metadata"]["name"]): doc
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in load_all(path)
        if doc.get("kind") != "Kustomization"
    }
    statefulset = documents[("StatefulSet", "azq")]
    assert statefulset["spec"]["replicas"] == NODE_COUNT
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["volumeMounts"] == [{"name": claim["metadata"]["name"], "mountPath": "/data"}]
    assert "command" not in container, "the image's entrypoint is azq: arguments only"
    assert container["args"][container["args"].index("--location") + 1] == "/data"
    # The nodes take the proxy's PROXY v2 header; their probe sends one (azq healthcheck).
    assert "--proxyProtocol" in container["args"]
    assert container["readinessProbe"]["exec"]["command"] == ["/usr/local/bin/azq", "healthcheck"]
    assert [env["name"] for env in container["env"]] == ["AZURITE_ACCOUNTS"]
    service = documents[("Service", statefulset["spec"]["serviceName"])]
    assert service["spec"]["clusterIP"] == "None"
    (proxy,) = documents[("Deployment", "azq-proxy")]["spec"]["template"]["spec"]["containers"]
    namespace = statefulset["metadata"]["namespace"]
    assert [(env["name"], env["value"]) for env in proxy["env"]] == [
        (f"AZQ_NODE{n + 1}", f"azq-{n}.azq.{namespace}.svc.cluster.local:10001")
        for n in range(NODE_COUNT)
    ]


@pytest.mark.parametrize(
    "path, host, account",
    [
        ("/acct/q/messages?peekonly=true", "127.0.0.1:10001", "acct"),
        ("/acct-secondary?comp=list", "127.0.0.1:10001", "acct"),
        ("/acct", "proxy.example:10001", "acct"),
        ("/q/messages", "acct.queue.localhost:10001", "acct"),
        ("/?comp=list", "acct-secondary.queue.core.windows.net", "acct"),
    ],
)
def test_envoy_hashes_on_the_account(path, host, account):
    config = load_all(DEPLOY / "envoy/envoy.yaml")[0]
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    routes = manager["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    headers = {":path": path, ":authority": host}
    for route in routes:
        matchers = route["match"].get("headers", [])
        if all(
            re.fullmatch(m["string_match"]["safe_regex"]["regex"], headers[m["name"]])
            for m in matchers
        ):
            break
    (policy,) = route["route"]["hash_policy"]
    rewrite = policy["header"]["regex_rewrite"]
    key = re.sub(
        rewrite["pattern"]["regex"],
        rewrite["substitution"],
        headers[policy["header"]["header_name"]],
    )
    assert key == account
    cluster = config["static_resources"]["clusters"][0]
    assert cluster["lb_policy"] == "MAGLEV"
    assert cluster["common_lb_config"]["healthy_panic_threshold"] == {"value": 100.0}
    assert len(cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]) == NODE_COUNT


def node_arguments() -> dict:
    """The azq arguments of every deployment file and of the image's default command."""
    compose = load_all(DEPLOY / "compose.yaml")[0]["services"]["azq-1"]["command"]
    statefulset = next(
        doc for doc in load_all(DEPLOY / "k8s/azq.yaml") if doc.get("kind") == "StatefulSet"
    )
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    # The image's CMD, its continuation lines joined.
    dockerfile = (DEPLOY / "docker/Dockerfile").read_text().replace("\\\n", " ")
    image = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    return {"compose": compose, "k8s": container["args"], "image": image}


@pytest.mark.parametrize("deployment", ["compose", "k8s", "image"])
def test_the_real_binary_accepts_each_deployments_arguments(deployment, tmp_path):
    """Run azq with the arguments a deployment gives it, only its address (loopback, a free port;
    tests/runtime.rs covers 0.0.0.0) and its data directory (a temporary one) changed: it must
    start, serve and report itself healthy."""
    arguments = list(node_arguments()[deployment])
    # Every listener on every address; here on loopback, on free ports (the image's command is
    # Azurite's, `azurite …`, with the blob and table probe ports and the default queue port).
    for flag in ("--queueHost", "--blobHost", "--tableHost"):
        if flag in arguments:
            assert arguments[arguments.index(flag) + 1] == "0.0.0.0", flag
            arguments[arguments.index(flag) + 1] = "127.0.0.1"
    for flag in ("--queuePort", "--blobPort", "--tablePort"):
        if flag in arguments:
            arguments[arguments.index(flag) + 1] = "0"
        elif flag == "--queuePort" or arguments[0] == "azurite":
            arguments += [flag, "0"]
    location = "--location" if "--location" in arguments else "-l"
    arguments[arguments.index(location) + 1] = str(tmp_path / "data")
    # Only as many shards as this machine has CPUs (the files ask for up to 2).
    if "--shards" in arguments:
        at = arguments.index("--shards") + 1
        arguments[at] = str(min(int(arguments[at]), os.cpu_count() or 1))
    binary = os.environ.get("AZQ_BIN", str(REPO_ROOT / "target/release/azq"))
    env = {**os.environ, "AZURITE_ACCOUNTS": "acct1:a2V5MQ==;acct2:a2V5Mg=="}
    process = subprocess.Popen(
        [binary, *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        ready = ""
        for line in process.stdout:
            if line.startswith("azq listening on "):
                ready = line
                break
        assert ready, process.stderr.read()
        port = re.search(r"http://127\.0\.0\.1:(\d+) ", ready).group(1)
        assert f"data {tmp_path / 'data'}" in ready
        # Named by port, the server is not the one beside the check: the PROXY header it
        # needs is asked for explicitly (a container's `azq healthcheck` finds the flag itself).
        proxy_header = ["--proxyProtocol"] if "--proxyProtocol" in arguments else []
        healthy = subprocess.run(
            [binary, "healthcheck", "--queuePort", port, *proxy_header],
            capture_output=True, text=True, timeout=30,
        )
        assert healthy.returncode == 0, healthy.stderr
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
