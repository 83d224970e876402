#!/usr/bin/env python3
"""cluster_random.py - randomized multi-node coherence test of shoal
(driven by t_cluster_random.sh).

  cluster_random.py run   --log DIR --seed S --duration SEC --per-node N MNT...
  cluster_random.py final --log DIR MNT...
  cluster_random.py check --log DIR

run: N worker processes per mountpoint (one mountpoint = one node) run
random operations on a small shared tree for SEC seconds, each logging
every operation as one JSON line (DIR/wNN.jsonl): start and end time
(CLOCK_MONOTONIC, one clock for all processes of this host), operation,
arguments and result.  Exit 0; 3 if a worker hangs (an operation runs for
more than HANG_S seconds or the workers are not done DRAIN_S seconds after
the end): then the workers are left running, their pids in DIR/pids, for
the caller to inspect and kill.

final: (the workers are done) walk the whole tree on every node: the trees
must be identical (names, types, inode numbers, modes, link counts, sizes,
times, link targets, contents, xattrs) and link counts must match the names
found; every file read and every top directory listed is logged
(DIR/final-NODE.jsonl) as one more read, for check.

check: verify every logged result against what one filesystem allows, i.e.
that there is a serialization of the operations consistent with real time
(an operation that ended before another started comes first) explaining it.
The checks are sound (never a false alarm) for any interleaving:

The tree: top directories d0 d1 d2 (never removed), names n0..n7 in them
("depth 1"), names m0 m1 in those that are directories ("depth 2"); each
worker has a private directory tmp/wNN.  Files are sequences of 16-byte
slots, each a tag "KWW.SSSSSSSS___\\n" (kind C/A/O, worker, sequence
number, unique in the run) or 16 zero bytes (holes).  Slot 0 is the file's
identity, written before the file gets a name (created in tmp/, written,
then linked or renamed into the tree) and never changed.  Every operation
that changes a file opens it, reads its identity through the fd, changes
it and logs identity and offset: append (O_APPEND, one slot, offset where
its tag is found right after the write), overwrite (pwrite of one slot at slot
k >= 1), truncate (ftruncate to k slots, k >= 1; shrinks or grows).

Per file identity F, for a read R of F (content S):
  - slot 0 of S is F's creation tag, every other slot a tag or zeros; a
    partial or garbled slot only if a change of F overlapped R;
  - every tag in S was written to F at that offset by an operation that
    started before R ended;
  - [stale data] a tag written by M that ended before R started is in S,
    unless some other change that can destroy it (a write at its offset or
    a truncate at or below it) could come after M and before R (did not end
    before M started, started before R ended);
  - [resurrection] a tag in S was not destroyed by a change that started
    after M ended and ended before R started;
  - [size] if the last change before R was an append or truncate M (ended
    before R started, and no other change of F overlaps [M start, R end]),
    S has exactly the size M left;
  - [mode, xattr user.t] registers: the value R saw (fstat, fgetxattr)
    was set by a chmod/setxattr/removexattr that could be the last one
    before R (or is the initial value and none definitely came before R).
Per depth-1 name P (its parent is a top directory, never renamed): every
successful operation that names P changes its state (absent, regular,
directory, symlink; a set when unsure, e.g. rename(P, Q) of two links of
one inode leaves P); every operation that names P observes a state (lstat,
the errno of an open, ENOENT/EEXIST/ENOTEMPTY, presence in a listing of the
top directory).  An observation must be possible after some change that
could be the last one before it.
Errors: ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR, EINVAL, ELOOP, EPERM,
ENODATA where an operation allows them; anything else (EIO, ESTALE,
ENOTCONN...) is a failure.
"""
import argparse
import ctypes
import errno
import json
import multiprocessing as mp
import os
import random
import re
import stat
import sys
import time

L = 16
MAXSLOTS = 40          # files stay below one 4 KiB page
NDIRS, NNAMES, NSUB = 3, 8, 2
HANG_S = float(os.environ.get("CLUSTER_RANDOM_HANG_S", "30"))  # one operation longer: a hang
DRAIN_S = 45.0         # workers still running this long after the end: a hang
TAG_RE = re.compile(rb"([CAO])(\d\d)\.(\d{8})___\n")
XNAME = "user.t"
INITIAL_MODE = 0o644
MODES = [0o644, 0o600, 0o640, 0o755, 0o700, 0o444, 0o664]

REG, DIR, LNK, ABSENT = "R", "D", "L", "-"
EXISTS = frozenset([REG, DIR, LNK])

libc = ctypes.CDLL(None, use_errno=True)
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def ename(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def now():
    return time.monotonic_ns()


def renameat2(src, dst, flags):
    if libc.renameat2(-100, src.encode(), -100, dst.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def link_follow(src, dst):
    """linkat(AT_SYMLINK_FOLLOW): os.link() may call link(), which links a
    symlink itself; the model wants the new name to be a regular file."""
    if libc.linkat(-100, src.encode(), -100, dst.encode(), 0x400) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ---------------------------------------------------------------- workers

LEGAL = {
    "create": {"EEXIST", "ENOENT", "ENOTDIR", "ELOOP"},
    "replace": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR", "ENOTEMPTY", "EEXIST"},
    "append": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR"},
    "overwrite": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR"},
    "truncate": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR"},
    "read": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR"},
    "chmod": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR"},
    "setxattr": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR"},
    "removexattr": {"ENOENT", "ENOTDIR", "ELOOP", "EISDIR", "ENODATA"},
    "rename": {"ENOENT", "EEXIST", "ENOTEMPTY", "EISDIR", "ENOTDIR", "EINVAL", "ELOOP"},
    "unlink": {"ENOENT", "EISDIR", "ENOTDIR", "ELOOP"},
    "mkdir": {"EEXIST", "ENOENT", "ENOTDIR", "ELOOP"},
    "rmdir": {"ENOENT", "ENOTEMPTY", "EEXIST", "ENOTDIR", "ELOOP"},
    "link": {"ENOENT", "EEXIST", "EPERM", "ENOTDIR", "ELOOP"},
    "symlink": {"EEXIST", "ENOENT", "ENOTDIR", "ELOOP"},
    "stat": {"ENOENT", "ENOTDIR", "ELOOP"},
    "listdir": {"ENOENT", "ENOTDIR", "ELOOP"},
}

WEIGHTS = [
    ("read", 22), ("append", 14), ("overwrite", 7), ("truncate", 4),
    ("create", 8), ("replace", 4), ("rename", 8), ("unlink", 6),
    ("mkdir", 3), ("rmdir", 3), ("link", 4), ("symlink", 3),
    ("chmod", 3), ("setxattr", 4), ("removexattr", 1), ("stat", 6),
    ("listdir", 5),
]


class Worker:
    def __init__(self, wid, node, mnt, seed, logdir, cur):
        self.wid, self.node, self.mnt = wid, node, mnt
        self.rnd = random.Random(seed * 1000 + wid)
        self.seq = 0
        self.tmp = "tmp/w%02d" % wid
        self.log = open(os.path.join(logdir, "w%02d.jsonl" % wid), "w", buffering=1)
        self.cur = cur
        self.ops = [o for o, w in WEIGHTS for _ in range(w)]

    def tag(self, kind):
        self.seq += 1
        return "%s%02d.%08d___\n" % (kind, self.wid, self.seq)

    def p(self, rel):
        return os.path.join(self.mnt, rel)

    def path(self):
        d, n = self.rnd.randrange(NDIRS), self.rnd.randrange(NNAMES)
        if self.rnd.random() < 0.75:
            return "d%d/n%d" % (d, n)
        return "d%d/n%d/m%d" % (d, n, self.rnd.randrange(NSUB))

    def emit(self, rec):
        rec["w"] = self.wid
        rec["node"] = self.node
        self.log.write(json.dumps(rec, sort_keys=True) + "\n")

    def ident(self, fd):
        b = os.pread(fd, L, 0)
        return b.decode("latin-1")

    # each op returns a record (without w/node); t0/t1 around the syscalls
    def op_create(self, replace):
        kind = "replace" if replace else "create"
        tag = self.tag("C")
        tmp = self.p("%s/c%08d" % (self.tmp, self.seq))
        P = self.path()
        rec = {"op": kind, "p": P, "tag": tag}
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, INITIAL_MODE)
            os.write(fd, tag.encode())
            os.close(fd)
        except OSError as e:  # the worker's own directory: any error is a failure
            rec["t0"] = rec["t1"] = now()
            rec["res"] = ename(e)
            rec["tmp_err"] = "creating %s: %s" % (tmp, ename(e))
            return rec
        rec["t0"] = now()
        try:
            if replace:
                os.rename(tmp, self.p(P))
            else:
                os.link(tmp, self.p(P), follow_symlinks=False)
            rec["res"] = "OK"
        except OSError as e:
            rec["res"] = ename(e)
        rec["t1"] = now()
        if not (replace and rec["res"] == "OK"):
            try:
                os.unlink(tmp)
            except OSError as e:
                rec["tmp_err"] = "unlinking %s: %s" % (tmp, ename(e))
        return rec

    def landed(self, fd, tag, pos):
        """Where an O_APPEND write put tag: the end of file under the
        inode's lock, which the fd position (the kernel's idea of the size
        plus the bytes written) need not match in a cluster (README known
        limits).  Found by its unique tag; None if another change already
        removed it (truncate, overwrite)."""
        data = os.pread(fd, MAXSLOTS * L + L, 0)
        if data[pos:pos + L] == tag.encode():
            return pos
        k = 0
        while True:
            k = data.find(tag.encode(), k)
            if k < 0 or k % L == 0:
                return k if k >= 0 else None
            k += 1

    def op_fd(self, kind):
        P = self.path()
        rec = {"op": kind, "p": P}
        flags = {"append": os.O_RDWR | os.O_APPEND, "overwrite": os.O_RDWR,
                 "truncate": os.O_RDWR}.get(kind, os.O_RDONLY)
        rec["t0"] = now()
        fd = None
        try:
            fd = os.open(self.p(P), flags)
            rec["ident"] = self.ident(fd)  # EISDIR for a directory
            if kind in ("append", "overwrite", "truncate"):
                size = os.fstat(fd).st_size
                nslots = size // L
                if kind == "append" and nslots >= MAXSLOTS:
                    kind = rec["op"] = "truncate"
                if kind == "append":
                    tag = self.tag("A")
                    rec["tag"] = tag
                    n = os.write(fd, tag.encode())
                    rec["n"] = n
                    rec["off"] = self.landed(fd, tag, os.lseek(fd, 0, os.SEEK_CUR) - n)
                elif kind == "overwrite":
                    tag = self.tag("O")
                    k = self.rnd.randint(1, max(1, min(nslots, MAXSLOTS - 1)))
                    rec["tag"], rec["off"] = tag, k * L
                    rec["n"] = os.pwrite(fd, tag.encode(), k * L)
                else:
                    k = self.rnd.randint(1, min(nslots + 2, MAXSLOTS))
                    rec["len"] = k * L
                    os.ftruncate(fd, k * L)
            elif kind == "read":
                data = b""
                while True:
                    b = os.read(fd, 65536)
                    if not b:
                        break
                    data += b
                rec["data"] = data.hex()
                rec["mode"] = stat.S_IMODE(os.fstat(fd).st_mode)
                try:
                    rec["xattr"] = os.getxattr(fd, XNAME).decode("latin-1")
                except OSError as e:
                    if e.errno != errno.ENODATA:
                        raise
                    rec["xattr"] = None
            elif kind == "chmod":
                rec["mode"] = self.rnd.choice(MODES)
                os.fchmod(fd, rec["mode"])
            elif kind == "setxattr":
                rec["tag"] = self.tag("X")
                os.setxattr(fd, XNAME, rec["tag"].encode())
            elif kind == "removexattr":
                os.removexattr(fd, XNAME)
            rec["res"] = "OK"
        except OSError as e:
            rec["res"] = ename(e)
        finally:
            if fd is not None:
                os.close(fd)
        rec["t1"] = now()
        return rec

    def op_path(self, kind):
        rnd = self.rnd
        P = self.path()
        rec = {"op": kind, "p": P}
        if kind == "rename":
            Q = self.path()
            fl = rnd.choice([0] * 15 + [RENAME_EXCHANGE] * 4 + [RENAME_NOREPLACE])
            rec.update(q=Q, flags=fl)
        elif kind == "link":
            rec["src"] = self.path()
        elif kind == "symlink":
            if rnd.random() < 0.1:
                tgt = os.path.basename(P)  # a loop: ELOOP through it
            else:
                tgt = os.path.relpath(self.path(), os.path.dirname(P))
                if tgt == ".":  # its own parent: moved up, it would name a top directory
                    tgt = os.path.basename(P)
            rec["tgt"] = tgt
        elif kind == "listdir":
            P = rec["p"] = ("d%d" % rnd.randrange(NDIRS)) if rnd.random() < 0.7 else P.rsplit("/", 1)[0] if P.count("/") == 2 else P
        rec["t0"] = now()
        try:
            if kind == "rename":
                if rec["flags"]:
                    renameat2(self.p(P), self.p(rec["q"]), rec["flags"])
                else:
                    os.rename(self.p(P), self.p(rec["q"]))
            elif kind == "unlink":
                os.unlink(self.p(P))
            elif kind == "mkdir":
                os.mkdir(self.p(P))
            elif kind == "rmdir":
                os.rmdir(self.p(P))
            elif kind == "link":
                link_follow(self.p(rec["src"]), self.p(P))
            elif kind == "symlink":
                os.symlink(rec["tgt"], self.p(P))
            elif kind == "stat":
                m = os.lstat(self.p(P)).st_mode
                rec["type"] = REG if stat.S_ISREG(m) else DIR if stat.S_ISDIR(m) else LNK if stat.S_ISLNK(m) else "?"
            elif kind == "listdir":
                rec["names"] = sorted(os.listdir(self.p(P)))
            rec["res"] = "OK"
        except OSError as e:
            rec["res"] = ename(e)
        rec["t1"] = now()
        return rec

    def run(self, deadline):
        while time.monotonic() < deadline:
            kind = self.rnd.choice(self.ops)
            self.cur[0] = time.monotonic()
            self.cur[1] = self.seq + 1
            self.cur[2] = self.ops.index(kind)
            if kind in ("create", "replace"):
                rec = self.op_create(kind == "replace")
            elif kind in ("append", "overwrite", "truncate", "read", "chmod", "setxattr", "removexattr"):
                rec = self.op_fd(kind)
            else:
                rec = self.op_path(kind)
            self.cur[0] = 0.0
            self.emit(rec)
            if self.rnd.random() < 0.3:
                time.sleep(self.rnd.random() * 0.003)
        self.log.close()


def worker_main(wid, node, mnt, seed, logdir, cur, deadline):
    os.umask(0)
    try:
        Worker(wid, node, mnt, seed, logdir, cur).run(deadline)
    except BaseException as e:  # not an operation's result: a bug of this program
        with open(os.path.join(logdir, "w%02d.crash" % wid), "w") as f:
            f.write("%s: %r\n" % (type(e).__name__, e))
        sys.stderr.write("worker %d crashed: %s: %r\n" % (wid, type(e).__name__, e))
        sys.stderr.flush()
        os._exit(1)


def cmd_run(a):
    mnts = a.mnts
    os.umask(0)
    os.makedirs(a.log, exist_ok=True)
    nodes = [os.path.basename(m.rstrip("/")) for m in mnts]
    for d in range(NDIRS):
        os.mkdir(os.path.join(mnts[0], "d%d" % d))
    os.mkdir(os.path.join(mnts[0], "tmp"))
    nw = a.per_node * len(mnts)
    for w in range(nw):
        os.mkdir(os.path.join(mnts[0], "tmp", "w%02d" % w))
    print("# seed %d, %d nodes x %d workers, %d s" % (a.seed, len(mnts), a.per_node, a.duration), flush=True)
    t_start = now()
    deadline = time.monotonic() + a.duration
    procs, curs = [], []
    for w in range(nw):
        cur = mp.Array("d", 3, lock=False)
        i = w % len(mnts)
        p = mp.Process(target=worker_main, args=(w, nodes[i], mnts[i], a.seed, a.log, cur, deadline))
        p.start()
        procs.append(p)
        curs.append(cur)
    with open(os.path.join(a.log, "pids"), "w") as f:
        f.write(" ".join(str(p.pid) for p in procs) + "\n")
    with open(os.path.join(a.log, "meta.json"), "w") as f:
        json.dump({"seed": a.seed, "nodes": nodes, "workers": nw, "t_start": t_start}, f)
    ops = [o for o, w in WEIGHTS for _ in range(w)]
    hung = []
    while any(p.is_alive() for p in procs):
        t = time.monotonic()
        for w, (p, cur) in enumerate(zip(procs, curs)):
            if p.is_alive() and cur[0] and t - cur[0] > HANG_S:
                hung.append("worker %d (node %s, pid %d): op %s (seq %d) running for %.0f s" %
                            (w, nodes[w % len(mnts)], p.pid, ops[int(cur[2])], int(cur[1]), t - cur[0]))
        if not hung and t > deadline + DRAIN_S:
            hung = ["worker %d (node %s, pid %d) still running %.0f s after the end" %
                    (w, nodes[w % len(mnts)], p.pid, t - deadline)
                    for w, p in enumerate(procs) if p.is_alive()]
        if hung:
            for h in hung:
                print("HANG: " + h, flush=True)
            os._exit(3)
        time.sleep(0.5)
    bad = [w for w, p in enumerate(procs) if p.exitcode != 0]
    for w in bad:
        crash = os.path.join(a.log, "w%02d.crash" % w)
        why = open(crash).read().strip() if os.path.exists(crash) else ""
        print("worker %d exited with %s %s" % (w, procs[w].exitcode, why), flush=True)
    return 1 if bad else 0


# ---------------------------------------------------------------- final

def walk(mnt):
    """{relpath: attributes} of everything under mnt (lstat, no follow)."""
    out = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        full = os.path.join(mnt, rel) if rel else mnt
        for name in sorted(os.listdir(full)):
            r = os.path.join(rel, name) if rel else name
            p = os.path.join(mnt, r)
            st = os.lstat(p)
            e = {"ino": st.st_ino, "mode": "%o" % st.st_mode, "nlink": st.st_nlink,
                 "size": st.st_size, "uid": st.st_uid, "gid": st.st_gid,
                 "mtime": st.st_mtime_ns, "ctime": st.st_ctime_ns}
            if stat.S_ISLNK(st.st_mode):
                e["target"] = os.readlink(p)
            else:
                try:
                    e["xattr"] = os.getxattr(p, XNAME, follow_symlinks=False).decode("latin-1")
                except OSError as ex:
                    if ex.errno != errno.ENODATA:
                        raise
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    e["data"] = f.read().hex()
            if stat.S_ISDIR(st.st_mode):
                stack.append(r)
            out[r] = e
    return out


def cmd_final(a):
    nodes = [os.path.basename(m.rstrip("/")) for m in a.mnts]
    trees, problems = {}, []
    for node, mnt in zip(nodes, a.mnts):
        with open(os.path.join(a.log, "final-%s.jsonl" % node), "w") as log:
            t0 = now()
            try:
                tree = walk(mnt)
                tops = [sorted(os.listdir(os.path.join(mnt, "d%d" % d))) for d in range(NDIRS)]
            except OSError as e:
                problems.append("node %s: walking the tree failed: %s" % (node, e))
                continue
            # what each top directory holds, and every file, as reads
            for d in range(NDIRS):
                rec = {"op": "listdir", "p": "d%d" % d, "t0": t0, "w": -1, "node": node, "res": "OK",
                       "names": tops[d]}
                rec["t1"] = now()
                log.write(json.dumps(rec) + "\n")
            for rel, e in tree.items():
                if "data" in e and not rel.startswith("tmp"):
                    rec = {"op": "read", "p": rel, "t0": t0, "w": -1, "node": node, "res": "OK",
                           "data": e["data"], "mode": int(e["mode"], 8) & 0o7777,
                           "xattr": e.get("xattr")}
                    d = bytes.fromhex(e["data"])
                    rec["ident"] = d[:L].decode("latin-1")
                    rec["t1"] = now()
                    log.write(json.dumps(rec) + "\n")
            trees[node] = tree
        names = {}
        for rel, e in tree.items():
            names.setdefault(e["ino"], []).append(rel)
        for rel, e in tree.items():
            m = int(e["mode"], 8)
            if stat.S_ISREG(m) and e["nlink"] != len(names[e["ino"]]):
                problems.append("node %s: %s has nlink %d but %d names: %s" %
                                (node, rel, e["nlink"], len(names[e["ino"]]), names[e["ino"]]))
            if stat.S_ISDIR(m):
                sub = sum(1 for r2, e2 in tree.items() if os.path.dirname(r2) == rel and
                          stat.S_ISDIR(int(e2["mode"], 8)))
                if e["nlink"] != 2 + sub:
                    problems.append("node %s: directory %s has nlink %d, want %d" % (node, rel, e["nlink"], 2 + sub))
        tmp_left = [r for r in tree if r.startswith("tmp/") and r.count("/") > 1]
        if tmp_left:
            problems.append("node %s: tmp files left: %s" % (node, tmp_left[:5]))
    have = [n for n in nodes if n in trees]
    if not have:
        for p in problems:
            print("FINAL: " + p)
        return 1
    ref = have[0]
    for node in have[1:]:
        a_t, b_t = trees[ref], trees[node]
        for rel in sorted(set(a_t) | set(b_t)):
            if rel not in b_t:
                problems.append("%s only on %s" % (rel, ref))
            elif rel not in a_t:
                problems.append("%s only on %s" % (rel, node))
            elif a_t[rel] != b_t[rel]:
                diff = {k: (a_t[rel].get(k), b_t[rel].get(k)) for k in set(a_t[rel]) | set(b_t[rel])
                        if a_t[rel].get(k) != b_t[rel].get(k)}
                problems.append("%s differs between %s and %s: %s" % (rel, ref, node, str(diff)[:300]))
    nfiles = sum(1 for e in trees[ref].values() if "data" in e)
    print("# final tree: %d entries, %d files, on %s" % (len(trees[ref]), nfiles, " ".join(have)))
    with open(os.path.join(a.log, "final-tree.json"), "w") as f:
        json.dump(trees[ref], f, indent=0, sort_keys=True)
    for p in problems[:30]:
        print("FINAL: " + p)
    if len(problems) > 30:
        print("FINAL: ... %d more" % (len(problems) - 30))
    return 1 if problems else 0


# ---------------------------------------------------------------- check

def parse(data):
    """slots of a file's content: tag string, 'ZERO', or None (garbled)."""
    slots = []
    for i in range(0, len(data) - len(data) % L, L):
        s = data[i:i + L]
        if TAG_RE.fullmatch(s):
            slots.append(s.decode("latin-1"))
        elif s == bytes(L):
            slots.append("ZERO")
        else:
            slots.append(None)
    return slots


def possible_last(events, t0, t1, initial):
    """Union of the states of the events that could be the last one before
    an observation during [t0, t1]; events: (t0, t1, states)."""
    T = None
    for e in events:
        if e[1] < t0 and (T is None or e[0] > T):
            T = e[0]
    out = set(initial) if T is None else set()
    for e in events:
        if e[0] < t1 and (T is None or e[1] >= T):
            out |= e[2]
    return out


class Checker:
    def __init__(self):
        self.errors = []
        self.stats = {}

    def err(self, msg, rec=None):
        if rec is not None:
            msg += "  [%s]" % describe(rec)
        self.errors.append(msg)

    def bump(self, k, n=1):
        self.stats[k] = self.stats.get(k, 0) + n


def describe(r):
    keys = ["w", "node", "op", "p", "q", "src", "tgt", "flags", "res", "ident", "tag", "off", "len", "mode", "type"]
    s = " ".join("%s=%s" % (k, str(r[k]).strip()) for k in keys if k in r and r[k] is not None)
    if "data" in r:
        d = bytes.fromhex(r["data"])
        s += " data=%s" % [x.strip() if x else x for x in parse(d)][:12]
        if len(d) // L > 12:
            s += "...(%d slots)" % (len(d) // L)
    return s + " t=[%.6f, %.6f]" % (r["t0"] / 1e9, r["t1"] / 1e9)


def state_of_obs(r, name_is):
    """The states of the depth-1 name an operation observed (None: nothing)."""
    op, res = r["op"], r["res"]
    if op == "stat":
        return {r["type"]} if res == "OK" else {ABSENT} if res == "ENOENT" else None
    if op in ("read", "append", "overwrite", "truncate", "chmod", "setxattr", "removexattr"):
        if res in ("OK", "ENODATA"):
            return {REG, LNK}
        return {"EISDIR": {DIR, LNK}, "ENOENT": {ABSENT, LNK}, "ELOOP": {LNK}, "ENOTDIR": {LNK}}.get(res)
    if op == "unlink":
        return {"OK": {REG, LNK}, "ENOENT": {ABSENT}, "EISDIR": {DIR}}.get(res)
    if op == "rmdir":
        return {"OK": {DIR}, "ENOENT": {ABSENT}, "ENOTDIR": {REG, LNK}, "ENOTEMPTY": {DIR},
                "EEXIST": {DIR}}.get(res)
    if op in ("mkdir", "symlink", "create"):
        return {"OK": {ABSENT}, "EEXIST": set(EXISTS)}.get(res)
    if op == "replace":
        return {"EISDIR": {DIR}, "ENOTEMPTY": {DIR}, "EEXIST": {DIR}}.get(res)
    if op == "link":
        if name_is == "p":
            return {"OK": {ABSENT}, "EEXIST": set(EXISTS)}.get(res)
        return {"OK": {REG, LNK}, "EPERM": {DIR, LNK}}.get(res) if name_is == "src" else None
    if op == "rename":
        if res == "OK":
            if name_is == "p":
                return set(EXISTS)
            return {ABSENT} if r["flags"] == RENAME_NOREPLACE else set(EXISTS) if r["flags"] == RENAME_EXCHANGE else None
        if res == "EEXIST" and r["flags"] == RENAME_NOREPLACE and name_is == "q":
            return set(EXISTS)
        return None
    return None


def events_of(r):
    """[(name, states)] of the depth-1 names a successful operation changed."""
    if r["res"] != "OK":
        return []
    op = r["op"]
    if op in ("create", "replace"):
        return [(r["p"], {REG})]
    if op == "link":
        return [(r["p"], {REG})]
    if op == "mkdir":
        return [(r["p"], {DIR})]
    if op == "symlink":
        return [(r["p"], {LNK})]
    if op in ("unlink", "rmdir"):
        return [(r["p"], {ABSENT})]
    if op == "rename":
        if r["p"] == r["q"]:
            return []
        if r["flags"] == RENAME_EXCHANGE:
            return [(r["p"], set(EXISTS)), (r["q"], set(EXISTS))]
        src = {ABSENT} if r["flags"] == RENAME_NOREPLACE else {ABSENT, REG}
        return [(r["p"], src), (r["q"], set(EXISTS))]
    return []


def depth1(p):
    return p is not None and p.count("/") == 1 and p.startswith("d")


def cmd_check(a):
    ck = Checker()
    recs = []
    for fn in sorted(os.listdir(a.log)):
        if fn.endswith(".jsonl"):
            with open(os.path.join(a.log, fn)) as f:
                for line in f:
                    if line.strip():
                        try:
                            recs.append(json.loads(line))
                        except ValueError:
                            ck.err("%s: unreadable log line %r" % (fn, line[:100]))
    for i, r in enumerate(recs):
        r["id"] = i
    # 1. results: only errors a race allows
    for r in recs:
        ck.bump("ops")
        ck.bump("op %s %s" % (r["op"], r["res"]))
        if r.get("tmp_err"):
            ck.err("the worker's own tmp file: %s" % r["tmp_err"], r)
        if r["res"] != "OK" and r["res"] not in LEGAL[r["op"]]:
            ck.err("illegal result %s" % r["res"], r)
        if r["w"] >= 0 and r["t1"] - r["t0"] > 5e9:
            ck.bump("ops slower than 5 s")
    # 2. tags: who wrote what
    tagop = {}
    for r in recs:
        if "tag" in r and r["w"] >= 0:
            tagop[r["tag"]] = r
    created = {}  # identity -> the create/replace that linked it
    mods = {}     # identity -> successful changes of its content
    xsets = {}    # identity -> xattr register writes (t0, t1, {value})
    msets = {}    # identity -> mode register writes
    for r in recs:
        if r["w"] < 0:
            continue
        if r["op"] in ("create", "replace") and r["res"] == "OK":
            created[r["tag"]] = r
        if r["op"] in ("append", "overwrite", "truncate", "chmod", "setxattr", "removexattr", "read") \
                and "ident" in r and r["res"] in ("OK", "ENODATA"):
            if not TAG_RE.fullmatch(r["ident"].encode("latin-1")) or r["ident"][0] != "C":
                ck.err("identity read through the fd (slot 0) is not a creation tag: %r" % r["ident"], r)
                continue
        if r["res"] != "OK" or "ident" not in r:
            continue
        F = r["ident"]
        if r["op"] in ("append", "overwrite"):
            if r.get("n") != L:
                ck.err("short write %r" % r.get("n"), r)
            if r.get("off") is None:  # an append another change removed at once
                ck.bump("appends not found after they returned")
                continue
            mods.setdefault(F, []).append(r)
        elif r["op"] == "truncate":
            mods.setdefault(F, []).append(r)
        elif r["op"] == "setxattr":
            xsets.setdefault(F, []).append((r["t0"], r["t1"], {r["tag"]}))
        elif r["op"] == "removexattr":
            xsets.setdefault(F, []).append((r["t0"], r["t1"], {None}))
        elif r["op"] == "chmod":
            msets.setdefault(F, []).append((r["t0"], r["t1"], {r["mode"]}))
    for F in mods:
        if F not in created:
            ck.err("file %s changed, but it was never linked into the tree" % F.strip())

    def destroys(x, off):
        if x["op"] == "truncate":
            return x["len"] <= off
        return x["off"] == off

    # per write M: earliest start of a change that could come after it and
    # destroy it; earliest end of a change that definitely came after it
    # and destroyed it
    for F, ms in mods.items():
        for m in ms:
            m["_minD0"] = None
            m["_minDefEnd"] = None
            if m["op"] == "truncate":
                continue
            for x in ms:
                if x is m or not destroys(x, m["off"]):
                    continue
                if x["t1"] > m["t0"] and (m["_minD0"] is None or x["t0"] < m["_minD0"]):
                    m["_minD0"] = x["t0"]
                if x["t0"] > m["t1"] and (m["_minDefEnd"] is None or x["t1"] < m["_minDefEnd"]):
                    m["_minDefEnd"] = x["t1"]
    # 3. reads
    for r in recs:
        if r["op"] != "read" or r["res"] != "OK":
            continue
        data = bytes.fromhex(r["data"])
        ck.bump("reads checked")
        if not data:
            ck.err("read an empty file (every file in the tree has its identity slot)", r)
            continue
        slots = parse(data)
        F = slots[0] if slots else None
        if F is None or F == "ZERO" or F[0] != "C":
            ck.err("slot 0 is not a creation tag", r)
            continue
        c = created.get(F)
        if c is None:
            ck.err("read a file whose creation %s never linked it into the tree" % F.strip(), r)
            continue
        if c["t0"] >= r["t1"]:
            ck.err("read a file linked only after the read ended", r)
        ms = mods.get(F, [])
        concurrent = any(x["t0"] < r["t1"] and x["t1"] > r["t0"] for x in ms)
        if len(data) % L and not concurrent:
            ck.err("size %d is not a whole number of slots, no change of the file overlapped" % len(data), r)
        for k, s in enumerate(slots[1:], 1):
            if s == "ZERO":
                continue
            if s is None:
                if not concurrent:
                    ck.err("garbled slot %d, no change of the file overlapped" % k, r)
                continue
            m = tagop.get(s)
            if m is None or m["op"] not in ("append", "overwrite"):
                ck.err("slot %d holds %s, which no append/overwrite wrote" % (k, s.strip()), r)
                continue
            if m["t0"] >= r["t1"]:
                ck.err("slot %d holds %s, written by an operation that started after the read ended" % (k, s.strip()), r)
            if m["op"] == "append" and m.get("off") is None and m.get("ident") == F:
                continue  # removed right after it landed, then seen: no claim
            if m.get("ident") != F or m.get("off") != k * L:
                ck.err("slot %d holds %s, which was written to %s at offset %s" %
                       (k, s.strip(), str(m.get("ident")).strip(), m.get("off")), r)
                continue
            if m["res"] == "OK" and m["_minDefEnd"] is not None and m["_minDefEnd"] < r["t0"]:
                ck.err("stale read: slot %d still holds %s, which a later change destroyed before the read started" %
                       (k, s.strip()), r)
            ck.bump("tags seen")
        for m in ms:
            if m["op"] == "truncate" or m["t1"] >= r["t0"]:
                continue
            if m["_minD0"] is not None and m["_minD0"] < r["t1"]:
                continue
            k = m["off"] // L
            ck.bump("tags that must be there")
            if k >= len(slots) or slots[k] != m["tag"]:
                ck.err("stale read: misses %s (written at slot %d by w%d on node %s, ended %.6f s before the read started); slot has %s" %
                       (m["tag"].strip(), k, m["w"], m["node"], (r["t0"] - m["t1"]) / 1e9,
                        (slots[k] or "garbled").strip() if k < len(slots) else "nothing (size %d)" % len(data)), r)
        # size after the last change
        for m in ms:
            if m["op"] not in ("append", "truncate") or m["t1"] >= r["t0"]:
                continue
            if any(x is not m and x["t0"] < r["t1"] and x["t1"] > m["t0"] for x in ms):
                continue
            want = m["len"] if m["op"] == "truncate" else m["off"] + L
            ck.bump("sizes checked")
            if len(data) != want:
                ck.err("stale read: size %d, but the last change (%s by w%d on node %s) left %d" %
                       (len(data), m["op"], m["w"], m["node"], want), r)
        # registers
        if "mode" in r:
            ok = possible_last(msets.get(F, []), r["t0"], r["t1"], {INITIAL_MODE})
            ck.bump("modes checked")
            if r["mode"] not in ok:
                ck.err("stale mode %o: possible %s" % (r["mode"], sorted("%o" % m for m in ok)), r)
        if "xattr" in r:
            ok = possible_last(xsets.get(F, []), r["t0"], r["t1"], {None})
            ck.bump("xattrs checked")
            if r["xattr"] not in ok:
                ck.err("stale xattr %r: possible %s" % (r["xattr"], sorted(str(x).strip() for x in ok)), r)
    # 4. names of depth 1
    events = {}
    for r in recs:
        if r["w"] < 0:
            continue
        for name, st in events_of(r):
            if depth1(name):
                events.setdefault(name, []).append((r["t0"], r["t1"], st, r["id"]))
    for r in recs:
        obs = []
        if r["op"] == "listdir" and r["res"] == "OK" and r["p"] in ("d0", "d1", "d2"):
            for n in range(NNAMES):
                name = "%s/n%d" % (r["p"], n)
                obs.append((name, set(EXISTS) if "n%d" % n in r["names"] else {ABSENT}))
            extra = [x for x in r["names"] if not re.fullmatch(r"n\d", x)]
            if extra:
                ck.err("listing holds names nobody made: %s" % extra, r)
        else:
            for key in ("p", "q", "src"):
                if depth1(r.get(key)):
                    s = state_of_obs(r, key)
                    if s is not None:
                        obs.append((r[key], s))
        for name, s in obs:
            evs = [e for e in events.get(name, []) if e[3] != r["id"]]
            ok = possible_last(evs, r["t0"], r["t1"], {ABSENT})
            ck.bump("name observations checked")
            if not (s & ok):
                last = [describe(recs[e[3]]) for e in sorted(evs) if e[1] < r["t0"]][-3:]
                last += ["overlapping: " + describe(recs[e[3]]) for e in sorted(evs)
                         if e[1] >= r["t0"] and e[0] < r["t1"]][:3]
                ck.err("stale name %s: observed %s, possible %s; last changes before: %s" %
                       (name, "".join(sorted(s)), "".join(sorted(ok)), " / ".join(last) or "none"), r)
    # report
    print("# checked %d operations (%d by the final walk) of %d workers" %
          (ck.stats.get("ops", 0), sum(1 for r in recs if r["w"] < 0), len({r["w"] for r in recs if r["w"] >= 0})))
    for k in ["reads checked", "tags seen", "tags that must be there", "sizes checked", "modes checked",
              "xattrs checked", "name observations checked", "ops slower than 5 s"]:
        print("#   %s: %d" % (k, ck.stats.get(k, 0)))
    byop = {}
    for k, v in ck.stats.items():
        if k.startswith("op "):
            _, op, res = k.split(" ")
            byop.setdefault(op, []).append("%s %d" % (res, v))
    for op in sorted(byop):
        print("#   %-11s %s" % (op, ", ".join(sorted(byop[op]))))
    with open(os.path.join(a.log, "stats.json"), "w") as f:
        json.dump(ck.stats, f)
    for e in ck.errors[:40]:
        print("ERROR: " + e)
    if len(ck.errors) > 40:
        print("ERROR: ... %d more" % (len(ck.errors) - 40))
    return 1 if ck.errors else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--log", required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--duration", type=float, default=40)
    r.add_argument("--per-node", type=int, default=3)
    r.add_argument("mnts", nargs="+")
    f = sub.add_parser("final")
    f.add_argument("--log", required=True)
    f.add_argument("mnts", nargs="+")
    c = sub.add_parser("check")
    c.add_argument("--log", required=True)
    a = ap.parse_args()
    if a.cmd == "run":
        return cmd_run(a)
    if a.cmd == "final":
        return cmd_final(a)
    return cmd_check(a)


if __name__ == "__main__":
    sys.exit(main())
