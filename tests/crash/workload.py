#!/usr/bin/env python3
"""workload.py - the file workload of the crash tests, and its checker.

  workload.py run DIR LOG SEED     work in DIR until an error (the daemon is
                                   killed under it), logging to LOG
  workload.py check MNT LOG...     after recovery: every acknowledged path
                                   holds what was acknowledged, and every
                                   file under MNT can be stat'ed and read

The run mode makes every kind of change a file system must make durable at
fsync/fdatasync (issue 21, defect 1), each on a random file or directory,
and then (most of the time) syncs as POSIX asks and acknowledges it:

  data     create with contents (empty, inline-sized, block-sized, large),
           append, overwrite in place (also bursts of small fdatasync'ed
           ones, in inline and block files), truncate down and up, a hole
           made by a truncate up and filled by a write, fallocate (mode 0
           and KEEP_SIZE) and punch hole, copy_file_range from another
           file, a write through a shared mapping (msync)
           - then fdatasync (or fsync) of the file, fsync of its directory;
  names    mkdir, rmdir, rename (to a new name and over a file), unlink,
           link, symlink - then fsync of the directory (both directories
           for a rename; the file as well for a link);
  inode    chmod, chown (as root), utimes, setxattr, removexattr - then
           fsync of the file.

fdatasync stands for fsync only where it must make the change durable:
after data changes to a file whose inode changes were already synced.  A
file whose name is durable already gets no fsync of its directory, and
after an acknowledgement, now and then, a stretch of operations syncs
nothing: any sync commits the journal and would make up for an earlier
sync that missed something, before the crash could find it.
The log is opened line-buffered and fsync'ed after each line on the host
filesystem, so a line that is in it was written before whatever followed.
Lines:

  WRITE P / RENAME A B / UNLINK P     written BEFORE the operation: from then
                                      on what P (A, B) holds is unknown
  ACK P STATE                         written after the syncs returned: P
                                      holds exactly STATE (below)
  GONE P                              written after unlink, rmdir (or rename
                                      away) and fsync of the directory: P is
                                      absent
  ERROR EXC P ERRNO                   an operation failed; the run stops

STATE is one word: f,SHA256,MODE,UID,GID,MTIME,XATTRS,NODE for a file
(MODE octal permission bits; MTIME in ns, or - when not set by utimes since
the last data change; XATTRS the SHA256 of its user.* attributes, names
sorted, or - for none; NODE the workload's name for the inode: every
acknowledged path of one NODE is one inode, with at least that many links),
l,HEX for a symbolic link to the target HEX (hex-encoded), d,MODE for a
directory.

The checker replays the log(s): the last of ACK/GONE/WRITE/RENAME/UNLINK
about a path decides what it must hold (nothing, if unknown).  An ERROR line
only says how the run ended: after the daemon is killed any error may come
(ENOTCONN, EIO, or ENOENT once the dead mount is detached); whether the run
stopped before the kill is for the caller to see (the process is gone).
The exit status of a run is 0 for the usual ENOTCONN/ECONNABORTED/ENODEV.
"""
import ctypes
import errno
import hashlib
import mmap
import os
import random
import stat
import sys

EXPECTED_END = {errno.ENOTCONN, errno.ECONNABORTED, errno.ENODEV}
MAX_FILES = 80
MAX_DIRS = 10
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def fallocate(fd, mode, off, length):
    if _libc.fallocate(fd, mode, off, length) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def emit(self, *words):
        self.f.write(" ".join(words) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def fsync_path(path, data_only=False):
    fd = os.open(path, os.O_RDONLY)
    try:
        (os.fdatasync if data_only else os.fsync)(fd)
    finally:
        os.close(fd)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def xattr_sha(xattrs):
    if not xattrs:
        return "-"
    h = hashlib.sha256()
    for k in sorted(xattrs):
        h.update(k.encode() + b"\0" + str(len(xattrs[k])).encode() + b"\0" + xattrs[k])
    return h.hexdigest()


class Node:
    """An inode as the workload made it: a file (with its links) or a symlink."""

    def __init__(self, nid, kind):
        self.nid = nid
        self.kind = kind  # "f" or "l"
        self.data = bytearray()
        self.target = ""
        self.mode = 0o644
        self.uid = self.gid = 0
        self.mtime = None  # ns, when set by utimes and not changed since
        self.xattrs = {}
        self.paths = []
        self.meta_dirty = True  # inode changes not yet fsync'ed

    def state(self):
        if self.kind == "l":
            return "l," + self.target.encode().hex()
        return "f,%s,%o,%d,%d,%s,%s,%s" % (
            sha(self.data), self.mode, self.uid, self.gid,
            "-" if self.mtime is None else str(self.mtime),
            xattr_sha(self.xattrs), self.nid)


class Run:
    def __init__(self, root, log, seed):
        self.root = root
        self.log = log
        self.seed = seed
        self.rnd = random.Random(seed)
        self.dirs = [root]
        self.files = {}  # path -> Node: files, their links, and symlinks
        self.named = set()  # paths whose directory entry was made durable
        self.n = 0
        self.no_punch = False  # the filesystem said EOPNOTSUPP once
        self.quiet = 0  # operations left that sync nothing (see step)
        self.root_user = os.geteuid() == 0

    def newname(self, prefix):
        self.n += 1
        return os.path.join(self.rnd.choice(self.dirs), "%s%d" % (prefix, self.n))

    def data(self, size):
        return self.rnd.randbytes(size)

    def pick(self, kind="f"):
        c = sorted(p for p, nd in self.files.items() if kind is None or nd.kind == kind)
        return self.rnd.choice(c) if c else None

    def unknown(self, node):
        """Before a change of node: what each of its paths holds is unknown."""
        for p in node.paths:
            self.log.emit("WRITE", p)

    def ack(self, node, path):
        """path's file and directory were synced: acknowledge node's state
        at path, and at every other path of it whose name is durable."""
        self.named.add(path)
        for p in node.paths:
            if p in self.named:
                self.log.emit("ACK", p, node.state())
        self.after_ack()

    def after_ack(self):
        if not self.quiet and self.rnd.random() < 0.3:
            self.quiet = self.rnd.randrange(2, 12)

    def sync_now(self, p):
        """Whether to sync (with probability p), never while quiet."""
        return not self.quiet and self.rnd.random() < p

    def sync_ack(self, path, data_only=False):
        """fsync (fdatasync) the file at path, and its directory unless its
        name is durable already (POSIX asks no more: a directory's fsync
        commits the journal and would make up for a file's that missed
        something), then acknowledge."""
        node = self.files[path]
        if node.meta_dirty:
            data_only = False
        fsync_path(path, data_only)
        if not data_only:
            node.meta_dirty = False
        if path not in self.named:
            fsync_path(os.path.dirname(path))
        self.ack(node, path)

    def maybe_sync(self, path, data=True):
        if self.sync_now(0.6):
            self.sync_ack(path, data_only=data and self.rnd.random() < 0.5)

    # --- names ---------------------------------------------------------------

    def op_mkdir(self):
        if len(self.dirs) >= MAX_DIRS:
            return
        d = self.newname("d")
        self.log.emit("WRITE", d)
        os.mkdir(d, 0o755)
        self.dirs.append(d)
        if self.sync_now(0.7):
            fsync_path(os.path.dirname(d))
            self.log.emit("ACK", d, "d,%o" % stat.S_IMODE(os.lstat(d).st_mode))
            self.after_ack()

    def op_rmdir(self):
        empty = [d for d in self.dirs[1:]
                 if not any(os.path.dirname(p) == d for p in self.files)
                 and not any(os.path.dirname(e) == d for e in self.dirs)]
        if not empty:
            return
        d = self.rnd.choice(empty)
        self.log.emit("UNLINK", d)
        os.rmdir(d)
        self.dirs.remove(d)
        if self.sync_now(0.7):
            fsync_path(os.path.dirname(d))
            self.log.emit("GONE", d)
            self.after_ack()

    def new_node(self, kind, path):
        self.n += 1
        node = Node("n%d.%d" % (self.seed, self.n), kind)
        node.paths.append(path)
        self.files[path] = node
        return node

    def op_create(self):
        p = self.newname("f")
        size = self.rnd.choice([0, self.rnd.randrange(1, 200), self.rnd.randrange(4000),
                                self.rnd.randrange(64 << 10),
                                self.rnd.randrange(300 << 10)])
        buf = self.data(size)
        self.log.emit("WRITE", p)
        node = self.new_node("f", p)
        node.data = bytearray(buf)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            st = os.fstat(fd)
            node.mode, node.uid, node.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
            os.write(fd, buf)
            if self.sync_now(0.5):
                os.fsync(fd)
                node.meta_dirty = False
                fsync_path(os.path.dirname(p))
                self.ack(node, p)
        finally:
            os.close(fd)

    def op_symlink(self):
        p = self.newname("s")
        target = "t%d/%s" % (self.n, "x" * self.rnd.choice([1, 50, 300]))
        self.log.emit("WRITE", p)
        os.symlink(target, p)
        node = self.new_node("l", p)
        node.target = target
        if self.sync_now(0.6):
            fsync_path(os.path.dirname(p))
            self.ack(node, p)

    def op_link(self):
        src = self.pick()
        if src is None:
            return
        node = self.files[src]
        dst = self.newname("h")
        self.log.emit("WRITE", dst)
        os.link(src, dst)
        node.paths.append(dst)
        self.files[dst] = node
        node.meta_dirty = True  # the link count
        if self.sync_now(0.6):
            self.sync_ack(dst)

    def drop_path(self, p):
        node = self.files.pop(p)
        node.paths.remove(p)
        self.named.discard(p)

    def op_rename(self):
        src = self.pick(None)
        if src is None:
            return
        node = self.files[src]
        others = [f for f in self.files if f != src and self.files[f] is not node]
        if others and self.rnd.random() < 0.3:
            dst = self.rnd.choice(sorted(others))  # over an existing file
        else:
            dst = self.newname("r")
        self.log.emit("RENAME", src, dst)
        os.rename(src, dst)
        if dst in self.files:
            self.drop_path(dst)
        self.drop_path(src)
        node.paths.append(dst)
        self.files[dst] = node
        if self.sync_now(0.5):
            # the directories (and the file only if an inode change is
            # not synced yet): the new name then holds the contents
            # durably, as ext4 and XFS make a rename over a file do
            if node.meta_dirty and node.kind == "f":
                fsync_path(dst)
                node.meta_dirty = False
            fsync_path(os.path.dirname(src))
            fsync_path(os.path.dirname(dst))
            self.ack(node, dst)
            self.log.emit("GONE", src)
            self.after_ack()

    def op_unlink(self):
        p = self.pick(None)
        if p is None:
            return
        self.log.emit("UNLINK", p)
        os.unlink(p)
        self.drop_path(p)
        if self.sync_now(0.5):
            fsync_path(os.path.dirname(p))
            self.log.emit("GONE", p)
            self.after_ack()

    # --- the inode -------------------------------------------------------------

    def op_meta(self):
        p = self.pick()
        if p is None:
            return
        node = self.files[p]
        self.unknown(node)
        kind = self.rnd.randrange(5)
        if kind == 0:
            node.mode = self.rnd.choice([0o600, 0o640, 0o644, 0o755, 0o700, 0o444, 0o2750])
            os.chmod(p, node.mode)
        elif kind == 1 and self.root_user:
            node.uid = self.rnd.randrange(1000, 1100)
            node.gid = self.rnd.randrange(1000, 1100)
            os.chown(p, node.uid, node.gid)
            node.mode &= ~0o6000  # chown clears set-id bits of a file
            # the kernel may or may not clear them: read what it did
            node.mode = stat.S_IMODE(os.lstat(p).st_mode)
        elif kind == 2:
            node.mtime = self.rnd.randrange(1, 2 << 30) * 1000000000 + \
                self.rnd.randrange(1000000000)
            os.utime(p, ns=(node.mtime, node.mtime))
        elif kind == 3 or not node.xattrs:
            name = "user.k%d" % self.rnd.randrange(8)
            val = self.data(self.rnd.choice([0, 10, 200, 1500]))
            try:
                os.setxattr(p, name, val)
                node.xattrs[name] = val
            except OSError as e:
                # a file's attributes share one block (as ext4's do):
                # this one does not fit, and nothing changed
                if e.errno != errno.ENOSPC:
                    raise
        else:
            name = self.rnd.choice(sorted(node.xattrs))
            os.removexattr(p, name)
            del node.xattrs[name]
        node.meta_dirty = True
        if self.sync_now(0.6):
            self.sync_ack(p)

    # --- data ------------------------------------------------------------------

    def setdata(self, content, off, buf):
        if off > len(content):
            content += bytes(off - len(content))
        content[off:off + len(buf)] = buf

    def op_change(self):
        p = self.pick()
        if p is None:
            return
        node = self.files[p]
        content = node.data
        self.unknown(node)
        node.mtime = None
        kind = self.rnd.randrange(9)
        fd = os.open(p, os.O_RDWR)
        try:
            if kind == 0:  # append
                buf = self.data(self.rnd.randrange(1, 64 << 10))
                with open(p, "ab") as f:
                    f.write(buf)
                content += buf
            elif kind == 1:  # truncate, shorter or longer
                size = self.rnd.choice([self.rnd.randrange(300 << 10),
                                        self.rnd.randrange(len(content) + 1)])
                os.ftruncate(fd, size)
                if size < len(content):
                    del content[size:]
                else:
                    content += bytes(size - len(content))
            elif kind == 2 and content:
                # small overwrites, each fdatasync'ed (inline files, and the
                # dirty-block index: the data rides in the fast commit)
                for i in range(self.rnd.randrange(1, 7)):
                    if i:
                        self.unknown(node)  # after the last one's ACK
                    off = self.rnd.randrange(len(content))
                    buf = self.data(self.rnd.randrange(1, min(2048, len(content) - off) + 1))
                    os.pwrite(fd, buf, off)
                    self.setdata(content, off, buf)
                    if self.quiet:
                        continue
                    os.fdatasync(fd)
                    if p in self.named and not node.meta_dirty:
                        self.ack(node, p)
            elif kind == 3:  # a hole made and filled
                hole = self.rnd.randrange(1, 256 << 10)
                end = len(content) + hole
                os.ftruncate(fd, end)
                content += bytes(hole)
                off = self.rnd.randrange(end - hole, end)
                buf = self.data(self.rnd.randrange(1, 16 << 10))
                os.pwrite(fd, buf, off)
                self.setdata(content, off, buf)
            elif kind == 4:  # fallocate: mode 0 or KEEP_SIZE
                off = self.rnd.randrange(len(content) + (64 << 10))
                n = self.rnd.randrange(1, 128 << 10)
                mode = self.rnd.choice([0, FALLOC_FL_KEEP_SIZE])
                fallocate(fd, mode, off, n)
                if mode == 0 and off + n > len(content):
                    content += bytes(off + n - len(content))
            elif kind == 5 and content and not self.no_punch:  # punch a hole
                off = self.rnd.randrange(len(content))
                n = self.rnd.randrange(1, len(content) - off + 1)
                try:
                    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n)
                    content[off:off + n] = bytes(n)
                except OSError as e:
                    if e.errno != errno.EOPNOTSUPP:
                        raise
                    self.no_punch = True
            elif kind == 6:  # copy_file_range from another file
                src = self.pick()
                snode = self.files[src] if src else None
                if snode is not None and snode is not node and snode.data:
                    soff = self.rnd.randrange(len(snode.data))
                    n = self.rnd.randrange(1, len(snode.data) - soff + 1)
                    doff = self.rnd.randrange(len(content) + 1)
                    sfd = os.open(src, os.O_RDONLY)
                    try:
                        done = 0
                        while done < n:
                            c = os.copy_file_range(sfd, fd, n - done, soff + done,
                                                   doff + done)
                            if c <= 0:
                                break
                            done += c
                    finally:
                        os.close(sfd)
                    self.setdata(content, doff, snode.data[soff:soff + done])
            elif kind == 7 and content:  # through a shared mapping
                m = mmap.mmap(fd, len(content))
                try:
                    for _ in range(self.rnd.randrange(1, 4)):
                        off = self.rnd.randrange(len(content))
                        buf = self.data(self.rnd.randrange(1, min(8192, len(content) - off) + 1))
                        m[off:off + len(buf)] = buf
                        content[off:off + len(buf)] = buf
                    if not self.quiet:
                        m.flush()  # msync(MS_SYNC)
                finally:
                    m.close()
            else:  # overwrite in place
                off = self.rnd.randrange(len(content) + 1)
                buf = self.data(self.rnd.randrange(1, 64 << 10))
                os.pwrite(fd, buf, off)
                self.setdata(content, off, buf)
        finally:
            os.close(fd)
        self.maybe_sync(p)

    def step(self):
        """One operation.  After an acknowledgement, now and then, a quiet
        stretch of 2-11 operations syncs nothing: a sync of anything
        commits the journal, which would make up for a sync that missed
        something before a crash could find it."""
        if self.quiet:
            self.quiet -= 1
        r = self.rnd.random()
        if r < 0.04:
            self.op_mkdir()
        elif r < 0.06:
            self.op_rmdir()
        elif r < 0.30:
            self.op_create()
        elif r < 0.33:
            self.op_symlink()
        elif r < 0.37:
            self.op_link()
        elif r < 0.46:
            self.op_rename()
        elif r < 0.54:
            self.op_unlink()
        elif r < 0.64:
            self.op_meta()
        else:
            self.op_change()
        while len(self.files) > MAX_FILES:
            self.op_unlink()


def run(root, logpath, seed):
    log = Log(logpath)
    w = Run(root, log, seed)
    try:
        fsync_path(os.path.dirname(root) or ".")  # the caller made root
        while True:
            w.step()
    except OSError as e:
        log.emit("ERROR", type(e).__name__, str(e.filename),
                 errno.errorcode.get(e.errno, str(e.errno)))
        return 0 if e.errno in EXPECTED_END else 1


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def check_state(path, want, inodes):
    """What is wrong with path against the acknowledged state want, or None."""
    w = want.split(",")
    st = os.lstat(path)
    if w[0] == "d":
        if not stat.S_ISDIR(st.st_mode):
            return "acknowledged as a directory, but it is not one"
        if "%o" % stat.S_IMODE(st.st_mode) != w[1]:
            return "mode %o, acknowledged %s" % (stat.S_IMODE(st.st_mode), w[1])
        return None
    if w[0] == "l":
        if not stat.S_ISLNK(st.st_mode):
            return "acknowledged as a symbolic link, but it is not one"
        got = os.readlink(path).encode().hex()
        return None if got == w[1] else "symbolic link target differs"
    _, digest, mode, uid, gid, mtime, xsha, nid = w
    if not stat.S_ISREG(st.st_mode):
        return "acknowledged as a file, but it is not one"
    if sha(read_all(path)) != digest:
        return "contents differ from the acknowledged ones (size %d)" % st.st_size
    wrong = []
    if "%o" % stat.S_IMODE(st.st_mode) != mode:
        wrong.append("mode %o, acknowledged %s" % (stat.S_IMODE(st.st_mode), mode))
    if str(st.st_uid) != uid or str(st.st_gid) != gid:
        wrong.append("owner %d:%d, acknowledged %s:%s" % (st.st_uid, st.st_gid, uid, gid))
    if mtime != "-" and str(st.st_mtime_ns) != mtime:
        wrong.append("mtime %d, acknowledged %s" % (st.st_mtime_ns, mtime))
    xattrs = {k: os.getxattr(path, k, follow_symlinks=False)
              for k in os.listxattr(path, follow_symlinks=False) if k.startswith("user.")}
    if xattr_sha(xattrs) != xsha:
        wrong.append("extended attributes differ (%s)" % ",".join(sorted(xattrs)))
    inodes.setdefault(nid, []).append((path, st.st_ino, st.st_nlink))
    return "; ".join(wrong) or None


def check(mnt, logs):
    state = {}  # path -> state word, "GONE", or None (unknown)
    failures = []
    acks = 0
    for lp in logs:
        with open(lp) as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # the run was killed while writing the log
                w = line.split()
                if w[0] == "ACK":
                    state[w[1]] = w[2]
                    acks += 1
                elif w[0] == "GONE":
                    state[w[1]] = "GONE"
                elif w[0] in ("WRITE", "UNLINK"):
                    state[w[1]] = None
                elif w[0] == "RENAME":
                    state[w[1]] = None
                    state[w[2]] = None
                elif w[0] == "ERROR":
                    pass  # how the run ended; the caller knows if it was early
    checked = 0
    inodes = {}  # NODE -> [(path, st_ino, st_nlink)]
    for path, want in sorted(state.items()):
        if want is None:
            continue
        checked += 1
        if want == "GONE":
            if os.path.lexists(path):
                failures.append("%s: removed and acknowledged, but it exists" % path)
            continue
        try:
            why = check_state(path, want, inodes)
        except OSError as e:
            why = "acknowledged, but %s" % e.strerror
        if why:
            failures.append("%s: %s" % (path, why))
    for nid, paths in sorted(inodes.items()):
        if len({ino for _, ino, _ in paths}) > 1:
            failures.append("%s: acknowledged as links of one file, but they are not"
                            % " ".join(p for p, _, _ in paths))
        elif min(nl for _, _, nl in paths) < len(paths):
            failures.append("%s: link count %d, below the %d acknowledged links"
                            % (paths[0][0], paths[0][2], len(paths)))
    # the whole tree: every entry stat'ed, every file read to its end
    nfiles = 0
    for d, subdirs, files in os.walk(mnt, onerror=lambda e: failures.append(
            "walk: %s: %s" % (e.filename, e.strerror))):
        for name in files + subdirs:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode):
                    n = 0
                    with open(p, "rb") as f:
                        while True:
                            b = f.read(1 << 20)
                            if not b:
                                break
                            n += len(b)
                    if n != st.st_size:
                        failures.append("%s: read %d bytes of %d" % (p, n, st.st_size))
                    nfiles += 1
                elif stat.S_ISLNK(st.st_mode):
                    os.readlink(p)
            except OSError as e:
                failures.append("%s: %s" % (p, e.strerror))
    for f in failures[:20]:
        print("#   " + f)
    print("# %d acks, %d paths checked, %d files read, %d failures"
          % (acks, checked, nfiles, len(failures)))
    return 1 if failures else 0


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3:]))
    sys.stderr.write(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()
