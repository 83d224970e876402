#!/usr/bin/env python3
"""killrand_work.py - the load and the event-timed kills of
t_cluster_killrand.sh (issue 22: a dying daemon never leaves its users
hanging).

  killrand_work.py run ID SLOT ROOT LOG SEQ0 SEED
  killrand_work.py check ROOT LOG...
  killrand_work.py killon SECONDS FILTER NODE:MNT:PID...

run: one program of one node's load, for ever (until an error ends it).
ROOT is the node's mountpoint, or "." for a program whose working
directory is inside the mount.  Operations, at random:
  - a 4 KiB write of this program's region (offset SLOT * 4096) of one of
    the shared files ROOT/shared/s0..s3, which every node writes (each its
    own regions) and reads, then fsync (the inode glocks move between
    nodes at every turn: demotions with write-back and invalidation);
  - a read of a whole shared file (a reader's SH lock takes the writers'
    EX away);
  - a file ROOT/shared/d/ID-SEQ made in the shared directory, written,
    fsync'ed with its directory; or one of its own removed, the directory
    fsync'ed.
Sequence numbers start at SEQ0 (each life of a program starts higher than
the last).  LOG (outside the mount, one line per event, flushed at once):
  W PATH SLOT SEQ    a region write begins      A PATH SLOT SEQ  fsync'ed
  C PATH SEQ         a file is made             F PATH SEQ       fsync'ed
  U PATH             a file is removed          G PATH           fsync'ed
  R PATH             a shared file was read
  E ERRNO OP         the error that ended the program
The exit status is 3 when the error is ENOTCONN, ECONNABORTED or EIO (the
mount went away: what the test expects of a killed node's programs), 1
otherwise.

check: every acknowledged event of the logs against the tree at ROOT:
a region holds the version of its last acknowledged write or of a later
write that began (never an older one, never a torn one), a file whose
creation was acknowledged is there with its contents unless its removal
began, one whose removal was acknowledged is gone unless it was made
again.  One line per problem; exit 1 if any.

killon: start `shoal trace MNT FILTER` on every node given, and as soon
as one of them prints an event, SIGKILL that node's daemon PID.  Prints
"ready" once every trace is subscribed, then "NODE KILL_NS EVENT" (KILL_NS: CLOCK_REALTIME of the kill, as `date
+%s%N`); exit 0; exit 1 ("timeout") when no event came within SECONDS.
"""
import errno
import os
import random
import select
import signal
import subprocess
import sys
import time

REGION = 4096
NFILES = 4
# How a program learns that its mount's daemon died: a request the kernel
# had already sent when the connection was aborted fails with ECONNABORTED
# (fs/fuse/dev.c, fuse_abort_conn), every later one with ENOTCONN; EIO is
# what the issue allows too.
GONE = (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO)


def region(slot, seq):
    head = ("slot %d seq %d |" % (slot, seq)).encode()
    return (head * (REGION // len(head) + 1))[:REGION]


def file_data(path, seq):
    return ("%s %d\n" % (os.path.basename(path), seq)).encode() * (1 + seq % 97)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run(wid, slot, root, logpath, seq, seed):
    rnd = random.Random(seed)
    log = open(logpath, "a", buffering=1)
    shared = os.path.join(root, "shared")
    sdir = os.path.join(shared, "d")
    mine = []  # files of ours that are there
    op = "start"
    try:
        while True:
            seq += 1
            r = rnd.random()
            if r < 0.45:
                op = "write"
                p = os.path.join(shared, "s%d" % rnd.randrange(NFILES))
                log.write("W %s %d %d\n" % (p, slot, seq))
                fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    os.pwrite(fd, region(slot, seq), slot * REGION)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                log.write("A %s %d %d\n" % (p, slot, seq))
            elif r < 0.75:
                op = "read"
                p = os.path.join(shared, "s%d" % rnd.randrange(NFILES))
                try:
                    with open(p, "rb") as f:
                        while f.read(1 << 16):
                            pass
                except FileNotFoundError:
                    pass  # nobody wrote it yet
                log.write("R %s\n" % p)
            elif r < 0.92 or not mine:
                op = "create"
                p = os.path.join(sdir, "%s-%d" % (wid, seq))
                log.write("C %s %d\n" % (p, seq))
                with open(p, "wb") as f:
                    f.write(file_data(p, seq))
                    f.flush()
                    os.fsync(f.fileno())
                fsync_dir(sdir)
                log.write("F %s %d\n" % (p, seq))
                mine.append(p)
            else:
                op = "unlink"
                p = mine.pop(rnd.randrange(len(mine)))
                log.write("U %s\n" % p)
                os.unlink(p)
                fsync_dir(sdir)
                log.write("G %s\n" % p)
            if len(mine) > 40:
                p = mine.pop(0)
                op = "unlink"
                log.write("U %s\n" % p)
                os.unlink(p)
                fsync_dir(sdir)
                log.write("G %s\n" % p)
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno))
        log.write("E %s %s %s\n" % (name, op, e.filename))
        log.close()
        return 3 if e.errno in GONE else 1


def relpath(p, root):
    """A logged path, relative to the mount (programs log absolute paths
    of their node's mountpoint, or paths relative to it)."""
    i = p.find("/shared/")
    if p.startswith("shared/"):
        return p
    return p[i + 1:] if i >= 0 else p


def check(root, logs):
    regions = {}  # (rel, slot) -> [acked seq, set of begun seqs]
    files = {}    # rel -> "F" seq | "G" | None (unknown)
    acks = 0
    for lp in logs:
        with open(lp) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                w = line.split()
                if w[0] in ("W", "A"):
                    key = (relpath(w[1], root), int(w[2]))
                    st = regions.setdefault(key, [-1, set()])
                    if w[0] == "W":
                        st[1].add(int(w[3]))
                    else:
                        st[0] = max(st[0], int(w[3]))
                        acks += 1
                elif w[0] == "C":
                    files[relpath(w[1], root)] = None
                elif w[0] == "F":
                    files[relpath(w[1], root)] = int(w[2])
                    acks += 1
                elif w[0] == "U":
                    files[relpath(w[1], root)] = None
                elif w[0] == "G":
                    files[relpath(w[1], root)] = "G"
                    acks += 1
    bad = []
    for (rel, slot), (acked, begun) in sorted(regions.items()):
        p = os.path.join(root, rel)
        try:
            with open(p, "rb") as f:
                f.seek(slot * REGION)
                got = f.read(REGION)
        except OSError as e:
            bad.append("%s: %s" % (p, e.strerror))
            continue
        if got == bytes(len(got)):
            if acked >= 0:
                bad.append("%s slot %d: zeros, acknowledged seq %d" % (rel, slot, acked))
            continue
        try:
            seq = int(got.split(b"|")[0].split()[3])
        except (IndexError, ValueError):
            seq = None
        if seq is None or got != region(slot, seq):
            bad.append("%s slot %d: not a whole version (%r...)" % (rel, slot, got[:24]))
        elif seq < acked:
            bad.append("%s slot %d: seq %d, older than the acknowledged %d" %
                       (rel, slot, seq, acked))
        elif seq not in begun:
            bad.append("%s slot %d: seq %d was never written" % (rel, slot, seq))
    for rel, want in sorted(files.items()):
        if want is None:
            continue
        p = os.path.join(root, rel)
        if want == "G":
            if os.path.lexists(p):
                bad.append("%s: removal acknowledged, but it is there" % rel)
            continue
        try:
            with open(p, "rb") as f:
                got = f.read()
        except OSError as e:
            bad.append("%s: acknowledged, but %s" % (rel, e.strerror))
            continue
        if got != file_data(p, want):
            bad.append("%s: %d bytes, not the acknowledged contents" % (rel, len(got)))
    for line in bad[:20]:
        print(line)
    print("# %d acknowledged events, %d regions, %d files, %d problems" %
          (acks, len(regions), len(files), len(bad)))
    return 1 if bad else 0


def killon(seconds, filt, shoal, specs):
    procs = {}
    for spec in specs:
        node, mnt, pid = spec.split(":")
        p = subprocess.Popen([shoal, "trace", mnt, filt], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, bufsize=0)
        # node, daemon pid, trace, unread output, its last error line
        procs[p.stdout.fileno()] = [node, int(pid), p, b"", b""]
    end = time.monotonic() + seconds
    hit = None
    waiting = len(procs)  # traces not subscribed yet
    try:
        while hit is None:
            left = end - time.monotonic()
            if left <= 0 or not procs:
                break
            ready, _, _ = select.select(list(procs), [], [], left)
            for fd in ready:
                st = procs[fd]
                chunk = os.read(fd, 65536)
                if not chunk:  # that trace ended (its mount went away)
                    if waiting:
                        print("trace of %s ended before it started: %s" %
                              (st[0], (st[4] + st[3]).decode(errors="replace").strip()),
                              flush=True)
                    del procs[fd]
                    continue
                st[3] += chunk
                while b"\n" in st[3]:
                    line, st[3] = st[3].split(b"\n", 1)
                    if line.startswith(b"# tracing"):
                        waiting -= 1
                        if not waiting:
                            print("ready", flush=True)
                        continue
                    if line.startswith(b"shoal:"):
                        st[4] = line + b" "
                        continue
                    if line.startswith(b"#"):
                        continue
                    if hit is None:
                        os.kill(st[1], signal.SIGKILL)
                        hit = "%s %d %s" % (st[0], time.time_ns(), line.decode())
                    break
                if hit:
                    break
    finally:
        for st in procs.values():
            st[2].kill()
            st[2].wait()
    print(hit or "timeout")
    return 0 if hit else 1


def main():
    a = sys.argv[1:]
    if len(a) == 7 and a[0] == "run":
        sys.exit(run(a[1], int(a[2]), a[3], a[4], int(a[5]), int(a[6])))
    if len(a) >= 3 and a[0] == "check":
        sys.exit(check(a[1], a[2:]))
    if len(a) >= 4 and a[0] == "killon":
        sys.exit(killon(float(a[1]), a[2], os.environ.get("SHOAL", "shoal"), a[3:]))
    sys.stderr.write(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main()
