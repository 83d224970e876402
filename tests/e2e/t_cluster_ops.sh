#!/usr/bin/env bash
# t_cluster_ops.sh - multi-node coherence, operation by operation (issue #3
# item 3): three nodes (a, b, c) of one image through a private shoal-lockd.
# Whatever a node did is what another node sees right after the call
# returned: data (small, large, overwrite in the middle, appends, through an
# open fd and through an mmap the reader already holds), names (create,
# unlink, rename in a directory, across directories, over a target,
# RENAME_EXCHANGE, link, symlink, mkdir, rmdir - seen by lookup, including a
# name the reader had looked up before, positive or negative, and by
# readdir, also while the reader's kernel is busy in that directory; a
# directory moved while the reader holds it open),
# attributes (chmod, chown, utimens, truncate, xattrs), statfs (agreeing
# within commit + 1 s, also after a node took back a resource group another
# node allocated in), unlink of a file another node holds open
# (data still readable, space back after close), concurrent allocation by
# all nodes (fsck clean: no block owned twice), fallocate ZERO_RANGE,
# RENAME_WHITEOUT and O_TMPFILE, lock counters (callbacks on
# the nodes that gave locks up; re-reading a cached file sends no lock
# request).  Ends with unmount and fsck.shoal -n clean.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

c_setup 3 2G
A=$(c_mnt a)
B=$(c_mnt b)
C=$(c_mnt c)
ref=$t_dir/ref
mkdir -p "$ref"

# xp 'CODE' ARGS: Python with A, B, C the three mountpoints and a = ARGS;
# CODE calls want(DESC, EXPECTED, GOT); prints OK or the mismatches.
xp() {
	local code=$1
	shift
	"$T_PY" -c "import os, sys, errno, stat, ctypes, mmap, time, hashlib
A, B, C = sys.argv[1:4]
a = sys.argv[4:]
fails = []
def want(desc, exp, got):
    if exp != got:
        e, g = repr(exp), repr(got)
        fails.append('%s: want %s got %s' % (desc, e[:120], g[:120]))
def rd(p):
    with open(p, 'rb') as f:
        return f.read()
def wr(p, d, mode='wb'):
    with open(p, mode) as f:
        f.write(d)
def try_(f, *x):
    try:
        f(*x)
        return 'OK'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def ex(p):
    return try_(os.lstat, p)
def ino(p):
    return os.lstat(p).st_ino
def xattr(p, n):
    try:
        return os.getxattr(p, n)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
$code
print('OK' if not fails else ' | '.join(fails)[:1500])" "$A" "$B" "$C" "$@"
}

# --- data --------------------------------------------------------------------------------

check_eq "small file: B and C read what A wrote, right after each write (20 rewrites, same size)" OK "$(xp '
wr(A + "/small", b"first\n")
want("B, first content", b"first\n", rd(B + "/small"))
for i in range(20):
    d = b"v%04d\n" % i
    wr(A + "/small", d)
    want("B after A write %d" % i, d, rd(B + "/small"))
    want("C after A write %d" % i, d, rd(C + "/small"))
')"

check_eq "small file: writes alternate between A and B, each reads the other's" OK "$(xp '
for i in range(20):
    w, r = (A, B) if i % 2 == 0 else (B, A)
    d = b"x%04d-%s\n" % (i, b"ab"[i % 2:i % 2 + 1])
    wr(w + "/ping", d)
    want("read after write %d" % i, d, rd(r + "/ping"))
')"

check_eq "overwrite in place (r+b, size unchanged) on A: B reads the new bytes" OK "$(xp '
wr(A + "/inplace", b"a" * 3000)
want("B initial", b"a" * 3000, rd(B + "/inplace"))
for i in range(10):
    with open(A + "/inplace", "r+b") as f:
        f.seek(100 * i)
        f.write(b"%d" % i * 50)
    exp = rd(A + "/inplace")
    want("B after in-place write %d" % i, exp, rd(B + "/inplace"))
    want("size on B", 3000, os.stat(B + "/inplace").st_size)
')"

check_eq "small fdatasync'ed overwrites on A (kept in A's dirty-block index): B reads each at once, then C writes one and A reads it" OK "$(xp '
import random
r = random.Random(7)
data = bytearray(r.randbytes(256 * 1024))
fd = os.open(A + "/dx", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, data); os.fsync(fd)
for i in range(30):
    off = r.randrange(len(data) - 2000); b = r.randbytes(r.randrange(1, 2000))
    os.pwrite(fd, b, off); data[off:off + len(b)] = b
    os.fdatasync(fd)
    if i % 5 == 4:
        want("B after %d small writes of A" % (i + 1), bytes(data), rd(B + "/dx"))
os.close(fd)
fd = os.open(C + "/dx", os.O_RDWR)
os.pwrite(fd, b"C" * 100, 5000); os.fdatasync(fd); os.close(fd)
data[5000:5100] = b"C" * 100
want("A after C wrote", bytes(data), rd(A + "/dx"))
want("B after C wrote", bytes(data), rd(B + "/dx"))
')"

head -c $((8 << 20)) /dev/urandom >"$ref/big"
cp "$ref/big" "$A/big"
check "8 MiB file written on A: B reads it byte for byte" cmp -s "$ref/big" "$B/big"
check "... and C" cmp -s "$ref/big" "$C/big"
printf 'OVERWRITTEN-IN-THE-MIDDLE-BY-A' | dd of="$ref/big" bs=1 seek=4000000 conv=notrunc status=none
printf 'OVERWRITTEN-IN-THE-MIDDLE-BY-A' | dd of="$A/big" bs=1 seek=4000000 conv=notrunc status=none
check "overwrite in the middle on A: B (which read the whole file before) reads the new bytes" cmp -s "$ref/big" "$B/big"
head -c 300000 /dev/urandom >"$t_dir/chunk"
dd if="$t_dir/chunk" of="$ref/big" bs=4096 seek=100 conv=notrunc status=none
dd if="$t_dir/chunk" of="$B/big" bs=4096 seek=100 conv=notrunc status=none
check "300 KB overwrite at 400 KiB on B: A reads it" cmp -s "$ref/big" "$A/big"
check "... and C" cmp -s "$ref/big" "$C/big"
# 1 MiB writes return once queued for the device (core/dev.c (5)): the
# other node must still read them at once, new blocks and overwrites.
check_eq "1 MiB writes on A (new blocks, then overwrites in place): B and C read each at once" OK "$(xp '
fd = os.open(os.path.join(A, "mib"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
for rnd in range(3):
    for i in range(4):
        d = bytes([(rnd * 16 + i * 3 + j) & 255 for j in range(256)]) * 4096
        os.pwrite(fd, d, i << 20)
        for n in (B, C):
            with open(os.path.join(n, "mib"), "rb") as f:
                f.seek(i << 20)
                want("round %d MiB %d via %s" % (rnd, i, n[-1]), d, f.read(1 << 20))
os.close(fd)')"
head -c $((3 << 20)) /dev/urandom >"$t_dir/chunk"
cat "$t_dir/chunk" >>"$ref/big"
cat "$t_dir/chunk" >>"$C/big"
check "3 MiB append on C: A reads the grown file" cmp -s "$ref/big" "$A/big"
check "... and B" cmp -s "$ref/big" "$B/big"
check_eq "its size on A and B" "$(stat -c %s "$ref/big") $(stat -c %s "$ref/big")" \
	"$(stat -c %s "$A/big") $(stat -c %s "$B/big")"

check_eq "appends alternating A, B, C (O_APPEND, 1000 B each): the next node reads the whole file" OK "$(xp '
nodes = [A, B, C]
exp = b""
wr(A + "/app", b"")
for i in range(30):
    d = bytes([65 + i % 26]) * 999 + b"\n"
    wr(nodes[i % 3] + "/app", d, "ab")
    exp += d
    r = nodes[(i + 1) % 3]
    want("read after append %d" % i, exp, rd(r + "/app"))
    want("size after append %d" % i, len(exp), os.stat(nodes[(i + 2) % 3] + "/app").st_size)
')"

check_eq "B keeps an fd open (pages cached): pread after each write of A returns the new bytes" OK "$(xp '
wr(A + "/held", bytes(64 * 1024))
fd = os.open(B + "/held", os.O_RDONLY)
want("B initial", bytes(64 * 1024), os.pread(fd, 64 * 1024, 0))
for i in range(8):
    off = 8192 * i + 1000
    d = b"held-%d-" % i * 20
    wr_fd = os.open(A + "/held", os.O_WRONLY)
    os.pwrite(wr_fd, d, off)
    os.close(wr_fd)
    want("B pread after A write %d" % i, d, os.pread(fd, len(d), off))
want("B whole file", rd(A + "/held"), os.pread(fd, 64 * 1024, 0))
os.close(fd)
')"

check_eq "B holds a read mmap of the file: after A's write, the mapping shows the new bytes" OK "$(xp '
wr(A + "/mm", b"." * 65536)
f = open(B + "/mm", "rb")
m = mmap.mmap(f.fileno(), 65536, prot=mmap.PROT_READ)
want("B mapping initial", b"." * 65536, m[:])
for i in range(8):
    off = 8192 * i + 17
    d = b"MMAP%d" % i * 10
    fd = os.open(A + "/mm", os.O_WRONLY)
    os.pwrite(fd, d, off)
    os.close(fd)
    want("B mapping after A write %d" % i, d, m[off:off + len(d)])
want("B mapping, whole", rd(A + "/mm"), m[:])
m.close()
f.close()
')"

check_eq "B writes through a shared mmap and msyncs: A and C read the bytes" OK "$(xp '
wr(A + "/mmw", b"-" * 32768)
want("B read", b"-" * 32768, rd(B + "/mmw"))
fd = os.open(B + "/mmw", os.O_RDWR)
m = mmap.mmap(fd, 32768)
for i in range(4):
    off = 4096 * 2 * i + 5
    d = b"MW%d" % i * 8
    m[off:off + len(d)] = d
    m.flush()
    want("A after B msync %d" % i, d, rd(A + "/mmw")[off:off + len(d)])
    want("C after B msync %d" % i, d, rd(C + "/mmw")[off:off + len(d)])
m.close()
os.close(fd)
')"

# --- names -------------------------------------------------------------------------------

mkdir "$A/d1" "$A/d2"
check_eq "create on A of a name B failed to look up (negative): B sees it by lookup and readdir" OK "$(xp '
for i in range(10):
    n = "/d1/neg%d" % i
    want("B lookup before", "ENOENT", ex(B + n))
    want("B open before", "ENOENT", try_(open, B + n, "rb"))
    want("B readdir before", False, ("neg%d" % i) in os.listdir(B + "/d1"))
    wr(A + n, b"created %d\n" % i)
    want("B lookup after create %d" % i, "OK", ex(B + n))
    want("B content %d" % i, b"created %d\n" % i, rd(B + n))
    want("B readdir after create %d" % i, True, ("neg%d" % i) in os.listdir(B + "/d1"))
    want("C readdir after create %d" % i, True, ("neg%d" % i) in os.listdir(C + "/d1"))
')"

check_eq "unlink on A of a name B looked up (positive): B gets ENOENT by lookup, open and readdir" OK "$(xp '
for i in range(10):
    n = "/d1/neg%d" % i
    want("B content before", b"created %d\n" % i, rd(B + n))
    os.unlink(A + n)
    want("B lookup after unlink %d" % i, "ENOENT", ex(B + n))
    want("B open after unlink %d" % i, "ENOENT", try_(open, B + n, "rb"))
    want("B readdir after unlink %d" % i, False, ("neg%d" % i) in os.listdir(B + "/d1"))
    want("C lookup after unlink %d" % i, "ENOENT", ex(C + n))
want("B readdir d1 at the end", [], os.listdir(B + "/d1"))
')"

check_eq "create on B, unlink on A, create again on C: every node sees each step" OK "$(xp '
for i in range(6):
    wr(B + "/d1/cyc", b"B%d" % i)
    want("A sees B create", b"B%d" % i, rd(A + "/d1/cyc"))
    os.unlink(A + "/d1/cyc")
    want("B lookup after A unlink", "ENOENT", ex(B + "/d1/cyc"))
    want("C lookup after A unlink", "ENOENT", ex(C + "/d1/cyc"))
    wr(C + "/d1/cyc", b"C%d" % i)
    want("B sees C create", b"C%d" % i, rd(B + "/d1/cyc"))
    want("A sees C create", b"C%d" % i, rd(A + "/d1/cyc"))
    os.unlink(B + "/d1/cyc")
    want("A after B unlink", "ENOENT", ex(A + "/d1/cyc"))
')"

check_eq "rename in one directory on A: B sees the old name gone, the new one (same inode, data)" OK "$(xp '
wr(A + "/d1/r-old", b"rename me")
i0 = ino(A + "/d1/r-old")
want("B old before", b"rename me", rd(B + "/d1/r-old"))
want("B new before (negative)", "ENOENT", ex(B + "/d1/r-new"))
os.rename(A + "/d1/r-old", A + "/d1/r-new")
want("B old after", "ENOENT", ex(B + "/d1/r-old"))
want("B new after", "OK", ex(B + "/d1/r-new"))
want("B new inode", i0, ino(B + "/d1/r-new"))
want("B new data", b"rename me", rd(B + "/d1/r-new"))
want("B readdir", ["r-new"], sorted(os.listdir(B + "/d1")))
want("C readdir", ["r-new"], sorted(os.listdir(C + "/d1")))
')"

check_eq "rename across directories on A: B readdir of both and lookups follow" OK "$(xp '
want("B d1 before", ["r-new"], sorted(os.listdir(B + "/d1")))
want("B d2 before", [], sorted(os.listdir(B + "/d2")))
want("B target before", "ENOENT", ex(B + "/d2/moved"))
os.rename(A + "/d1/r-new", A + "/d2/moved")
want("B d1 after", [], sorted(os.listdir(B + "/d1")))
want("B d2 after", ["moved"], sorted(os.listdir(B + "/d2")))
want("B old", "ENOENT", ex(B + "/d1/r-new"))
want("B new data", b"rename me", rd(B + "/d2/moved"))
os.rename(B + "/d2/moved", B + "/d1/back")
want("A sees B move back", b"rename me", rd(A + "/d1/back"))
want("A d2", [], os.listdir(A + "/d2"))
')"

check_eq "rename over an existing target on A: B (which read the target) reads the source's data" OK "$(xp '
wr(A + "/d1/src", b"source data")
wr(A + "/d2/tgt", b"old target data")
si = ino(A + "/d1/src")
want("B target before", b"old target data", rd(B + "/d2/tgt"))
want("B source before", b"source data", rd(B + "/d1/src"))
fd = os.open(B + "/d2/tgt", os.O_RDONLY)
os.rename(A + "/d1/src", A + "/d2/tgt")
want("B target after", b"source data", rd(B + "/d2/tgt"))
want("B target inode", si, ino(B + "/d2/tgt"))
want("B source gone", "ENOENT", ex(B + "/d1/src"))
want("B old target still readable by fd", b"old target data", os.pread(fd, 100, 0))
want("B old target nlink 0", 0, os.fstat(fd).st_nlink)
os.close(fd)
want("C target", b"source data", rd(C + "/d2/tgt"))
')"

check_eq "RENAME_EXCHANGE (renameat2) on A: B reads the two names swapped" OK "$(xp '
libc = ctypes.CDLL(None, use_errno=True)
def exch(p, q):
    if libc.renameat2(-100, p.encode(), -100, q.encode(), 2) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
wr(A + "/d1/x1", b"one")
wr(A + "/d2/x2", b"two-two")
i1, i2 = ino(A + "/d1/x1"), ino(A + "/d2/x2")
want("B x1", b"one", rd(B + "/d1/x1"))
want("B x2", b"two-two", rd(B + "/d2/x2"))
for k in range(4):
    exch(A + "/d1/x1", A + "/d2/x2")
    i1, i2 = i2, i1
    want("B x1 inode after exchange %d" % k, i1, ino(B + "/d1/x1"))
    want("B x2 inode after exchange %d" % k, i2, ino(B + "/d2/x2"))
    want("B x1 data after exchange %d" % k, [b"one", b"two-two"][(k + 1) % 2], rd(B + "/d1/x1"))
    want("B x2 data after exchange %d" % k, [b"one", b"two-two"][k % 2], rd(B + "/d2/x2"))
    want("C x1 size after exchange %d" % k, [3, 7][(k + 1) % 2], os.stat(C + "/d1/x1").st_size)
')"

check_eq "link on A: B sees the new name (negative before) and nlink 2, then 1 after unlink on C" OK "$(xp '
wr(A + "/d1/lf", b"linked")
want("B nlink before", 1, os.stat(B + "/d1/lf").st_nlink)
want("B new name before", "ENOENT", ex(B + "/d2/lg"))
os.link(A + "/d1/lf", A + "/d2/lg")
want("B new name after", "OK", ex(B + "/d2/lg"))
want("B same inode", ino(B + "/d1/lf"), ino(B + "/d2/lg"))
want("B nlink after", 2, os.stat(B + "/d1/lf").st_nlink)
want("B data via link", b"linked", rd(B + "/d2/lg"))
os.unlink(C + "/d2/lg")
want("B nlink after C unlink", 1, os.stat(B + "/d1/lf").st_nlink)
want("A name gone", "ENOENT", ex(A + "/d2/lg"))
')"

check_eq "symlink on A: B (negative before) reads the link and through it" OK "$(xp '
want("B before", "ENOENT", ex(B + "/d2/sl"))
os.symlink("../d1/lf", A + "/d2/sl")
want("B readlink", "../d1/lf", os.readlink(B + "/d2/sl"))
want("B lstat is a link", True, stat.S_ISLNK(os.lstat(B + "/d2/sl").st_mode))
want("B reads through", b"linked", rd(B + "/d2/sl"))
os.unlink(A + "/d2/sl")
os.symlink("../d1/back", A + "/d2/sl")
want("B readlink after A replaced the link", "../d1/back", os.readlink(B + "/d2/sl"))
want("B reads through the new link", b"rename me", rd(B + "/d2/sl"))
')"

check_eq "mkdir on A: B (negative before) sees a directory, creates in it, A lists it" OK "$(xp '
want("B before", "ENOENT", ex(B + "/d1/sub"))
n0 = os.stat(B + "/d1").st_nlink
os.mkdir(A + "/d1/sub")
want("B isdir", True, stat.S_ISDIR(os.stat(B + "/d1/sub").st_mode))
want("B parent nlink + 1", n0 + 1, os.stat(B + "/d1").st_nlink)
want("B readdir parent", True, "sub" in os.listdir(B + "/d1"))
wr(B + "/d1/sub/inner", b"made on B")
want("A readdir sub", ["inner"], os.listdir(A + "/d1/sub"))
want("C reads", b"made on B", rd(C + "/d1/sub/inner"))
os.rename(A + "/d1/sub", A + "/d2/sub2")
want("B reads via the moved directory", b"made on B", rd(B + "/d2/sub2/inner"))
want("B old dir path", "ENOENT", ex(B + "/d1/sub/inner"))
want("B d1 nlink back", n0, os.stat(B + "/d1").st_nlink)
')"

# A directory another node moved while this node's kernel still holds it
# under its old name (an open fd keeps that dentry): a lookup of the new
# name must not make the kernel move the old dentry under trylocks (ESTALE
# from d_splice_alias; a cross-directory rename holds the rename mutex the
# move needs, so it failed every time).
check_eq "a directory A moved while B holds it open: B's rename onto the new name says EISDIR, not ESTALE; B lists it there and through its fd" OK "$(xp '
os.mkdir(A + "/d1/held")
wr(A + "/d1/held/f", b"held")
fd = os.open(B + "/d1/held", os.O_RDONLY | os.O_DIRECTORY)
os.rename(A + "/d1/held", A + "/d2/held2")
wr(B + "/d1/onto", b"")
want("B rename across directories onto it", "EISDIR", try_(os.rename, B + "/d1/onto", B + "/d2/held2"))
wr(B + "/d2/onto2", b"")
want("B rename in the same directory onto it", "EISDIR", try_(os.rename, B + "/d2/onto2", B + "/d2/held2"))
want("B lists it under the new name", ["f"], os.listdir(B + "/d2/held2"))
want("B reads in it", b"held", rd(B + "/d2/held2/f"))
want("B same inode", ino(A + "/d2/held2"), ino(B + "/d2/held2"))
want("B old name", "ENOENT", ex(B + "/d1/held"))
want("B lists through the fd it held", ["f"], os.listdir(fd))
want("B reads through the fd it held", b"held", (lambda g: (os.read(g, 10), os.close(g))[0])(os.open("f", os.O_RDONLY, dir_fd=fd)))
os.close(fd)
os.rename(B + "/d2/held2", B + "/d1/held")
want("A sees B move it back", b"held", rd(A + "/d1/held/f"))
for p in ("/d1/onto", "/d2/onto2", "/d1/held/f"):
    os.unlink(A + p)
os.rmdir(A + "/d1/held")
want("B after A rmdir", "ENOENT", ex(B + "/d1/held"))
')"

check_eq "rmdir on A: B (which listed the directory) gets ENOENT, can mkdir the name again" OK "$(xp '
os.unlink(A + "/d2/sub2/inner")
want("B lists the empty dir", [], os.listdir(B + "/d2/sub2"))
want("B rmdir of a non-empty dir while A adds a file", "ENOTEMPTY", (wr(A + "/d2/sub2/f", b"") , try_(os.rmdir, B + "/d2/sub2"))[1])
os.unlink(A + "/d2/sub2/f")
os.rmdir(A + "/d2/sub2")
want("B lookup", "ENOENT", ex(B + "/d2/sub2"))
want("B listdir", "ENOENT", try_(os.listdir, B + "/d2/sub2"))
want("B readdir parent", False, "sub2" in os.listdir(B + "/d2"))
os.mkdir(B + "/d2/sub2")
want("A sees B mkdir", True, stat.S_ISDIR(os.stat(A + "/d2/sub2").st_mode))
os.rmdir(C + "/d2/sub2")
want("A after C rmdir", "ENOENT", ex(A + "/d2/sub2"))
')"

# The same while B's kernel is busy in that directory (a loop on B creating
# and removing other names there holds the directory's lock often): what A
# did must still be what B sees right after A's call returned.
mkdir "$A/busy" "$A/busytmp"
"$T_PY" -c '
import os, sys, time
d = sys.argv[1]
end = time.monotonic() + 60
i = 0
while time.monotonic() < end:
    p = "%s/b%d" % (d, i % 5)
    i += 1
    try:
        open(p, "w").close()
        os.unlink(p)
    except OSError:
        pass' "$B/busy" &
busy_pid=$!
check_eq "B busy in the directory: names A creates (rename into it), replaces and removes are seen by B at once (20 s)" OK "$(xp '
bad = []
t0 = time.monotonic()
i = 0
while time.monotonic() - t0 < 20:
    n = "/busy/x%d" % i
    want("B negative before %d" % i, "ENOENT", ex(B + n))
    wr(A + "/busytmp/t", b"%d" % i)
    os.rename(A + "/busytmp/t", A + n)
    if ex(B + n) != "OK":
        bad.append("%d: ENOENT right after the rename" % i)
    if i % 2:
        os.mkdir(A + "/busytmp/dir")
        di = ino(A + "/busytmp/dir")
        os.rename(A + "/busytmp/dir", A + n + "d")
        try_(os.stat, B + n + "d")
        os.unlink(A + n)
        os.rename(A + n + "d", A + n)
        r = try_(os.lstat, B + n)
        if r == "OK" and os.lstat(B + n).st_ino != di:
            r = "old inode"
        if r != "OK":
            bad.append("%d: after A moved a directory to the removed name: %s" % (i, r))
        os.rmdir(A + n)
    else:
        os.unlink(A + n)
    if ex(B + n) != "ENOENT":
        bad.append("%d: still there right after the unlink/rmdir" % i)
    i += 1
want("rounds (of %d) where B saw an old name" % i, [], bad[:6])
')"
kill "$busy_pid" 2>/dev/null || true
wait "$busy_pid" || true

# --- attributes --------------------------------------------------------------------------

check_eq "chmod, chown, utimens on A: B stat shows each at once; ctime moves" OK "$(xp '
p = "/d1/attr"
wr(A + p, b"attrs")
st = os.stat(B + p)
for i, mode in enumerate([0o751, 0o600, 0o4755, 0o644]):
    c0 = os.stat(B + p).st_ctime_ns
    time.sleep(0.002)
    os.chmod(A + p, mode)
    want("B mode after chmod %o" % mode, mode, stat.S_IMODE(os.stat(B + p).st_mode))
    want("C mode after chmod %o" % mode, mode, stat.S_IMODE(os.stat(C + p).st_mode))
    want("B ctime moved after chmod %o" % mode, True, os.stat(B + p).st_ctime_ns > c0)
for uid, gid in [(1234, 5678), (0, 42), (0, 0)]:
    os.chown(A + p, uid, gid)
    s = os.stat(B + p)
    want("B owner after chown %d:%d" % (uid, gid), (uid, gid), (s.st_uid, s.st_gid))
for at, mt in [(1000000001234567891, 1100000000987654321), (5, 7), (1700000000000000001, 1700000000000000002)]:
    os.utime(A + p, ns=(at, mt))
    s = os.stat(B + p)
    want("B times after utimens", (at, mt), (s.st_atime_ns, s.st_mtime_ns))
os.utime(B + p)
want("A mtime after B utime(now)", os.stat(B + p).st_mtime_ns, os.stat(A + p).st_mtime_ns)
')"

check_eq "a file capability set on B is dropped by a write on A, whose kernel checked the file before" OK "$(xp '
import struct
p = "/d1/capx"
wr(A + p, b"x")
with open(A + p, "ab") as f:
    f.write(b"y") # A kernel: no set-ID bits, no capability: it stops asking (SB_NOSEC)
os.setxattr(B + p, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0))
want("A sees the capability", True, "security.capability" in os.listxattr(A + p))
with open(A + p, "ab") as f:
    f.write(b"z")
want("B: capability gone after the write on A", False, "security.capability" in os.listxattr(B + p))
want("A: capability gone", False, "security.capability" in os.listxattr(A + p))
os.chmod(B + p, 0o4777)
with open(A + p, "r+b") as f:
    f.truncate(1)
want("C: data after the truncate on A", b"x", open(C + p, "rb").read())
want("A: a truncate by root keeps setuid", 0o4777, stat.S_IMODE(os.stat(A + p).st_mode))
')"

check_eq "mtime and size after a write on A: B stat agrees with A" OK "$(xp '
p = "/d1/mt"
wr(A + p, b"1")
for i in range(5):
    os.stat(B + p)
    time.sleep(0.01)
    wr(A + p, b"z" * (i + 2), "ab")
    sa, sb = os.stat(A + p), os.stat(B + p)
    want("size %d" % i, sa.st_size, sb.st_size)
    want("mtime %d" % i, sa.st_mtime_ns, sb.st_mtime_ns)
    want("ctime %d" % i, sa.st_ctime_ns, sb.st_ctime_ns)
')"

check_eq "truncate on A (shrink, then grow): B (pages cached, fd open) sees size and content" OK "$(xp '
p = "/d1/tr"
data = os.urandom(100000)
wr(A + p, data)
want("B before", data, rd(B + p))
fd = os.open(B + p, os.O_RDONLY)
os.truncate(A + p, 1000)
want("B size after shrink", 1000, os.stat(B + p).st_size)
want("B fstat size after shrink", 1000, os.fstat(fd).st_size)
want("B content after shrink", data[:1000], rd(B + p))
want("B pread past the end", b"", os.pread(fd, 100, 5000))
os.truncate(A + p, 50000)
want("B size after grow", 50000, os.stat(B + p).st_size)
want("B content after grow", data[:1000] + bytes(49000), rd(B + p))
want("B pread in the grown part", bytes(100), os.pread(fd, 100, 20000))
os.close(fd)
with open(B + p, "r+b") as f:
    f.truncate(7)
want("A after B ftruncate", data[:7], rd(A + p))
os.truncate(C + p, 0)
want("A after C truncate 0", b"", rd(A + p))
want("B after C truncate 0", 0, os.stat(B + p).st_size)
')"

check_eq "setxattr/removexattr on A: B getxattr/listxattr follow (absent, set, replaced, removed)" OK "$(xp '
p = "/d1/xa"
wr(A + p, b"x")
want("B absent before", "ENODATA", xattr(B + p, "user.k"))
for i in range(5):
    v = b"value-%d" % i
    os.setxattr(A + p, "user.k", v)
    want("B after set %d" % i, v, xattr(B + p, "user.k"))
want("B list", ["user.k"], sorted(os.listxattr(B + p)))
big = os.urandom(2000)
os.setxattr(A + p, "user.big", big)
want("B big value", big, xattr(B + p, "user.big"))
want("C list", ["user.big", "user.k"], sorted(os.listxattr(C + p)))
os.removexattr(A + p, "user.k")
want("B after remove", "ENODATA", xattr(B + p, "user.k"))
want("B list after remove", ["user.big"], sorted(os.listxattr(B + p)))
os.setxattr(B + p, "user.fromb", b"b")
want("A sees B set", b"b", xattr(A + p, "user.fromb"))
os.removexattr(C + p, "user.big")
want("A list after C remove", ["user.fromb"], sorted(os.listxattr(A + p)))
')"

# --- statfs ------------------------------------------------------------------------------

# A node counts the groups it holds from memory and reads the others' group
# headers from the device at most once a second; a node writes its journal
# home after every commit (commit=5 by default), so another node's
# allocations show within commit + 1 = 6 s (docs/LOCKING.md "statfs").
# Observed: 5.1 s.  Allowed here: STATFS_WAIT = 8 s.
STATFS_WAIT=8

# statfs_agree MAXSEC [NODES...]: poll statvfs on the nodes until every node
# reports the same free blocks; prints "SECONDS BFREE" or "TIMEOUT ...".
# statfs_agree SECONDS [MAX_FREE] MNT...: wait until every node reports the
# same free blocks (at most MAX_FREE, with STATFS_AT_MOST=MAX_FREE: a node
# may answer statfs from what it read up to a second ago).
statfs_agree() {
	"$T_PY" -c '
import os, sys, time
maxs = float(sys.argv[1])
most = int(os.environ.get("STATFS_AT_MOST", "-1"))
t0 = time.monotonic()
while True:
    v = [os.statvfs(m).f_bfree for m in sys.argv[2:]]
    if len(set(v)) == 1 and (most < 0 or v[0] <= most):
        print("%.2f %d" % (time.monotonic() - t0, v[0])); break
    if time.monotonic() - t0 > maxs:
        print("TIMEOUT", *v); break
    time.sleep(0.05)' "$@"
}
bsize=$("$T_PY" -c 'import os, sys; print(os.statvfs(sys.argv[1]).f_bsize)' "$A")
# B allocates (takes resource groups), A allocates in one of them, then B
# takes that group back for an unlink that frees nothing.
mkdir "$A/sf"
echo f >"$A/sf/f"
head -c $((1 << 20)) /dev/zero >"$B/sf/big"
echo x >"$A/sf/l1"
ln "$A/sf/l1" "$A/sf/l2"
rm "$B/sf/l2"
r=$(statfs_agree $STATFS_WAIT "$A" "$B" "$C")
check "statfs: a, b and c agree after B took back a group A allocated in (waited ${r% *} s)" test "${r%% *}" != TIMEOUT
r=$(statfs_agree $STATFS_WAIT "$A" "$B" "$C")
check "statfs free blocks agree on a, b and c before the statfs test (waited ${r%% *} s)" test "${r%% *}" != TIMEOUT
free0=${r##* }
head -c $((64 << 20)) /dev/zero | tr '\0' 'q' >"$A/space"
r=$(STATFS_AT_MOST=$((free0 - (64 << 20) / bsize)) statfs_agree $STATFS_WAIT "$A" "$B" "$C")
echo "# statfs agreed on a, b, c ${r%% *} s after A wrote 64 MiB (free blocks ${r##* })"
check "statfs after A wrote 64 MiB: a, b and c agree within $STATFS_WAIT s and show the 64 MiB used (${r%% *} s; free $free0 -> ${r##* }, block $bsize)" \
	test "${r%% *}" != TIMEOUT
free1=${r##* }

# Unlink on A of a file B holds open.
sum=$(sha256sum <"$A/space" | cut -d' ' -f1)
coproc HOLD { "$T_PY" -u -c '
import os, sys, hashlib
fd = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
sys.stdin.readline()
h = hashlib.sha256()
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    h.update(b)
st = os.fstat(fd)
print(h.hexdigest(), st.st_nlink, st.st_size, flush=True)
sys.stdin.readline()
os.close(fd)
print("closed", flush=True)' "$B/space"; }
# (bash forgets HOLD and HOLD_PID once the coprocess exits: keep copies)
hold_pid=$HOLD_PID
exec {hold_out}<&"${HOLD[0]}" {hold_in}>&"${HOLD[1]}"
read -r line <&"$hold_out"
rm "$A/space"
check_eq "unlink on A of the file B holds open: the name is gone on B" ENOENT "$(t_try 'os.lstat(a[0])' "$B/space")"
check_eq "... and on C" ENOENT "$(t_try 'os.lstat(a[0])' "$C/space")"
echo >&"$hold_in"
read -r line <&"$hold_out"
check_eq "B still reads all the data through its fd (sha256, nlink 0, size)" "$sum 0 $((64 << 20))" "$line"
r=$(statfs_agree $STATFS_WAIT "$A" "$B" "$C")
check "while B holds it open, a, b and c agree the space is still in use ($r; free before the file $free0)" \
	test "${r%% *}" != TIMEOUT -a $((free0 - ${r##* })) -ge $(((60 << 20) / bsize))
echo >&"$hold_in"
read -r line <&"$hold_out"
wait "$hold_pid" || true
exec {hold_out}<&- {hold_in}>&-
r=$("$T_PY" -c '
import os, sys, time
want, maxs = int(sys.argv[1]), float(sys.argv[2])
t0 = time.monotonic()
while True:
    v = [os.statvfs(m).f_bfree for m in sys.argv[3:]]
    if len(set(v)) == 1 and v[0] >= want:
        print("%.2f" % (time.monotonic() - t0), *v); break
    if time.monotonic() - t0 > maxs:
        print("TIMEOUT", *v); break
    time.sleep(0.05)' $((free1 + (60 << 20) / bsize)) $STATFS_WAIT "$A" "$B" "$C")
echo "# after B closed the unlinked file, free blocks came back on a, b, c in ${r%% *} s: ${r#* }"
check "after B closed it: the 64 MiB came back on a, b and c within $STATFS_WAIT s (${r})" test "${r%% *}" != TIMEOUT
# That the inode itself is gone (not left as an unreferenced inode) is
# checked by fsck.shoal at the end.

# --- concurrent allocation ------------------------------------------------------------------

# Every node writes many files at once (in a shared directory and its own),
# content derived from the name so any node can check any file.
mkdir "$A/conc" "$A/conc_a" "$A/conc_b" "$A/conc_c"
writer='
import os, sys, hashlib, random
mnt, node, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(node)
for i in range(n):
    d = "conc" if i % 2 == 0 else "conc_" + node
    name = "%s/%s/%s%03d" % (mnt, d, node, i)
    size = rnd.choice([100, 3000, 5000, 40000, 200000, 1 << 20])
    blk = hashlib.sha256(name[len(mnt):].encode()).digest() * 32
    data = (blk * (size // len(blk) + 1))[:size]
    with open(name, "wb") as f:
        f.write(data)
    if i % 7 == 3:
        os.unlink("%s/%s/%s%03d" % (mnt, d, node, i - 2))
'
pids=()
for node in a b c; do
	timeout 120 "$T_PY" -c "$writer" "$(c_mnt $node)" "$node" 120 &
	pids+=($!)
done
rcs=""
for p in "${pids[@]}"; do
	rc=0
	wait "$p" || rc=$?
	rcs+="$rc "
done
check_eq "a, b and c each wrote 120 files at once (shared and own directories): all exit 0" "0 0 0 " "$rcs"
check_eq "every file reads back right on another node" OK "$("$T_PY" -c '
import os, sys, hashlib
mnts = {"a": sys.argv[1], "b": sys.argv[2], "c": sys.argv[3]}
other = {"a": "b", "b": "c", "c": "a"}
bad, seen = [], 0
for d in ["conc", "conc_a", "conc_b", "conc_c"]:
    names = sorted(os.listdir(mnts["a"] + "/" + d))
    for other_node in "bc":
        if sorted(os.listdir(mnts[other_node] + "/" + d)) != names:
            bad.append("listing of %s differs on %s" % (d, other_node))
    for n in names:
        rel = "/%s/%s" % (d, n)
        r = other[n[0]]
        data = open(mnts[r] + rel, "rb").read()
        blk = hashlib.sha256(rel.encode()).digest() * 32
        if data != (blk * (len(data) // len(blk) + 1))[:len(data)] or len(data) == 0:
            bad.append("%s on %s" % (rel, r))
        seen += 1
want = 3 * (120 - 120 // 7)
if seen != want:
    bad.append("%d files, want %d" % (seen, want))
print("OK" if not bad else " ".join(bad[:10]))' "$A" "$B" "$C")"

# --- lock counters ----------------------------------------------------------------------------

cb_a=$(c_stat a gl_callbacks)
cb_b=$(c_stat b gl_callbacks)
cb_c=$(c_stat c gl_callbacks)
echo "# gl_callbacks: a=$cb_a b=$cb_b c=$cb_c; gl_requests: a=$(c_stat a gl_requests) b=$(c_stat b gl_requests) c=$(c_stat c gl_requests)"
check "gl_callbacks > 0 on a, b and c (each gave locks up to the others): $cb_a $cb_b $cb_c" \
	test "${cb_a:-0}" -gt 0 -a "${cb_b:-0}" -gt 0 -a "${cb_c:-0}" -gt 0

# Cached glocks cost nothing: once c holds the glocks of a file it reads,
# reading it again sends no lock request.
head -c 200000 /dev/urandom >"$A/cached"
cat "$C/cached" >/dev/null
cat "$C/cached" >/dev/null
sleep 0.3
r0=$(c_stat c gl_requests)
for i in $(seq 10); do cat "$C/cached" >/dev/null; done
r1=$(c_stat c gl_requests)
check_eq "re-reading a file 10 times on a node that holds its glocks: gl_requests unchanged" "$r0" "$r1"
stat "$C/cached" >/dev/null
ls -l "$C" >/dev/null
sleep 0.3
r0=$(c_stat c gl_requests)
for i in $(seq 10); do stat "$C/cached" >/dev/null; ls -l "$C" >/dev/null; done
r1=$(c_stat c gl_requests)
check_eq "... and after one ls -l of the root, stat of the file and ls -l 10 times: gl_requests unchanged" "$r0" "$r1"

# --- fallocate ZERO_RANGE, RENAME_WHITEOUT, O_TMPFILE (issue 20.6) -------------------------

check_eq "ZERO_RANGE on one node: the other reads zeros at once (cached pages and a mapping it holds), both ways" OK "$(xp '
ZERO, KEEP = 0x10, 1
libc = ctypes.CDLL(None, use_errno=True)
def zr(fd, mode, off, ln):
    if libc.fallocate(fd, mode, ctypes.c_long(off), ctypes.c_long(ln)):
        raise OSError(ctypes.get_errno(), "fallocate")
data = bytes(range(256)) * 1024
wr(A + "/zr", data)
fa, fb = os.open(A + "/zr", os.O_RDWR), os.open(B + "/zr", os.O_RDWR)
mb = mmap.mmap(fb, len(data))
want("B before", data, rd(B + "/zr"))
zr(fa, ZERO, 4096 + 7, 3 * 4096)
exp = bytearray(data)
exp[4096 + 7:4 * 4096 + 7] = bytes(3 * 4096)
want("B read after A zeroed", bytes(exp), rd(B + "/zr"))
want("B pread (open fd)", bytes(exp[4000:8000]), os.pread(fb, 4000, 4000))
want("B mapping", bytes(exp[4096:4 * 4096 + 100]), mb[4096:4 * 4096 + 100])
zr(fb, ZERO | KEEP, 100 * 1024, 50000)
exp[100 * 1024:100 * 1024 + 50000] = bytes(50000)
want("A after B zeroed with KEEP_SIZE", bytes(exp), rd(A + "/zr"))
zr(fa, ZERO, len(data) - 10, 10000)
exp[len(data) - 10:] = bytes(10000)
want("B size after A grew it by ZERO_RANGE", len(exp), os.stat(B + "/zr").st_size)
want("B fstat of its old fd", len(exp), os.fstat(fb).st_size)
want("B read", bytes(exp), rd(B + "/zr"))
mb.close(); os.close(fa); os.close(fb)
')"

check_eq "RENAME_WHITEOUT on one node: the other sees the whiteout under the old name, the file under the new, both ways" OK "$(xp '
libc = ctypes.CDLL(None, use_errno=True)
def rn(src, dst, fl):
    if libc.renameat2(-100, src.encode(), -100, dst.encode(), fl):
        raise OSError(ctypes.get_errno(), "renameat2")
def kind(p):
    st = os.lstat(p)
    return "chr %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else "other"
wr(A + "/wh1", b"one")
os.mkdir(A + "/whd")
want("B sees wh1 first", b"one", rd(B + "/wh1"))
want("B sees whd first", "OK", ex(B + "/whd"))
rn(A + "/wh1", A + "/wh1b", 4)
want("B: the old name is a whiteout", "chr 0:0", kind(B + "/wh1"))
want("B: the new name has the data", b"one", rd(B + "/wh1b"))
rn(B + "/whd", B + "/whd2", 4 | 1)
want("A: whiteout of a directory (with NOREPLACE)", "chr 0:0", kind(A + "/whd"))
want("A: the directory under its new name", True, stat.S_ISDIR(os.lstat(A + "/whd2").st_mode))
want("C too", "chr 0:0", kind(C + "/whd"))
')"

check_eq "O_TMPFILE on one node, linkat names it: the other reads it at once; an unnamed one is seen nowhere" OK "$(xp '
libc = ctypes.CDLL(None, use_errno=True)
def linkfd(fd, dst):
    if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, dst.encode(), 0x400):
        raise OSError(ctypes.get_errno(), "linkat")
os.mkdir(A + "/tmpd")
names = sorted(os.listdir(B + "/tmpd"))
fd = os.open(A + "/tmpd", os.O_TMPFILE | os.O_RDWR, 0o644)
os.write(fd, b"made on A" * 1000)
want("B lists nothing new while it has no name", names, sorted(os.listdir(B + "/tmpd")))
linkfd(fd, A + "/tmpd/named")
want("B reads the linked file", b"made on A" * 1000, rd(B + "/tmpd/named"))
want("B: one link", 1, os.stat(B + "/tmpd/named").st_nlink)
os.write(fd, b"+more")
want("B reads a write through the tmpfile fd", b"made on A" * 1000 + b"+more", rd(B + "/tmpd/named"))
os.close(fd)
fd = os.open(B + "/tmpd", os.O_TMPFILE | os.O_RDWR, 0o644)
os.write(fd, b"b" * 100000)
want("A lists only the named one", ["named"], sorted(os.listdir(A + "/tmpd")))
os.close(fd)
')"

# --- the end ------------------------------------------------------------------------------

check_eq "no node fenced itself or failed (logs)" "" \
	"$(grep -hiE 'fenced|abort|assert|error|corrupt' "$t_dir"/[abc].log | head -5)"
check "shoal umount of a, b and c (each daemon exits 0)" c_umount_all
c_fsck_check
c_retry_check
[ "$t_failed" -eq 0 ] || c_logs
t_done
