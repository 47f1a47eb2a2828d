"""Fixtures of the cluster suite: `cluster` (three nodes behind HAProxy, shared by the tests
that only add queues of their own) and `start_cluster` (a cluster of the test's own), both run by
scripts/cluster-demo.sh (cluster_demo.py) and stopped with SIGTERM at the end, checking that
every process the script started is gone.
"""

import sys
from pathlib import Path

import pytest

from cluster_demo import ClusterStarter

# The SDK suite's helpers (client settings, queue names, polling) serve this suite's tests too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Three nodes behind HAProxy, shared by the tests that only add queues of their own (the
    accounts get fresh keys on every run)."""
    starter = ClusterStarter(tmp_path_factory.mktemp("cluster"))
    yield starter.start(3)
    starter.stop_all()


@pytest.fixture
def start_cluster(tmp_path):
    """Factory for a cluster of the test's own (`start_cluster(node_count)`), for tests that
    stop nodes or the script."""
    starter = ClusterStarter(tmp_path)
    yield starter.start
    starter.stop_all()
