"""Load generation scaled out: several azq-loadgen processes at once through the proxy, each on
an account of its own, and their latency logs merged by scripts/merge-hdr-logs.py into one
distribution per operation (docs/SCALING.md).

Uses the azq-loadgen binary from AZQ_LOADGEN_BIN, else the release build, else the debug build
that `cargo test --workspace` leaves behind; the run is bounded by its request count.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MERGE_SCRIPT = REPO_ROOT / "scripts" / "merge-hdr-logs.py"
PROCESS_COUNT = 2
# A multiple of 100, so that p50, p90 and p99 fall on whole ranks.
REQUESTS_PER_PROCESS = 600
RUN_TIMEOUT_S = 120


def loadgen_binary() -> Path:
    if os.environ.get("AZQ_LOADGEN_BIN"):
        return Path(os.environ["AZQ_LOADGEN_BIN"]).resolve()
    for profile in ("release", "debug"):
        candidate = REPO_ROOT / "target" / profile / "azq-loadgen"
        if candidate.is_file():
            return candidate
    pytest.skip("no azq-loadgen binary: cargo build -p azq-loadgen, or set AZQ_LOADGEN_BIN")


def merge_logs(log_dir: Path, accounts) -> dict:
    """scripts/merge-hdr-logs.py over the logs of `accounts`' processes; its JSON summary."""
    out = log_dir / "merged.json"
    merged = subprocess.run(
        [sys.executable, str(MERGE_SCRIPT), "--json", str(out)]
        + [str(log_dir / f"{account}.hlog") for account in accounts],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert merged.returncode == 0, merged.stderr
    return json.loads(out.read_text())


def test_loadgen_processes_through_the_proxy_merge_into_one_distribution(cluster, tmp_path):
    binary = loadgen_binary()
    accounts = list(cluster.accounts)[:PROCESS_COUNT]
    processes = []
    for account in accounts:
        command = [
            str(binary),
            "--endpoint",
            f"{cluster.endpoint}/{account}",
            "--key",
            cluster.accounts[account],
            "--scenario",
            "get-delete",
            "--preload",
            str(REQUESTS_PER_PROCESS),
            "--requests",
            str(REQUESTS_PER_PROCESS),
            "--connections",
            "2",
            "--warmup",
            "0s",
            "--quiet",
            "--max-error-rate",
            "0",
            "--json",
            str(tmp_path / f"{account}.json"),
            "--hdr-log",
            str(tmp_path / f"{account}.hlog"),
        ]
        processes.append(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    for process in processes:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
        assert process.returncode == 0, output.decode()

    reports = [json.loads((tmp_path / f"{account}.json").read_text()) for account in accounts]
    # One log alone gives back what its process reported: the count, and the percentiles
    # whose rank is a whole number at this count (for the others, the Rust and Python
    # HdrHistogram libraries round the rank differently, by one sample).
    alone = merge_logs(tmp_path, accounts[:1])
    for operation, stats in reports[0]["ops"].items():
        assert alone[operation]["count"] == stats["count"] == REQUESTS_PER_PROCESS
        for percentile in ("p50", "p90", "p99", "max"):
            assert alone[operation][percentile] == stats["latency_us"][percentile], operation

    summary = merge_logs(tmp_path, accounts)
    # The preloaded messages carry their put time, so the logs also hold the end-to-end latency
    # of every message a get received.
    assert set(summary) == {"get", "delete", "end-to-end"}
    received = sum(report["ops"]["get"]["messages"] for report in reports)
    assert summary["end-to-end"]["count"] == received == PROCESS_COUNT * REQUESTS_PER_PROCESS
    for operation in ("get", "delete"):
        merged_stats = summary[operation]
        parts = [report["ops"][operation] for report in reports]
        # Every request of every process is in the merged distribution, and a percentile of the
        # union lies between the processes' own.
        assert merged_stats["count"] == sum(part["count"] for part in parts) > 0
        for percentile in ("p50", "p99"):
            values = [part["latency_us"][percentile] for part in parts]
            assert min(values) <= merged_stats[percentile] <= max(values), (operation, percentile)
        assert merged_stats["max"] == max(part["latency_us"]["max"] for part in parts)
