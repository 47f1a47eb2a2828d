"""deploy/seccomp/add-io-uring.py on small profiles shaped like the container runtimes' defaults:
the three io_uring calls end up allowed unconditionally, nothing else changes, and a profile
that already allows them is left as it is."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "seccomp" / "add-io-uring.py"
SPEC = importlib.util.spec_from_file_location("add_io_uring", SCRIPT)
add_io_uring = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(add_io_uring)

# Docker >= 25's shape: an allow list without io_uring, a conditional rule, errno by default.
WITHOUT = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 1,
    "syscalls": [
        {"names": ["accept4", "epoll_wait", "read", "write"], "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["io_uring_setup"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_ADMIN"]},
        },
    ],
}


def test_adds_the_three_calls_and_keeps_the_rest():
    profile = add_io_uring.with_io_uring(WITHOUT)
    assert add_io_uring.allowed_unconditionally(profile) >= set(add_io_uring.IO_URING_CALLS)
    assert profile["syscalls"][:2] == WITHOUT["syscalls"]
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert len(profile["syscalls"]) == 3


def test_a_profile_that_allows_them_is_unchanged():
    allowing = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "syscalls": [{"names": add_io_uring.IO_URING_CALLS + ["read"], "action": "SCMP_ACT_ALLOW"}],
    }
    assert add_io_uring.with_io_uring(allowing) == allowing


def test_command_line_reads_a_file_and_refuses_other_json(tmp_path):
    source = tmp_path / "default.json"
    source.write_text(json.dumps(WITHOUT))
    written = subprocess.run(
        [sys.executable, str(SCRIPT), str(source)], capture_output=True, text=True, check=True
    )
    assert "io_uring_enter" in json.loads(written.stdout)["syscalls"][-1]["names"]
    (tmp_path / "other.json").write_text("{}")
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "other.json")], capture_output=True
    )
    assert refused.returncode != 0


# Where the committed ready-made profile comes from: containers-common's default, as Debian 12
# installs it with podman.
CONTAINERS_COMMON_DEFAULT = Path("/usr/share/containers/seccomp.json")
COMMITTED = SCRIPT.parent / "default-with-io-uring.json"


def test_the_committed_profile_allows_io_uring_and_keeps_the_default_action():
    profile = json.loads(COMMITTED.read_text())
    assert add_io_uring.allowed_unconditionally(profile) >= set(add_io_uring.IO_URING_CALLS)
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"


def test_the_committed_profile_is_the_script_applied_to_the_default():
    if not CONTAINERS_COMMON_DEFAULT.is_file():
        pytest.skip(f"{CONTAINERS_COMMON_DEFAULT} is absent (containers-common is not installed)")
    default = json.loads(CONTAINERS_COMMON_DEFAULT.read_text())
    if default.get("defaultErrnoRet") != 38 or len(default["syscalls"]) != 35:
        pytest.skip(f"{CONTAINERS_COMMON_DEFAULT} is not containers-common 0.50.1's")
    assert json.loads(COMMITTED.read_text()) == add_io_uring.with_io_uring(default)
