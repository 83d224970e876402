#!/usr/bin/env python3
"""diff_model.py - randomized lockstep differential test of two nodes
against a model (driven by t_cluster_diff.sh; issue 20).

  diff_model.py [--seed S] [--steps N] [--seconds SEC] [--ops LIST]
                [--skip LIST] [--stat-first] [--dir NAME] [--log FILE]
                MNT_A MNT_B

MNT_A and MNT_B are two mountpoints of one filesystem (two nodes of a
cluster; or the same mountpoint twice, a sanity check of the model on one
node, or on ext4).  Options default to the environment: DIFF_SEED (random,
printed), DIFF_STEPS (2000, or 0 if DIFF_SECONDS is given; 0: no limit),
DIFF_SECONDS (0: no limit; the run stops at whichever limit comes
first), DIFF_OPS (all, or a comma list of op kinds), DIFF_SKIP (a comma
list of kinds taken out of DIFF_OPS), DIFF_STAT_FIRST (--stat-first: fstat an old fd or mapping's fd before
using it, which makes the kernel ask for the size and hides issue 20
defect 2, to look at the rest of what the kinds it breaks do).

One operation at a time, on one node chosen at random, then a check of
both nodes' views against the model.  A step is one to three operations
(on either node) followed by the check: an operation right after another
node's change, with no look in between, is what an fd opened long ago
must still get right (an O_APPEND write after the other node grew the
file).  Each node keeps a pool of open fds (O_RDWR, some O_APPEND) and,
with the kind `map`, of shared mappings (MAP_SHARED, MAPLEN bytes, more
than the file: a page past the end of file faults; made with libc's mmap
through ctypes, as Python's mmap module refuses a length past the end of
file).  The fds and mappings stay open across steps and across the other
node's changes; a file unlinked while open stays in the model until its
last fd or mapping goes.

The model: a tree of directories and regular files under MNT/NAME; a file
is its bytes and its user xattrs; link counts follow the names.  Every
operation is expected to succeed and to have the effect it has on one
machine (ext4): a store through a shared mapping is visible at once to
every reader on either node (on one machine the page cache is shared; in
a cluster the reader's lock makes the writer's node write its dirty pages
first: issue 20 defect 1).

The check after each step, both nodes, old views first (a fresh open or
stat would refresh what the kernel knows and hide a stale size):
  - every mapping: the bytes [0, size) read through it equal the model
    (read by a write() from the mapping into a memfd, so that a fault
    past a stale end of file is an EFAULT or a short count, not SIGBUS);
  - with the kind `sendfile`: sendfile and copy_file_range from an old fd
    return the model's bytes;
  - pread of the whole file and its xattrs (flistxattr, fgetxattr) through
    one pooled fd (at random) of each inode a node has open (all its fds
    share the inode's size and pages), then fstat (size, inode number,
    link count) of every pooled fd;
  - every name of every file: stat (type, size, inode number, link
    count), the contents through a fresh open, the xattrs by path;
  - every directory: its listing and link count.
The first difference (or an operation that fails) prints the seed, the
step, the last HISTORY operations and the differences, and exits 1.
A store through a mapping is a read() from a memfd into the mapping, so a
fault there is an error too.  Exit 0: all steps agreed; 2: bad usage.

Op kinds (DIFF_OPS / --ops):
  write          open (O_CREAT, sometimes O_TRUNC), lseek, write, close
  pwrite         pwrite through a pooled O_RDWR fd
  append         write through a pooled O_APPEND fd (the fd's offset must
                 be the new end of file), or a fresh open with O_APPEND
  map            keep shared mappings in the pools (map, unmap) and read
                 through them in every check
  mmap           store through a pooled mapping (needs map)
  mmap_msync     store through a pooled mapping, then msync(MS_SYNC)
  sendfile       (a check) sendfile and copy_file_range from pooled fds
  truncate_up    truncate (path) or ftruncate (pooled fd) to a larger size
  truncate_down  ... to a smaller size
  falloc         fallocate mode 0 and FALLOC_FL_KEEP_SIZE
  punch          FALLOC_FL_PUNCH_HOLE | KEEP_SIZE
  zero_range     FALLOC_FL_ZERO_RANGE, with and without KEEP_SIZE
  collapse_range FALLOC_FL_COLLAPSE_RANGE (block-aligned)
  insert_range   FALLOC_FL_INSERT_RANGE (block-aligned)
  rename         rename a file or directory, onto nothing or a file
  unlink         unlink a name (often of a file open in a pool)
  link           a hard link
  xattr          setxattr / removexattr of user.* by path or fd
  dirs           mkdir, rmdir
Opening and closing pooled fds is always on.
"""
import argparse
import collections
import ctypes
import errno
import mmap
import os
import random
import stat
import sys
import time

PAGE = mmap.PAGESIZE
BS = 4096                 # block size of collapse/insert (shoal's and ext4's)
MAXSIZE = 12 * BS         # no file grows past this
MAPLEN = 16 * BS          # mappings cover more than any file: past EOF faults
MAXFILES = 8              # names of regular files
MAXDIRS = 4               # directories below the top one
MAXDEPTH = 2
POOL_FDS = 4              # per node
POOL_MAPS = 2             # per node
XATTRS = ("user.x0", "user.x1", "user.x2")
HISTORY = 20

ALL_KINDS = ("write", "pwrite", "append", "map", "mmap", "mmap_msync", "sendfile",
             "truncate_up", "truncate_down", "falloc", "punch", "zero_range",
             "collapse_range", "insert_range", "rename", "unlink", "link", "xattr",
             "dirs")
WEIGHTS = {"write": 6, "pwrite": 8, "append": 8, "map": 3, "mmap": 7, "mmap_msync": 4,
           "truncate_up": 4, "truncate_down": 3, "falloc": 2, "punch": 2,
           "zero_range": 2, "collapse_range": 2, "insert_range": 2, "rename": 4,
           "unlink": 2, "link": 3, "xattr": 4, "dirs": 2, "open": 4, "close": 2}

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_FL_INSERT_RANGE = 0x20

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
MAP_FAILED = ctypes.c_void_p(-1).value
MS_SYNC = 4


def oserr(what):
    e = ctypes.get_errno()
    return OSError(e, "%s: %s" % (what, os.strerror(e)))


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        raise oserr("fallocate")


class Mismatch(Exception):
    """The filesystem disagrees with the model (args: lines of differences)."""


# --- the model -----------------------------------------------------------

class Ino:
    n = 0

    def __init__(self):
        Ino.n += 1
        self.id = Ino.n
        self.data = bytearray()
        self.xattrs = {}
        self.st_ino = None   # learned when created

    def __repr__(self):
        return "i%d" % self.id


class Dir:
    def __init__(self):
        self.entries = {}    # name -> Ino or Dir
        self.st_ino = None


class Fd:
    def __init__(self, fd, ino, append, path):
        self.fd, self.ino, self.append, self.path = fd, ino, append, path

    def __repr__(self):
        return "fd%d(%s%s)" % (self.fd, self.ino, ",append" if self.append else "")


class Map:
    n = 0

    def __init__(self, addr, fd, ino, path):
        Map.n += 1
        self.id = Map.n
        self.addr, self.fd, self.ino, self.path = addr, fd, ino, path

    def __repr__(self):
        return "map%d(%s)" % (self.id, self.ino)

    def buf(self, off, n):
        return (ctypes.c_char * n).from_address(self.addr + off)


class Model:
    def __init__(self):
        self.root = Dir()

    def walk(self):
        """(path, Dir) of every directory, then (path, Ino) of every name."""
        dirs, files = [], []
        todo = [("", self.root)]
        while todo:
            path, d = todo.pop()
            dirs.append((path, d))
            for name in sorted(d.entries):
                e = d.entries[name]
                p = path + "/" + name if path else name
                if isinstance(e, Dir):
                    todo.append((p, e))
                else:
                    files.append((p, e))
        return sorted(dirs, key=lambda x: x[0]), files

    def lookup(self, path):
        """(parent Dir, name, entry or None)."""
        parts = path.split("/")
        d = self.root
        for p in parts[:-1]:
            d = d.entries[p]
        return d, parts[-1], d.entries.get(parts[-1])

    @staticmethod
    def depth(path):
        return 0 if path == "" else path.count("/") + 1


# --- the driver ------------------------------------------------------------

class Node:
    def __init__(self, name, mnt, top):
        self.name, self.mnt = name, mnt
        self.top = os.path.join(mnt, top)
        self.fds = []
        self.maps = []
        self.scratch = None   # an fd of a file beside the tree (copy_file_range)

    def p(self, rel):
        return os.path.join(self.top, rel) if rel else self.top


class Driver:
    def __init__(self, args, kinds):
        self.args = args
        self.kinds = kinds
        self.rng = random.Random(args.seed)
        self.model = Model()
        self.nodes = [Node("a", args.mnt_a, args.dir), Node("b", args.mnt_b, args.dir)]
        self.hist = collections.deque(maxlen=HISTORY)
        # every operation, before it is made (what a hung run was doing)
        self.oplog = open(args.log, "w", buffering=1) if args.log else None
        self.step = 0
        self.nops = 0
        self.counts = collections.Counter()
        self.memfd = os.memfd_create("diff_model")
        self.srcfd = os.memfd_create("diff_model_src")
        self.ops = [k for k in WEIGHTS if k in kinds or k in ("open", "close")]
        self.weights = [WEIGHTS[k] for k in self.ops]

    # -- helpers --

    def log(self, node, text):
        self.nops += 1
        line = "step %d op %d: %s: %s" % (self.step, self.nops, node.name, text)
        self.hist.append(line)
        if self.oplog:
            self.oplog.write(line + "\n")

    def inos(self):
        """Every live inode: named, or held by an fd or mapping."""
        seen = {}
        for _, ino in self.model.walk()[1]:
            seen[ino.id] = ino
        for n in self.nodes:
            for f in n.fds:
                seen[f.ino.id] = f.ino
            for m in n.maps:
                seen[m.ino.id] = m.ino
        return [seen[k] for k in sorted(seen)]

    def files(self):
        return self.model.walk()[1]

    def pick_file(self):
        fs = self.files()
        return self.rng.choice(fs) if fs else (None, None)

    def rand_range(self, size, maxlen=3000, grow=True):
        """An (offset, length) for a write: inside, at or past the end."""
        n = self.rng.randint(1, maxlen)
        hi = min(size + (2 * BS if grow else 0), MAXSIZE - 1)
        off = self.rng.randint(0, max(hi, 0))
        n = min(n, MAXSIZE - off)
        return off, n

    def data(self, n):
        return self.rng.randbytes(n)

    def put(self, ino, off, data):
        d = ino.data
        if off > len(d):
            d.extend(bytes(off - len(d)))
        d[off:off + len(data)] = data

    def set_size(self, ino, size):
        d = ino.data
        if size < len(d):
            del d[size:]
        else:
            d.extend(bytes(size - len(d)))

    def stat_first(self, fd):
        """With --stat-first, an fstat before an old fd or mapping is used
        (which makes the kernel ask for the size: hides issue 20 defect 2)."""
        if self.args.stat_first:
            os.fstat(fd)

    def fd_of(self, node, ino=None, append=None):
        c = [f for f in node.fds if (ino is None or f.ino is ino) and
             (append is None or f.append == append)]
        return self.rng.choice(c) if c else None

    # -- operations: each returns False if it does not apply now --

    def op_write(self, node):
        fs = self.files()
        dirs = [p for p, _ in self.model.walk()[0]]
        create = not fs or (len(fs) < MAXFILES and self.rng.random() < 0.25)
        if create:
            parent = self.rng.choice(dirs)
            name = "f%d" % self.rng.randint(0, 9)
            path = parent + "/" + name if parent else name
            d, nm, e = self.model.lookup(path)
            if isinstance(e, Dir):
                return False
            ino = e
        else:
            path, ino = self.rng.choice(fs)
        trunc = self.rng.random() < 0.1
        size = 0 if trunc or ino is None else len(ino.data)
        off, n = self.rand_range(size)
        data = self.data(n)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0)
        self.log(node, "write %s off %d len %d%s%s" % (path, off, n, " O_TRUNC" if trunc else "",
                                                        " (creates)" if ino is None else ""))
        fd = os.open(node.p(path), flags, 0o644)
        try:
            os.lseek(fd, off, os.SEEK_SET)
            w = os.write(fd, data)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if w != n:
            raise Mismatch(["write returned %d, not %d" % (w, n)])
        if ino is None:
            ino = Ino()
            ino.st_ino = st.st_ino
            d.entries[nm] = ino
        if trunc:
            self.set_size(ino, 0)
        self.put(ino, off, data)
        return True

    def op_pwrite(self, node):
        f = self.fd_of(node, append=False)
        if not f:
            return False
        off, n = self.rand_range(len(f.ino.data))
        data = self.data(n)
        self.log(node, "pwrite %r off %d len %d" % (f, off, n))
        w = os.pwrite(f.fd, data, off)
        if w != n:
            raise Mismatch(["pwrite returned %d, not %d" % (w, n)])
        self.put(f.ino, off, data)
        return True

    def op_append(self, node):
        pooled = self.rng.random() < 0.7
        f = self.fd_of(node, append=True) if pooled else None
        if pooled and not f:
            return False
        if f:
            ino, what = f.ino, repr(f)
        else:
            path, ino = self.pick_file()
            if not ino:
                return False
            what = "fresh open O_APPEND of " + path
        n = self.rng.randint(1, 2000)
        if len(ino.data) + n > MAXSIZE:
            return False
        data = self.data(n)
        self.log(node, "append %s len %d (model: at %d)" % (what, n, len(ino.data)))
        fd = f.fd if f else os.open(node.p(path), os.O_WRONLY | os.O_APPEND)
        self.stat_first(fd)
        try:
            w = os.write(fd, data)
            pos = os.lseek(fd, 0, os.SEEK_CUR)
        finally:
            if not f:
                os.close(fd)
        self.put(ino, len(ino.data), data)
        if w != n:
            raise Mismatch(["append returned %d, not %d" % (w, n)])
        if pos != len(ino.data):
            raise Mismatch(["after the O_APPEND write the fd's offset is %d, the model's end of "
                            "file %d: the write landed at %d" % (pos, len(ino.data), pos - n)])
        return True

    def op_map(self, node):
        if node.maps and (len(node.maps) >= POOL_MAPS or self.rng.random() < 0.3):
            m = self.rng.choice(node.maps)
            self.log(node, "munmap %r" % m)
            node.maps.remove(m)
            os.close(m.fd)
            if libc.munmap(m.addr, MAPLEN) != 0:
                raise oserr("munmap")
            return True
        path, ino = self.pick_file()
        if not ino:
            return False
        fd = os.open(node.p(path), os.O_RDWR)
        addr = libc.mmap(None, MAPLEN, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if addr == MAP_FAILED or addr is None:
            e = oserr("mmap")
            os.close(fd)
            raise e
        m = Map(addr, fd, ino, path)
        node.maps.append(m)
        self.log(node, "mmap %s (%d bytes, MAP_SHARED) -> %r" % (path, MAPLEN, m))
        return True

    def store(self, node, sync):
        c = [m for m in node.maps if len(m.ino.data) > 0]
        if not c:
            return False
        m = self.rng.choice(c)
        size = len(m.ino.data)
        off = self.rng.randrange(size)
        n = self.rng.randint(1, min(size - off, 3000))
        data = self.data(n)
        self.log(node, "store %r off %d len %d%s" % (m, off, n, ", msync" if sync else ""))
        os.pwrite(self.srcfd, data, 0)
        self.stat_first(m.fd)
        try:
            got = os.preadv(self.srcfd, [m.buf(off, n)], 0)
        except OSError as e:
            got = "error " + errno.errorcode.get(e.errno, str(e.errno))
        if got != n:
            raise Mismatch(["a store of %d bytes at %d through %r (model size %d) faulted: "
                            "read() into the mapping returned %s" % (n, off, m, size, got)])
        self.put(m.ino, off, data)
        if sync and libc.msync(m.addr, MAPLEN, MS_SYNC) != 0:
            raise oserr("msync")
        return True

    def op_mmap(self, node):
        return self.store(node, False)

    def op_mmap_msync(self, node):
        return self.store(node, True)

    def truncate(self, node, up):
        pooled = self.rng.random() < 0.5
        f = self.fd_of(node) if pooled else None
        if f:
            ino, what = f.ino, "ftruncate %r" % f
        else:
            path, ino = self.pick_file()
            if not ino:
                return False
            what = "truncate %s" % path
        size = len(ino.data)
        if up:
            if size >= MAXSIZE:
                return False
            new = self.rng.randint(size + 1, min(MAXSIZE, size + 2 * BS))
        else:
            if size == 0:
                return False
            new = self.rng.randint(0, size - 1)
        self.log(node, "%s %d -> %d" % (what, size, new))
        if f:
            os.ftruncate(f.fd, new)
        else:
            os.truncate(node.p(path), new)
        self.set_size(ino, new)
        return True

    def op_truncate_up(self, node):
        return self.truncate(node, True)

    def op_truncate_down(self, node):
        return self.truncate(node, False)

    def falloc(self, node, mode, name, make_range, apply):
        f = self.fd_of(node) if self.rng.random() < 0.5 else None
        if f:
            ino, what = f.ino, repr(f)
        else:
            path, ino = self.pick_file()
            if not ino:
                return False
            what = path
        r = make_range(len(ino.data))
        if not r:
            return False
        off, n = r
        self.log(node, "fallocate %s %s off %d len %d (size %d)" % (what, name, off, n, len(ino.data)))
        fd = f.fd if f else os.open(node.p(path), os.O_RDWR)
        try:
            fallocate(fd, mode, off, n)
        finally:
            if not f:
                os.close(fd)
        apply(ino, off, n)
        return True

    def any_range(self, size):
        off, n = self.rand_range(size, maxlen=2 * BS)
        return off, n

    def op_falloc(self, node):
        if self.rng.random() < 0.5:
            return self.falloc(node, 0, "0", self.any_range,
                               lambda i, o, n: self.set_size(i, max(len(i.data), o + n)))
        return self.falloc(node, FALLOC_FL_KEEP_SIZE, "KEEP_SIZE", self.any_range,
                           lambda i, o, n: None)

    def zero(self, ino, off, n, keep):
        end = off + n if not keep else min(off + n, len(ino.data))
        if not keep and end > len(ino.data):
            self.set_size(ino, end)
        if off < end:
            ino.data[off:end] = bytes(end - off)

    def op_punch(self, node):
        return self.falloc(node, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, "PUNCH_HOLE|KEEP_SIZE",
                           self.any_range, lambda i, o, n: self.zero(i, o, n, True))

    def op_zero_range(self, node):
        if self.rng.random() < 0.5:
            return self.falloc(node, FALLOC_FL_ZERO_RANGE, "ZERO_RANGE", self.any_range,
                               lambda i, o, n: self.zero(i, o, n, False))
        return self.falloc(node, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, "ZERO_RANGE|KEEP_SIZE",
                           self.any_range, lambda i, o, n: self.zero(i, o, n, True))

    def collapse_range(self, size):
        blocks = size // BS   # off + len must stay below the size
        if size % BS == 0:
            blocks -= 1
        if blocks < 1:
            return None
        nb = self.rng.randint(1, blocks)
        ob = self.rng.randint(0, blocks - nb)
        return ob * BS, nb * BS

    def insert_range(self, size):
        if size == 0:
            return None
        room = (MAXSIZE - size) // BS
        if room < 1:
            return None
        ob = self.rng.randint(0, (size - 1) // BS)
        return ob * BS, self.rng.randint(1, min(room, 3)) * BS

    def op_collapse_range(self, node):
        def apply(i, o, n):
            del i.data[o:o + n]
        return self.falloc(node, FALLOC_FL_COLLAPSE_RANGE, "COLLAPSE_RANGE", self.collapse_range, apply)

    def op_insert_range(self, node):
        def apply(i, o, n):
            i.data[o:o] = bytes(n)
        return self.falloc(node, FALLOC_FL_INSERT_RANGE, "INSERT_RANGE", self.insert_range, apply)

    def new_name(self, prefix, isdir=False):
        """A path that does not exist, in a directory it may be in."""
        dirs = [p for p, _ in self.model.walk()[0]
                if Model.depth(p) < (MAXDEPTH if isdir else MAXDEPTH + 1)]
        parent = self.rng.choice(dirs)
        name = "%s%d" % (prefix, self.rng.randint(0, 9))
        path = parent + "/" + name if parent else name
        return None if self.model.lookup(path)[2] is not None else path

    def op_rename(self, node):
        dirs, files = self.model.walk()
        if dirs[1:] and self.rng.random() < 0.25:
            src, e = self.rng.choice(dirs[1:])
            # onto nothing or an empty directory, never below itself, depth kept
            if self.rng.random() < 0.3:
                c = [p for p, d in dirs[1:] if not d.entries and p != src]
                dst = self.rng.choice(c) if c else None
            else:
                dst = self.new_name("d", True)
            if not dst or dst.startswith(src + "/") or self.subdepth(e) + Model.depth(dst) > MAXDEPTH:
                return False
        else:
            if not files:
                return False
            src, e = self.rng.choice(files)
            if self.rng.random() < 0.4:
                dst = self.rng.choice(files)[0]
            else:
                dst = self.new_name("f")
            if not dst:
                return False
        self.log(node, "rename %s -> %s" % (src, dst))
        os.rename(node.p(src), node.p(dst))
        sd, sn, _ = self.model.lookup(src)
        dd, dn, de = self.model.lookup(dst)
        if de is e:                 # two links of one inode: nothing happens
            return True
        del sd.entries[sn]
        dd.entries[dn] = e
        return True

    def subdepth(self, d):
        sub = [self.subdepth(e) for e in d.entries.values() if isinstance(e, Dir)]
        return 1 + max(sub, default=0)

    def op_unlink(self, node):
        files = self.files()
        if len(files) < 2:
            return False
        held = {f.ino.id for n in self.nodes for f in n.fds} | {m.ino.id for n in self.nodes for m in n.maps}
        c = [x for x in files if x[1].id in held]
        path, ino = self.rng.choice(c if c and self.rng.random() < 0.7 else files)
        self.log(node, "unlink %s (%s, %s)" % (path, ino, "open" if ino.id in held else "not open"))
        os.unlink(node.p(path))
        d, n, _ = self.model.lookup(path)
        del d.entries[n]
        return True

    def op_link(self, node):
        path, ino = self.pick_file()
        if not ino or len(self.files()) >= MAXFILES:
            return False
        dst = self.new_name("f")
        if not dst:
            return False
        self.log(node, "link %s -> %s" % (path, dst))
        os.link(node.p(path), node.p(dst))
        d, n, _ = self.model.lookup(dst)
        d.entries[n] = ino
        return True

    def op_xattr(self, node):
        f = self.fd_of(node) if self.rng.random() < 0.4 else None
        if f:
            ino, target, what = f.ino, f.fd, repr(f)
        else:
            path, ino = self.pick_file()
            if not ino:
                return False
            target, what = node.p(path), path
        name = self.rng.choice(XATTRS)
        if name in ino.xattrs and self.rng.random() < 0.3:
            self.log(node, "removexattr %s %s" % (what, name))
            os.removexattr(target, name)
            del ino.xattrs[name]
        else:
            val = self.data(self.rng.randint(1, 100))
            self.log(node, "setxattr %s %s (%d bytes)" % (what, name, len(val)))
            os.setxattr(target, name, val)
            ino.xattrs[name] = val
        return True

    def op_dirs(self, node):
        dirs = self.model.walk()[0]
        empty = [(p, d) for p, d in dirs[1:] if not d.entries]
        if empty and (len(dirs) - 1 >= MAXDIRS or self.rng.random() < 0.4):
            path, _ = self.rng.choice(empty)
            self.log(node, "rmdir %s" % path)
            os.rmdir(node.p(path))
            d, n, _ = self.model.lookup(path)
            del d.entries[n]
            return True
        if len(dirs) - 1 >= MAXDIRS:
            return False
        path = self.new_name("d", True)
        if not path:
            return False
        self.log(node, "mkdir %s" % path)
        os.mkdir(node.p(path))
        d, n, _ = self.model.lookup(path)
        nd = Dir()
        nd.st_ino = os.stat(node.p(path)).st_ino
        d.entries[n] = nd
        return True

    def op_open(self, node):
        path, ino = self.pick_file()
        if not ino:
            return False
        if len(node.fds) >= POOL_FDS:
            self.op_close(node)
        append = self.rng.random() < 0.4
        fd = os.open(node.p(path), os.O_RDWR | (os.O_APPEND if append else 0))
        f = Fd(fd, ino, append, path)
        node.fds.append(f)
        self.log(node, "open %s%s -> %r" % (path, " O_APPEND" if append else "", f))
        return True

    def op_close(self, node):
        if not node.fds:
            return False
        f = self.rng.choice(node.fds)
        self.log(node, "close %r" % f)
        node.fds.remove(f)
        os.close(f.fd)
        return True

    # -- the check --

    def read_map(self, m, size):
        """The bytes [0, size) of mapping m, or (bytes, what went wrong)."""
        if size == 0:
            return b"", None
        self.stat_first(m.fd)
        try:
            n = os.pwrite(self.memfd, m.buf(0, size), 0)
        except OSError as e:
            return b"", "reading it faults at offset 0 (%s)" % errno.errorcode.get(e.errno, e.errno)
        got = os.pread(self.memfd, n, 0)
        return got, None if n == size else "reading it faults at offset %d" % n

    def read_fd(self, fd):
        out = bytearray()
        while len(out) <= MAXSIZE:
            b = os.pread(fd, MAXSIZE + 1 - len(out), len(out))
            if not b:
                break
            out += b
        return bytes(out)

    def read_sendfile(self, fd):
        self.stat_first(fd)
        os.ftruncate(self.memfd, 0)
        os.lseek(self.memfd, 0, os.SEEK_SET)
        off = 0
        while off <= MAXSIZE:
            n = os.sendfile(self.memfd, fd, off, MAXSIZE + 1 - off)
            if n == 0:
                break
            off += n
        return os.pread(self.memfd, off, 0)

    def read_cfr(self, node, fd):
        self.stat_first(fd)
        os.ftruncate(node.scratch, 0)
        off = 0
        while off <= MAXSIZE:
            n = os.copy_file_range(fd, node.scratch, MAXSIZE + 1 - off, off, off)
            if n == 0:
                break
            off += n
        return os.pread(node.scratch, off, 0)

    @staticmethod
    def diff_bytes(want, got):
        if len(want) != len(got):
            first = next((i for i in range(min(len(want), len(got))) if want[i] != got[i]), None)
            return "size %d, model %d%s" % (len(got), len(want),
                                             "" if first is None else "; first difference at %d" % first)
        first = next(i for i in range(len(want)) if want[i] != got[i])
        last = max(i for i in range(len(want)) if want[i] != got[i])
        zero = all(b == 0 for b in got[first:last + 1])
        return "bytes %d..%d differ (%s); model %s, got %s" % (
            first, last, "read as zeros" if zero else "other bytes",
            want[first:first + 8].hex(), got[first:first + 8].hex())

    def check_xattrs(self, target, ino, what, out):
        got = {}
        names = sorted(n for n in os.listxattr(target) if n.startswith("user."))
        for n in names:
            got[n] = os.getxattr(target, n)
        if got != ino.xattrs:
            out.append("%s: xattrs %s, model %s" % (
                what, {k: len(v) for k, v in got.items()}, {k: len(v) for k, v in ino.xattrs.items()}))

    def check(self):
        out = []
        dirs, files = self.model.walk()
        inos = self.inos()
        nlink = collections.Counter(ino.id for _, ino in files)
        order = self.nodes[:]
        self.rng.shuffle(order)
        # old views first: each fresh open or stat refreshes the node's size
        for node in order:
            for m in node.maps:
                want = bytes(m.ino.data)
                got, err = self.read_map(m, len(want))
                if err:
                    out.append("%s: %r (%s): %s; model size %d" % (node.name, m, m.path, err, len(want)))
                elif got != want:
                    out.append("%s: %r (%s) read through the mapping: %s" % (
                        node.name, m, m.path, self.diff_bytes(want, got)))
            # the fds of an inode share its size and pages: its contents
            # and xattrs through one of them (at random), fstat through all
            one = {}
            for f in node.fds:
                one.setdefault(f.ino.id, []).append(f)
            one = [self.rng.choice(one[k]) for k in sorted(one)]
            if "sendfile" in self.kinds:
                for f in one:
                    want = bytes(f.ino.data)
                    got = self.read_sendfile(f.fd)
                    if got != want:
                        out.append("%s: sendfile from %r: %s" % (node.name, f, self.diff_bytes(want, got)))
                    got = self.read_cfr(node, f.fd)
                    if got != want:
                        out.append("%s: copy_file_range from %r: %s" % (
                            node.name, f, self.diff_bytes(want, got)))
            for f in one:
                want = bytes(f.ino.data)
                got = self.read_fd(f.fd)
                if got != want:
                    out.append("%s: pread through %r (opened as %s): %s" % (
                        node.name, f, f.path, self.diff_bytes(want, got)))
                self.check_xattrs(f.fd, f.ino, "%s: %r" % (node.name, f), out)
            for f in node.fds:
                st = os.fstat(f.fd)
                exp = (len(f.ino.data), f.ino.st_ino, nlink[f.ino.id])
                if (st.st_size, st.st_ino, st.st_nlink) != exp:
                    out.append("%s: fstat %r: size, ino, nlink %s, model %s" % (
                        node.name, f, (st.st_size, st.st_ino, st.st_nlink), exp))
        for node in order:
            for path, d in dirs:
                try:
                    names = sorted(os.listdir(node.p(path)))
                    st = os.stat(node.p(path))
                except OSError as e:
                    out.append("%s: directory %s: %s" % (node.name, path or ".", e))
                    continue
                if names != sorted(d.entries):
                    out.append("%s: listing of %s: %s, model %s" % (
                        node.name, path or ".", names, sorted(d.entries)))
                nsub = sum(1 for e in d.entries.values() if isinstance(e, Dir))
                if st.st_nlink != 2 + nsub or (d.st_ino and st.st_ino != d.st_ino):
                    out.append("%s: directory %s: nlink %d ino %d, model %d %s" % (
                        node.name, path or ".", st.st_nlink, st.st_ino, 2 + nsub, d.st_ino))
            read = set()
            for path, ino in files:
                try:
                    st = os.lstat(node.p(path))
                except OSError as e:
                    out.append("%s: lstat %s: %s" % (node.name, path, e))
                    continue
                exp = (True, len(ino.data), ino.st_ino, nlink[ino.id])
                got = (stat.S_ISREG(st.st_mode), st.st_size, st.st_ino, st.st_nlink)
                if got != exp:
                    out.append("%s: lstat %s: regular, size, ino, nlink %s, model %s" % (
                        node.name, path, got, exp))
                if ino.id in read:
                    continue
                read.add(ino.id)
                try:
                    fd = os.open(node.p(path), os.O_RDONLY)
                except OSError as e:
                    out.append("%s: open %s: %s" % (node.name, path, e))
                    continue
                try:
                    got = self.read_fd(fd)
                finally:
                    os.close(fd)
                if got != bytes(ino.data):
                    out.append("%s: %s read through a fresh open: %s" % (
                        node.name, path, self.diff_bytes(bytes(ino.data), got)))
                self.check_xattrs(node.p(path), ino, "%s: %s" % (node.name, path), out)
        if out:
            raise Mismatch(out)
        return len(inos)

    # -- the run --

    def setup(self):
        a = self.nodes[0]
        os.mkdir(a.top)
        self.model.root.st_ino = os.stat(a.top).st_ino
        for node in self.nodes:
            sp = node.top + ".scratch-" + node.name
            node.scratch = os.open(sp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(4):
            self.op_write(self.nodes[0])
        for node in self.nodes:
            for _ in range(3):
                self.op_open(node)
            if "map" in self.kinds:
                self.op_map(node)

    def one_op(self):
        for _ in range(100):
            node = self.rng.choice(self.nodes)
            kind = self.rng.choices(self.ops, self.weights)[0]
            if getattr(self, "op_" + kind)(node):
                self.counts[kind] += 1
                return
        raise SystemExit("diff_model: no operation applies (kinds %s)" % ",".join(sorted(self.kinds)))

    def run(self):
        a = self.args
        t0 = time.monotonic()
        shown = t0
        try:
            self.setup()
            self.check()
            while True:
                if a.steps and self.step >= a.steps:
                    break
                if a.seconds and time.monotonic() - t0 >= a.seconds:
                    break
                self.step += 1
                if time.monotonic() - shown >= 60:
                    shown = time.monotonic()
                    print("step %d ops %d seconds %.0f" % (self.step, self.nops, shown - t0), flush=True)
                r = self.rng.random()
                for _ in range(1 if r < 0.6 else 2 if r < 0.9 else 3):
                    self.one_op()
                self.check()
        except (Mismatch, OSError) as e:
            lines = e.args[0] if isinstance(e, Mismatch) else ["the last operation failed: %s" % e]
            print("MISMATCH seed %d step %d (op %d)" % (a.seed, self.step, self.nops))
            print("the last %d operations:" % len(self.hist))
            for h in self.hist:
                print("  " + h)
            print("differences:")
            for line in lines[:20]:
                print("  " + line)
            if len(lines) > 20:
                print("  ... %d more" % (len(lines) - 20))
            print("rerun: DIFF_SEED=%d DIFF_STEPS=%d DIFF_OPS=%s%s" % (
                a.seed, self.step, ",".join(k for k in ALL_KINDS if k in self.kinds),
                " DIFF_STAT_FIRST=1" if a.stat_first else ""))
            return 1
        finally:
            self.close_all()
        dt = time.monotonic() - t0
        print("steps %d ops %d seconds %.1f seed %d" % (self.step, self.nops, dt, a.seed))
        print("ops by kind: " + " ".join("%s=%d" % (k, self.counts[k]) for k in sorted(self.counts)))
        return 0

    def close_all(self):
        for node in self.nodes:
            for m in node.maps:
                libc.munmap(m.addr, MAPLEN)
                os.close(m.fd)
            for f in node.fds:
                os.close(f.fd)
            node.maps, node.fds = [], []
            if node.scratch is not None:
                os.close(node.scratch)
                node.scratch = None


def kind_list(ap, s, what):
    if s.strip() in ("", "none"):
        return set()
    if s.strip() == "all":
        return set(ALL_KINDS)
    out = {k.strip() for k in s.split(",") if k.strip()}
    bad = out - set(ALL_KINDS)
    if bad:
        ap.error("unknown op kind(s) in %s: %s (kinds: %s)" % (
            what, ",".join(sorted(bad)), ",".join(ALL_KINDS)))
    return out


def main():
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=int(env("DIFF_SEED") or random.SystemRandom().randrange(1 << 31)))
    ap.add_argument("--steps", type=int, default=int(env("DIFF_STEPS") or -1))
    ap.add_argument("--seconds", type=float, default=float(env("DIFF_SECONDS") or 0))
    ap.add_argument("--ops", default=env("DIFF_OPS") or "all")
    ap.add_argument("--skip", default=env("DIFF_SKIP") or "")
    ap.add_argument("--stat-first", action="store_true", default=bool(env("DIFF_STAT_FIRST")))
    ap.add_argument("--dir", default="diff")
    ap.add_argument("--log", help="write every operation to this file before making it")
    ap.add_argument("mnt_a")
    ap.add_argument("mnt_b")
    args = ap.parse_args()
    if args.steps < 0:
        args.steps = 0 if args.seconds else 2000
    kinds = kind_list(ap, args.ops, "--ops") - kind_list(ap, args.skip, "--skip")
    if {"mmap", "mmap_msync"} & kinds and "map" not in kinds:
        ap.error("mmap and mmap_msync need the kind map")
    print("seed %d steps %d seconds %g kinds %s%s" % (
        args.seed, args.steps, args.seconds, ",".join(k for k in ALL_KINDS if k in kinds),
        " (fstat before using an old fd or mapping)" if args.stat_first else ""))
    sys.stdout.flush()
    sys.exit(Driver(args, kinds).run())


if __name__ == "__main__":
    main()
