#!/usr/bin/env python3
"""Adds io_uring to a container seccomp profile, so azq can run on its io_uring backend.

Docker >= 25 and containerd 2 removed io_uring_setup, io_uring_enter and io_uring_register from
their default seccomp profiles (moby/moby#46762, containerd/containerd#9048). Under them azq
falls back to its portable backend (also what `--runtime auto` picks: measured faster); to run
`--runtime io_uring` in a container, start from the runtime's own default profile and allow
just those three calls:

    curl -fsSL -o docker-default.json \\
        https://raw.githubusercontent.com/moby/moby/master/profiles/seccomp/default.json
    python3 deploy/seccomp/add-io-uring.py docker-default.json > docker-default-with-io-uring.json
    docker run --security-opt seccomp=docker-default-with-io-uring.json -p 10001:10001 azq

The profile is read from the file named (or standard input with `-`) and written to standard
output; a profile that already allows the three calls unconditionally comes out unchanged.
"""

import json
import sys

IO_URING_CALLS = ["io_uring_setup", "io_uring_enter", "io_uring_register"]


def allowed_unconditionally(profile: dict) -> set:
    """The system calls a rule allows with no argument filter or condition."""
    names = set()
    for rule in profile.get("syscalls") or []:
        conditional = rule.get("args") or rule.get("includes") or rule.get("excludes")
        if rule.get("action") == "SCMP_ACT_ALLOW" and not conditional:
            names.update(rule.get("names") or [])
    return names


def with_io_uring(profile: dict) -> dict:
    """`profile` with one more rule allowing whichever io_uring calls it does not allow yet."""
    if "defaultAction" not in profile:
        raise ValueError("not a seccomp profile: no defaultAction")
    missing = [name for name in IO_URING_CALLS if name not in allowed_unconditionally(profile)]
    if missing:
        rule = {
            "names": missing,
            "action": "SCMP_ACT_ALLOW",
            "comment": "azq: io_uring (removed from the defaults of Docker >= 25, containerd 2)",
        }
        profile = {**profile, "syscalls": list(profile.get("syscalls") or []) + [rule]}
    return profile


def main(arguments: list) -> int:
    if len(arguments) != 1:
        print("usage: add-io-uring.py PROFILE.json|- > PROFILE-with-io-uring.json", file=sys.stderr)
        return 2
    source = sys.stdin if arguments[0] == "-" else open(arguments[0], encoding="utf-8")
    with source:
        profile = json.load(source)
    json.dump(with_io_uring(profile), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
