#!/usr/bin/env bash
# t_cluster_append.sh - O_APPEND writes land at the cluster-wide end of file
# (issue 20, defect 2).  A node's kernel keeps the size it last saw until
# something makes it ask again (FUSE_NOTIFY_INVAL_INODE only marks it
# stale), and an O_APPEND write(2) takes its position from that size
# without asking.  shoal-mount appends at the end of file it finds under
# the inode's EX glock, whatever position the kernel sent (core/ops.c
# write_begin), and a cluster opens O_APPEND files for direct I/O, so the
# kernel never caches the appended bytes at the position it assumed
# (fuse/ops.c op_open).
#
# Before: node b, which opened the file before a wrote 10 bytes, appended
# its 5 bytes at 0 (bbbbbaaaaa); a 4096-byte append from b replaced a's
# first page and b's page cache kept it there; an append-only file
# (chattr +a) refused b's append with EPERM (the position was not the end).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

c_mkfs 256M 3
c_start_lockd
c_mount a
c_mount b
A=$(c_mnt a)
B=$(c_mnt b)

# the issue's one-liner: b's fd is opened before a writes
check_eq "an O_APPEND write from a node with an old size lands at the end" \
	"b'aaaaaaaaaabbbbb'" "$(py '
fa = os.open(a[0] + "/g", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
fb = os.open(a[1] + "/g", os.O_WRONLY | os.O_APPEND)
os.write(fa, b"a" * 10)
os.write(fb, b"b" * 5)
print(open(a[0] + "/g", "rb").read())' "$A" "$B")"
check_eq "node b reads the same bytes" "b'aaaaaaaaaabbbbb'" \
	"$(py 'print(open(a[0] + "/g", "rb").read())' "$B")"

# whole pages: the kernel would mark the page it filled up to date
check_eq "a page-sized append from b after a wrote two pages" "ok" "$(py '
fb = os.open(a[1] + "/p", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
fa = os.open(a[0] + "/p", os.O_RDWR)
os.pwrite(fa, b"A" * 8192, 0)
os.write(fb, b"B" * 4096)
want = b"A" * 8192 + b"B" * 4096
got_a = open(a[0] + "/p", "rb").read()
got_b = open(a[1] + "/p", "rb").read()
got_fd = os.pread(fb, 12288, 0)
print("ok" if got_a == want and got_b == want and got_fd == want else
      "a %r b %r fd %r" % (got_a[::1024], got_b[::1024], got_fd[::1024]))' "$A" "$B")"

# appends from both nodes in turns, each through an fd opened once
check_eq "200 appends taking turns on two nodes keep every record in order" "ok" "$(py '
fa = os.open(a[0] + "/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
fb = os.open(a[1] + "/log", os.O_WRONLY | os.O_APPEND)
want = b""
for i in range(100):
    for name, fd in (("a", fa), ("b", fb)):
        rec = b"%s%03d\n" % (name.encode(), i)
        os.write(fd, rec)
        want += rec
for m in a:
    got = open(m + "/log", "rb").read()
    if got != want:
        print("%s: %d bytes, want %d; first difference at %d" % (m, len(got), len(want),
              next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), -1)))
        break
else:
    print("ok")' "$A" "$B")"

# chattr +a: only appends, and b's append is one
check_eq "an append-only file takes b's O_APPEND write after a grew it" "ok" "$(py '
import fcntl, struct
fa = os.open(a[0] + "/ao", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.ioctl(fa, 0x40086602, struct.pack("l", 0x20))  # FS_IOC_SETFLAGS FS_APPEND_FL
fb = os.open(a[1] + "/ao", os.O_WRONLY | os.O_APPEND)
fa2 = os.open(a[0] + "/ao", os.O_WRONLY | os.O_APPEND)
os.write(fa2, b"first\n")
try:
    os.write(fb, b"second\n")
except OSError as e:
    print("b: %s" % e.strerror)
    sys.exit(0)
got = open(a[1] + "/ao", "rb").read()
print("ok" if got == b"first\nsecond\n" else repr(got))
fcntl.ioctl(fa, 0x40086602, struct.pack("l", 0))' "$A" "$B")"

# the kernel learns the size an append made: a mapping of b reads it
check_eq "after b's append, b's mapping reaches the new end without a stat" "ok" "$(py '
import mmap
fa = os.open(a[0] + "/m", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fa, b"x" * 4096)
fr = os.open(a[1] + "/m", os.O_RDONLY)
fb = os.open(a[1] + "/m", os.O_WRONLY | os.O_APPEND)
os.pwrite(fa, b"y" * 4096, 4096)
os.write(fb, b"z" * 100)
m = mmap.mmap(fr, 8192 + 100, prot=mmap.PROT_READ)
print("ok" if m[4096:4100] == b"yyyy" and m[8192:8196] == b"zzzz" else repr(m[8190:8200]))' "$A" "$B")"

# direct I/O must not cost the shared mapping of an O_APPEND file
check_eq "a shared mapping of a file opened O_RDWR|O_APPEND works" "ok" "$(py '
import mmap
f = os.open(a[0] + "/am", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
os.write(f, b"." * 8192)
m = mmap.mmap(f, 8192)
m[100:104] = b"MMAP"
m.flush()
os.write(f, b"tail")
got = open(a[1] + "/am", "rb").read()
print("ok" if got[100:104] == b"MMAP" and got.endswith(b"tail") and len(got) == 8196 else repr(got[96:108]))' "$A" "$B" 2>&1)"

check "every node unmounts cleanly" c_umount_all
c_stop_lockd
c_fsck_check
[ $t_failed -eq 0 ] || c_logs
t_done
