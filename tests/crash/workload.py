#!/usr/bin/env python3
"""workload.py - the file workload of the crash tests, and its checker.

  workload.py run DIR LOG SEED     work in DIR until an error (the daemon is
                                   killed under it), logging to LOG
  workload.py check MNT LOG...     after recovery: every acknowledged path
                                   holds what was acknowledged, and every
                                   file under MNT can be stat'ed and read

The run mode creates directories and files of random sizes (0..300 KiB),
renames (to new names and over existing files), unlinks, appends,
truncates and overwrites (also bursts of small fdatasync'ed ones), and fsyncs a random subset: the file, then its
directory.  The log is opened line-buffered and fsync'ed after each line on
the host filesystem, so a line that is in it was written before whatever
followed.  Lines:

  WRITE P / RENAME A B / UNLINK P     written BEFORE the operation: from then
                                      on what P (A, B) holds is unknown
  ACK P SHA256                        written after fsync of P and of its
                                      directory returned: P holds exactly this
  GONE P                              written after unlink (or rename away)
                                      and fsync of the directory: P is absent
  ERROR EXC P ERRNO                   an operation failed; the run stops

The checker replays the log(s): the last of ACK/GONE/WRITE/RENAME/UNLINK
about a path decides what it must hold (nothing, if unknown).  An ERROR line
only says how the run ended: after the daemon is killed any error may come
(ENOTCONN, EIO, or ENOENT once the dead mount is detached); whether the run
stopped before the kill is for the caller to see (the process is gone).
The exit status of a run is 0 for the usual ENOTCONN/ECONNABORTED/ENODEV.
"""
import errno
import hashlib
import os
import random
import sys

EXPECTED_END = {errno.ENOTCONN, errno.ECONNABORTED, errno.ENODEV}
MAX_FILES = 80
MAX_DIRS = 10


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def emit(self, *words):
        self.f.write(" ".join(words) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha(data):
    return hashlib.sha256(data).hexdigest()


class Run:
    def __init__(self, root, log, seed):
        self.root = root
        self.log = log
        self.rnd = random.Random(seed)
        self.dirs = [root]
        self.files = {}  # path -> bytearray: what the file holds now
        self.n = 0

    def newname(self, prefix):
        self.n += 1
        return os.path.join(self.rnd.choice(self.dirs), "%s%d" % (prefix, self.n))

    def data(self, size):
        return self.rnd.randbytes(size)

    def durable(self, path, sync_file=True):
        """fsync path (a file) and its directory, then acknowledge it."""
        if sync_file:
            fsync_path(path)
        fsync_path(os.path.dirname(path))
        self.log.emit("ACK", path, sha(self.files[path]))

    def op_mkdir(self):
        if len(self.dirs) >= MAX_DIRS:
            return
        d = self.newname("d")
        os.mkdir(d)
        fsync_path(os.path.dirname(d))
        self.dirs.append(d)

    def op_create(self):
        p = self.newname("f")
        size = self.rnd.choice([0, self.rnd.randrange(4000),
                                self.rnd.randrange(64 << 10),
                                self.rnd.randrange(300 << 10)])
        buf = self.data(size)
        self.files[p] = bytearray(buf)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, buf)
            if self.rnd.random() < 0.5:
                os.fsync(fd)
                self.durable(p, sync_file=False)
        finally:
            os.close(fd)

    def pick(self):
        return self.rnd.choice(sorted(self.files)) if self.files else None

    def op_rename(self):
        src = self.pick()
        if src is None:
            return
        others = [f for f in self.files if f != src]
        if others and self.rnd.random() < 0.3:
            dst = self.rnd.choice(sorted(others))  # over an existing file
        else:
            dst = self.newname("r")
        self.log.emit("RENAME", src, dst)
        os.rename(src, dst)
        self.files[dst] = self.files.pop(src)
        if self.rnd.random() < 0.5:
            fsync_path(os.path.dirname(src))
            self.durable(dst, sync_file=False)
            self.log.emit("GONE", src)

    def op_unlink(self):
        p = self.pick()
        if p is None:
            return
        self.log.emit("UNLINK", p)
        os.unlink(p)
        del self.files[p]
        if self.rnd.random() < 0.5:
            fsync_path(os.path.dirname(p))
            self.log.emit("GONE", p)

    def op_change(self):
        p = self.pick()
        if p is None:
            return
        content = self.files[p]
        self.log.emit("WRITE", p)
        kind = self.rnd.randrange(4)
        if kind == 0:  # append
            buf = self.data(self.rnd.randrange(1, 64 << 10))
            with open(p, "ab") as f:
                f.write(buf)
            content += buf
        elif kind == 1:  # truncate, shorter or longer
            size = self.rnd.randrange(300 << 10)
            os.truncate(p, size)
            if size < len(content):
                del content[size:]
            else:
                content += bytes(size - len(content))
        elif kind == 3 and content:
            # small overwrites, each fdatasync'ed (the dirty-block index:
            # the data waits in memory and rides in the fast commit)
            fd = os.open(p, os.O_WRONLY)
            try:
                for _ in range(self.rnd.randrange(1, 7)):
                    off = self.rnd.randrange(len(content))
                    buf = self.data(self.rnd.randrange(1, 2048))
                    os.pwrite(fd, buf, off)
                    if off + len(buf) > len(content):
                        content += bytes(off + len(buf) - len(content))
                    content[off:off + len(buf)] = buf
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        else:  # overwrite in place
            off = self.rnd.randrange(len(content) + 1)
            buf = self.data(self.rnd.randrange(1, 64 << 10))
            fd = os.open(p, os.O_WRONLY)
            try:
                os.pwrite(fd, buf, off)
            finally:
                os.close(fd)
            if off + len(buf) > len(content):
                content += bytes(off + len(buf) - len(content))
            content[off:off + len(buf)] = buf
        if self.rnd.random() < 0.5:
            self.durable(p)

    def step(self):
        r = self.rnd.random()
        if r < 0.05:
            self.op_mkdir()
        elif r < 0.45:
            self.op_create()
        elif r < 0.57:
            self.op_rename()
        elif r < 0.67:
            self.op_unlink()
        else:
            self.op_change()
        while len(self.files) > MAX_FILES:
            self.op_unlink()


def run(root, logpath, seed):
    log = Log(logpath)
    w = Run(root, log, seed)
    try:
        while True:
            w.step()
    except OSError as e:
        log.emit("ERROR", type(e).__name__, str(e.filename),
                 errno.errorcode.get(e.errno, str(e.errno)))
        return 0 if e.errno in EXPECTED_END else 1


def check(mnt, logs):
    state = {}  # path -> sha hex, "GONE", or None (unknown)
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
                    pass  # how the run ended; t_sigkill.sh knows if it was early
    checked = 0
    for path, want in sorted(state.items()):
        if want is None:
            continue
        checked += 1
        if want == "GONE":
            if os.path.lexists(path):
                failures.append("%s: removed and acknowledged, but it exists" % path)
            continue
        try:
            with open(path, "rb") as f:
                got = sha(f.read())
        except OSError as e:
            failures.append("%s: acknowledged, but %s" % (path, e.strerror))
            continue
        if got != want:
            failures.append("%s: contents differ from the acknowledged ones" % path)
    # the whole tree: every entry stat'ed, every file read to its end
    nfiles = 0
    for d, subdirs, files in os.walk(mnt, onerror=lambda e: failures.append(
            "walk: %s: %s" % (e.filename, e.strerror))):
        for name in files + subdirs:
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
                if os.path.isfile(p) and not os.path.islink(p):
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
