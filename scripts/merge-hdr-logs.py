#!/usr/bin/env python3
"""Merges the HdrHistogram interval logs of several azq-loadgen processes (--hdr-log) into one
latency distribution per operation, as if one load generator had recorded every request.

    .venv/bin/python scripts/merge-hdr-logs.py [--json OUT] LOG...

Load scales out by running azq-loadgen on several machines or cores at once (docs/SCALING.md);
percentiles cannot be averaged, but histograms can be added. Prints, per tag (operation), the
count and the latency percentiles in microseconds; --json writes the same as JSON. With few
samples, a high percentile may land one sample away from azq-loadgen's own report: the Python
and Rust HdrHistogram libraries round a percentile's rank differently.

Needs the `hdrhistogram` package from PyPI (scripts/test.sh installs it into .venv).
"""

import argparse
import json
import sys

from hdrh.histogram import HdrHistogram

# The range the merged histograms cover, in microseconds: 1 µs to one hour, with azq-loadgen's
# 3 significant digits.
LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50, 90, 99, 99.9, 99.99)


def merge(paths):
    """Per tag, the sum of every interval histogram in the logs at `paths`."""
    merged = {}
    for path in paths:
        with open(path) as log:
            for number, line in enumerate(log, 1):
                line = line.strip()
                if not line or line.startswith("#") or line.startswith('"'):
                    continue  # Headers, comments and the legend line.
                tag = ""
                if line.startswith("Tag="):
                    tag, line = line[len("Tag=") :].split(",", 1)
                fields = line.split(",")
                if len(fields) != 4:
                    sys.exit(f"{path}:{number}: not an interval line: {line[:60]}")
                histogram = merged.setdefault(
                    tag, HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
                )
                histogram.decode_and_add(fields[3])
    return merged


def summary(histogram):
    """Count, percentiles and max of one histogram, in microseconds."""
    result = {"count": histogram.get_total_count()}
    for percentile in PERCENTILES:
        result[f"p{percentile:g}"] = histogram.get_value_at_percentile(percentile)
    result["max"] = histogram.get_max_value()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", metavar="LOG", help="azq-loadgen --hdr-log files")
    parser.add_argument("--json", metavar="OUT", help="also write the summary as JSON")
    arguments = parser.parse_args()
    summaries = {tag: summary(h) for tag, h in sorted(merge(arguments.logs).items())}
    columns = ["count"] + [f"p{p:g}" for p in PERCENTILES] + ["max"]
    print(f"{len(arguments.logs)} logs merged; latency in microseconds")
    print(f"{'operation':12}" + "".join(f"{column:>11}" for column in columns))
    for tag, values in summaries.items():
        print(f"{tag or '(untagged)':12}" + "".join(f"{values[c]:>11,}" for c in columns))
    if arguments.json:
        with open(arguments.json, "w") as out:
            json.dump(summaries, out, indent=2)


if __name__ == "__main__":
    main()
