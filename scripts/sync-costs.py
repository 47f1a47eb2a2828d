#!/usr/bin/env python3
"""What a sync costs on this disk in the shapes azq's log could write (standard library only).

  scripts/sync-costs.py [--dir DIR] [--syncs N] [--write-kib K]

Group commit's closed-loop bound is about C / (F + C c) requests/s for C connections, where F is
one flush (a write and an fdatasync) and c the CPU per request: this measures F outside azq, in
a temporary file under DIR (default: the system's temporary directory; pass the directory azq's
--location would use), N flushes of K KiB each, one after another:

  append      each write grows the file (the sync also commits its new size)
  fallocate   into blocks fallocate reserved ("unwritten": the sync commits their conversion),
              as azq's segments are created
  zeroed      into blocks already written with zeros and synced (a plain overwrite)
  direct      zeroed, through O_DIRECT (skipped where the file system refuses it)
  2 threads   fallocate, two flushes in flight at once on two threads (syncs/s, and each's time)
  zero 1 MiB  fallocate, and each flush that reaches past the zeroed blocks first writes 1 MiB
              of zeros after itself (in-line zero-fill: the one slow flush pays for the rest)
  rotation    a new 16 MiB segment as azq makes one (create, fallocate, header, fdatasync,
              rename, directory fsync): milliseconds each, N/100 times

Prints p50, p99 and the mean in microseconds (rotation: milliseconds). Writes only into its own
temporary directory, removed at the end. Run it on a quiet machine: another process's writes
make every sync wait for them.
"""

import argparse
import ctypes
import mmap
import os
import shutil
import tempfile
import threading
import time

LIBC = ctypes.CDLL(None, use_errno=True)
SEGMENT_BYTES = 16 << 20


def fallocate(fd, length):
    if LIBC.fallocate(fd, 0, ctypes.c_long(0), ctypes.c_long(length)) != 0:
        raise OSError(ctypes.get_errno(), "fallocate")


def report(name, times, unit=1e6, label="us"):
    times = sorted(times)
    n = len(times)
    p50, p99, mean = times[n // 2], times[min(n - 1, int(n * 0.99))], sum(times) / n
    print(f"{name:<11} p50 {p50 * unit:8.1f} {label}  p99 {p99 * unit:8.1f} {label}  "
          f"mean {mean * unit:8.1f} {label}")


def new_file(directory, name, length, how):
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if how == "fallocate":
        fallocate(fd, length)
    elif how == "zeroed":
        zeros = bytes(1 << 20)
        for offset in range(0, length, len(zeros)):
            os.pwrite(fd, zeros, offset)
    os.fsync(fd)
    return path, fd


def flushes(fd, data, count, zero_ahead=0, start=0):
    times, zeroed = [], 0
    zeros = bytes(zero_ahead)
    for index in range(count):
        offset = start + index * len(data)
        began = time.perf_counter()
        os.pwrite(fd, data, offset)
        end = offset + len(data)
        if zero_ahead and end > zeroed:
            os.pwrite(fd, zeros, end)
            zeroed = end + zero_ahead
        os.fdatasync(fd)
        times.append(time.perf_counter() - began)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--syncs", type=int, default=2000)
    parser.add_argument("--write-kib", type=int, default=32)
    arguments = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="azq-sync-costs.", dir=arguments.dir)
    count, size = arguments.syncs, arguments.write_kib << 10
    length = count * size + (2 << 20)
    data = os.urandom(size)
    try:
        path, fd = new_file(directory, "append", 0, "append")
        report("append", flushes(fd, data, count))
        os.close(fd)
        os.unlink(path)
        for how in ("fallocate", "zeroed"):
            path, fd = new_file(directory, how, length, how)
            report(how, flushes(fd, data, count))
            os.close(fd)
            os.unlink(path)
        path, fd = new_file(directory, "direct", length, "zeroed")
        try:
            direct = os.open(path, os.O_RDWR | os.O_DIRECT)
        except OSError as error:
            print(f"direct      skipped: {error}")
        else:
            # O_DIRECT wants an aligned buffer: an anonymous mapping is page-aligned.
            aligned = mmap.mmap(-1, size)
            aligned.write(data)
            report("direct", flushes(direct, aligned, count))
            os.close(direct)
        os.close(fd)
        os.unlink(path)
        path, fd = new_file(directory, "threads", 2 * length, "fallocate")
        times, lock, started = [], threading.Lock(), time.perf_counter()

        def flusher(half):
            mine = flushes(fd, data, count, start=half * length)
            with lock:
                times.extend(mine)

        workers = [threading.Thread(target=flusher, args=(half,)) for half in (0, 1)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        report("2 threads", times)
        print(f"{'':<11} {len(times) / elapsed:,.0f} syncs/s together")
        os.close(fd)
        os.unlink(path)
        path, fd = new_file(directory, "zero-ahead", length + (1 << 20), "fallocate")
        report("zero 1 MiB", flushes(fd, data, count, zero_ahead=1 << 20))
        os.close(fd)
        os.unlink(path)
        times = []
        for index in range(max(3, count // 100)):
            began = time.perf_counter()
            temporary = os.path.join(directory, "segment.tmp")
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            fallocate(fd, SEGMENT_BYTES)
            os.pwrite(fd, data[:4096], 0)
            os.fdatasync(fd)
            os.rename(temporary, os.path.join(directory, f"wal-{index}.log"))
            directory_fd = os.open(directory, os.O_RDONLY)
            os.fsync(directory_fd)
            os.close(directory_fd)
            times.append(time.perf_counter() - began)
            os.close(fd)
            os.unlink(os.path.join(directory, f"wal-{index}.log"))
        report("rotation", times, unit=1e3, label="ms")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
