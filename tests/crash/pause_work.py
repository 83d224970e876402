#!/usr/bin/env python3
"""pause_work.py - the work and the model of tests/crash/t_cluster_pause.sh.

  pause_work.py setup MNT                 the shared files (shared/s0..s7)
  pause_work.py node MNT DIR SEED         the node that will be paused:
                                          works in DIR (its own) and on
                                          shared/ until an error or a kill
  pause_work.py survivor MNT DIR SEED     the survivor's turn after the
                                          recovery: changes DIR (the paused
                                          node's), shared/ and its own a/,
                                          fsyncs everything, then syncfs
  pause_work.py tree MNT                  the model: one line per file or
                                          directory under MNT, sorted:
                                          PATH d | PATH f SIZE SHA256 |
                                          PATH l TARGET

The node's work is what a running node keeps in its journal and its
resource groups: creates (sizes 0..200 KiB: inline and block-mapped),
overwrites in place, appends, truncates, renames (to new names and over
existing files), unlinks, mkdirs, writes into the shared files, each
followed or not by an fsync of the file or its directory.  It runs until
an operation fails (the node is paused, then fenced: EIO) and prints how
many operations it did and how it ended.

The survivor's turn rewrites a random half of what the paused node left,
removes and renames some of it, rewrites every shared file whole (so a
stale write of the paused node to any of them shows), and adds files of
its own; then everything is durable (fsync of every file changed, of the
directories, and syncfs).  What `tree` prints afterwards is what every
later view of the filesystem must show until the survivor's next turn.
"""
import ctypes
import errno
import hashlib
import os
import random
import sys

SHARED = 8
SHARED_SIZE = 64 << 10


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def put(path, data, sync=True):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def pwrite(path, data, off, sync):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def blob(rng, n):
    return rng.randbytes(n) if n else b""


def size_of(rng):
    return rng.choice([0, rng.randrange(1, 3000), rng.randrange(3000, 200 << 10)])


def setup(mnt):
    rng = random.Random(1)
    os.makedirs(os.path.join(mnt, "shared"), exist_ok=True)
    for i in range(SHARED):
        put(os.path.join(mnt, "shared", "s%d" % i), blob(rng, SHARED_SIZE))
    fsync_path(os.path.join(mnt, "shared"))


def files_under(d):
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.join(root, n) for n in names]
    return sorted(out)


def node(mnt, d, seed):
    rng = random.Random(seed)
    base = os.path.join(mnt, d)
    dirs = [base]
    ops = 0
    try:
        os.makedirs(base, exist_ok=True)
        while True:
            files = files_under(base)
            op = rng.random()
            sync = rng.random() < 0.25
            if op < 0.3 or not files:
                p = os.path.join(rng.choice(dirs), "f%d" % rng.randrange(100000))
                put(p, blob(rng, size_of(rng)), sync)
                if sync:
                    fsync_path(os.path.dirname(p))
            elif op < 0.45:
                p = rng.choice(files)
                n = os.stat(p).st_size
                pwrite(p, blob(rng, rng.randrange(1, 5000)), rng.randrange(n + 1), sync)
            elif op < 0.55:
                p = rng.choice(files)
                os.truncate(p, rng.randrange(os.stat(p).st_size + 1))
                if sync:
                    fsync_path(p)
            elif op < 0.65:
                a = rng.choice(files)
                b = rng.choice(files) if rng.random() < 0.5 else os.path.join(
                    rng.choice(dirs), "r%d" % rng.randrange(100000))
                os.rename(a, b)
                if sync:
                    fsync_path(os.path.dirname(b))
            elif op < 0.72:
                p = rng.choice(files)
                os.unlink(p)
                if sync:
                    fsync_path(os.path.dirname(p))
            elif op < 0.75 and len(dirs) < 6:
                p = os.path.join(base, "d%d" % rng.randrange(100000))
                os.mkdir(p)
                dirs.append(p)
            else:
                p = os.path.join(mnt, "shared", "s%d" % rng.randrange(SHARED))
                pwrite(p, blob(rng, rng.randrange(1, 9000)),
                       rng.randrange(SHARED_SIZE), sync)
            ops += 1
    except OSError as e:
        print("%d ops, then %s" % (ops, errno.errorcode.get(e.errno, str(e.errno))))


def survivor(mnt, d, seed):
    rng = random.Random(seed)
    base = os.path.join(mnt, d)
    own = os.path.join(mnt, "a")
    os.makedirs(own, exist_ok=True)
    changed = set()
    if os.path.isdir(base):
        for p in files_under(base):
            r = rng.random()
            if r < 0.35:
                put(p, blob(rng, size_of(rng)))
            elif r < 0.45:
                os.unlink(p)
            elif r < 0.55:
                q = os.path.join(own, "from-%s-%d" % (d, rng.randrange(100000)))
                os.rename(p, q)
                changed.add(own)
            changed.add(os.path.dirname(p))
    for i in range(SHARED):
        put(os.path.join(mnt, "shared", "s%d" % i), blob(rng, SHARED_SIZE))
    for _ in range(rng.randrange(3, 10)):
        put(os.path.join(own, "a%d" % rng.randrange(100000)), blob(rng, size_of(rng)))
    changed.add(own)
    for p in sorted(changed):
        fsync_path(p)
    fd = os.open(mnt, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")
    finally:
        os.close(fd)


def tree(mnt):
    lines = []
    for root, dirs, names in os.walk(mnt):
        rel = os.path.relpath(root, mnt)
        for n in dirs:
            p = os.path.join(root, n)
            if os.path.islink(p):
                lines.append("%s l %s" % (os.path.join(rel, n), os.readlink(p)))
            else:
                lines.append("%s d" % os.path.join(rel, n))
        for n in names:
            p = os.path.join(root, n)
            if os.path.islink(p):
                lines.append("%s l %s" % (os.path.join(rel, n), os.readlink(p)))
                continue
            try:
                with open(p, "rb") as f:
                    data = f.read()
                lines.append("%s f %d %s" % (os.path.join(rel, n), len(data),
                                             hashlib.sha256(data).hexdigest()))
            except OSError as e:
                lines.append("%s f %s" % (os.path.join(rel, n),
                                          errno.errorcode.get(e.errno, str(e.errno))))
    print("\n".join(sorted(lines)))


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "setup":
        setup(a[0])
    elif cmd == "node":
        node(a[0], a[1], int(a[2]))
    elif cmd == "survivor":
        survivor(a[0], a[1], int(a[2]))
    elif cmd == "tree":
        tree(a[0])
    else:
        sys.exit("pause_work.py: unknown command %s" % cmd)


if __name__ == "__main__":
    main()
