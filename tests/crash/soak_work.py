#!/usr/bin/env python3
"""soak_work.py - one node's share of the cluster soak (t_cluster_soak.sh,
issue 22's mixed workload).

  soak_work.py run   NODE MNT SECONDS SEED STATE
  soak_work.py check STATE_DIR MNT

run: for SECONDS, random operations of this node (one process):
  - small files in its own directory mnt/own-NODE: created, written,
    fsync'ed, renamed, unlinked;
  - 64 KiB appends (O_APPEND) to its two big files mnt/big-NODE-{0,1},
    and now and then a truncate of one to 0 (`: > file`), which frees a
    block map;
  - uniquely named files in the shared directory mnt/shared (made, some
    unlinked again by their maker);
  - 64-byte O_APPEND records to the shared log mnt/log, one fd kept open.
Every operation is timed; the slowest is kept.  STATE (a JSON file) gets
what must be there at the end: the big files' sizes and contents (a
pattern of node, file and chunk number), the names of the node's shared
files and own files with their contents, the log records the node wrote
(each acknowledged by its write(2)), and the slowest operation.

check: (every node done) the state of each node against the tree: every
big file, own file and shared file as its node left it, no other names,
and every acknowledged log record exactly once, each node's in order.
Prints one line per problem; exit 1 if any.
"""
import json
import os
import random
import sys
import time

CHUNK = 64 * 1024
REC = 64


def chunk(node, f, n):
    head = ("%s.%d.%08d|" % (node, f, n)).encode()
    return (head * (CHUNK // len(head) + 1))[:CHUNK]


def record(node, seq):
    return ("%s %08d " % (node, seq)).encode().ljust(REC - 1, b"-") + b"\n"


def run(node, mnt, seconds, seed, state):
    rnd = random.Random(seed)
    own = os.path.join(mnt, "own-" + node)
    shared = os.path.join(mnt, "shared")
    os.makedirs(own, exist_ok=True)
    os.makedirs(shared, exist_ok=True)
    big = [os.path.join(mnt, "big-%s-%d" % (node, i)) for i in range(2)]
    bigfd = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) for p in big]
    bigchunks = [[] for _ in big]  # chunk numbers in file order
    nchunk = 0
    logfd = os.open(os.path.join(mnt, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    logged = []
    ownfiles = {}     # name -> content
    sharedfiles = {}  # name -> content
    seq = 0
    slowest = (0.0, "")
    counts = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seq += 1
        op = rnd.choice(["own_create", "own_create", "own_rename", "own_unlink",
                         "big_append", "big_append", "big_truncate",
                         "shared_create", "shared_unlink", "log", "log", "log"])
        t0 = time.monotonic()
        if op == "own_create":
            name = "f%06d" % seq
            data = ("%s own %d\n" % (node, seq)).encode() * rnd.randint(1, 300)
            fd = os.open(os.path.join(own, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            ownfiles[name] = data
        elif op == "own_rename" and ownfiles:
            old = rnd.choice(sorted(ownfiles))
            new = "r%06d" % seq
            os.rename(os.path.join(own, old), os.path.join(own, new))
            ownfiles[new] = ownfiles.pop(old)
        elif op == "own_unlink" and ownfiles:
            name = rnd.choice(sorted(ownfiles))
            os.unlink(os.path.join(own, name))
            del ownfiles[name]
        elif op == "big_append":
            i = rnd.randrange(2)
            os.write(bigfd[i], chunk(node, i, nchunk))
            bigchunks[i].append(nchunk)
            nchunk += 1
        elif op == "big_truncate":
            i = rnd.randrange(2)
            os.truncate(big[i], 0)
            bigchunks[i] = []
        elif op == "shared_create":
            name = "%s-%06d" % (node, seq)
            data = ("%s shared %d\n" % (node, seq)).encode() * rnd.randint(1, 50)
            with open(os.path.join(shared, name), "wb") as f:
                f.write(data)
            sharedfiles[name] = data
        elif op == "shared_unlink" and sharedfiles:
            name = rnd.choice(sorted(sharedfiles))
            os.unlink(os.path.join(shared, name))
            del sharedfiles[name]
        elif op == "log":
            r = record(node, seq)
            if os.write(logfd, r) != REC:
                raise SystemExit("short log write")
            logged.append(seq)
        else:
            continue
        dt = time.monotonic() - t0
        counts[op] = counts.get(op, 0) + 1
        if dt > slowest[0]:
            slowest = (dt, op)
    for fd in bigfd + [logfd]:
        os.close(fd)
    with open(state, "w") as f:
        json.dump({"node": node, "ops": sum(counts.values()), "counts": counts,
                   "slowest": slowest, "big": bigchunks,
                   "own": {k: v.decode() for k, v in ownfiles.items()},
                   "shared": {k: v.decode() for k, v in sharedfiles.items()},
                   "logged": logged}, f)


def check(state_dir, mnt):
    states = []
    for name in sorted(os.listdir(state_dir)):
        if name.endswith(".json"):
            with open(os.path.join(state_dir, name)) as f:
                states.append(json.load(f))
    bad = []
    shared_want = {}
    for st in states:
        node = st["node"]
        for i, chunks in enumerate(st["big"]):
            p = os.path.join(mnt, "big-%s-%d" % (node, i))
            with open(p, "rb") as f:
                got = f.read()
            want = b"".join(chunk(node, i, n) for n in chunks)
            if got != want:
                at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]),
                          min(len(got), len(want)))
                bad.append("%s: %d bytes, want %d (%d chunks); first difference at %d" %
                           (p, len(got), len(want), len(chunks), at))
        own = os.path.join(mnt, "own-" + node)
        names = set(os.listdir(own))
        if names != set(st["own"]):
            bad.append("%s: names differ: extra %s, missing %s" %
                       (own, sorted(names - set(st["own"]))[:5], sorted(set(st["own"]) - names)[:5]))
        for name, data in st["own"].items():
            if name in names:
                with open(os.path.join(own, name), "rb") as f:
                    if f.read() != data.encode():
                        bad.append("%s/%s: wrong content" % (own, name))
        shared_want.update(st["shared"])
    shared = os.path.join(mnt, "shared")
    names = set(os.listdir(shared))
    if names != set(shared_want):
        bad.append("shared: names differ: extra %s, missing %s" %
                   (sorted(names - set(shared_want))[:5], sorted(set(shared_want) - names)[:5]))
    for name, data in shared_want.items():
        if name in names:
            with open(os.path.join(shared, name), "rb") as f:
                if f.read() != data.encode():
                    bad.append("shared/%s: wrong content" % name)
    with open(os.path.join(mnt, "log"), "rb") as f:
        log = f.read()
    if len(log) % REC:
        bad.append("log: %d bytes, not whole records" % len(log))
    seen = {}
    for k in range(0, len(log) - len(log) % REC, REC):
        r = log[k:k + REC]
        parts = r.split()
        if len(parts) < 2 or not r.endswith(b"\n"):
            bad.append("log: garbled record at %d: %r" % (k, r[:20]))
            continue
        seen.setdefault(parts[0].decode(), []).append(int(parts[1]))
    for st in states:
        got = seen.get(st["node"], [])
        if got != st["logged"]:
            missing = sorted(set(st["logged"]) - set(got))
            bad.append("log: node %s wrote %d records, %d found (%d missing, e.g. %s; in order: %s)" %
                       (st["node"], len(st["logged"]), len(got), len(missing), missing[:3],
                        got == sorted(got)))
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    elif sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
