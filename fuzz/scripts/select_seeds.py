#!/usr/bin/env python3
"""Picks a small seed set from a libFuzzer merge control file: greedy maximum coverage.

`cargo fuzz cmin` keeps every input that adds a feature, smallest first, which for the parser
still leaves a few hundred files. The seeds committed under fuzz/seeds/<target>/ must stay small
(about 50 files), so this takes the control file of a merge over the cmin'd corpus, where each
input lists the coverage edges it reaches (`COV` lines), and picks at most FILES_MAX inputs, each
time the one adding the most edges not yet covered (ties: the smaller file). It prints the
chosen paths and, on stderr, the share of edges they keep. See fuzz/README.md.

usage: select_seeds.py CONTROL_FILE FILES_MAX
"""
import os
import sys


def main():
    control_path, files_max = sys.argv[1], int(sys.argv[2])
    with open(control_path) as control:
        lines = control.read().splitlines()
    file_count = int(lines[0])
    paths = lines[2 : 2 + file_count]
    edges = {}
    for line in lines[2 + file_count :]:
        if line.startswith("COV "):
            parts = line.split()
            edges[int(parts[1])] = set(parts[2:])
    every_edge = set().union(*edges.values()) if edges else set()
    covered = set()
    chosen = []
    while len(chosen) < files_max:
        best = max(
            edges,
            key=lambda index: (len(edges[index] - covered), -os.path.getsize(paths[index])),
            default=None,
        )
        if best is None or not edges[best] - covered:
            break
        covered |= edges.pop(best)
        chosen.append(paths[best])
    for path in chosen:
        print(path)
    share = len(covered) / len(every_edge) if every_edge else 1.0
    print(f"{len(chosen)} files keep {len(covered)} of {len(every_edge)} edges ({share:.1%})", file=sys.stderr)


main()
