#!/usr/bin/env bash
# t_falloc.sh - fallocate(2) modes on a single-node mount, compared with ext4
# in the same run (a loop-mounted ext4 image gets the very same operations):
# FALLOC_FL_ZERO_RANGE with and without KEEP_SIZE (aligned, unaligned,
# inside one block, over holes, past the end, inline-sized files), punch
# hole, plain allocation, and their errors (mode combinations, zero length,
# append-only and immutable files, a read-only fd).  After each step the
# file's size and content hash and the call's result must be ext4's.  Also:
# the kernel's page cache and an existing mapping read the zeros at once,
# and what the kernel does with COLLAPSE_RANGE and INSERT_RANGE over FUSE
# (README known limits).  Ends with fsck.shoal -n clean.
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_falloc compares shoal with ext4 by itself: run it with E2E_FS=shoal"
	exit 0
fi
img=$t_dir/img
m=$t_dir/mnt
t_mkfs "$img" 256M -J 8M
t_mount_fg "$img" "$m" "$t_dir/mount.log"
e4img=$t_dir/ext4.img
e4=$t_dir/ext4
mkdir -p "$e4"
truncate -s 256M "$e4img"
mkfs.ext4 -q -F -b 4096 "$e4img" >/dev/null
if mount -o loop "$e4img" "$e4"; then
	t_mounts+=("$e4")
else
	echo "Bail out! cannot loop-mount an ext4 image to compare with"
	exit 1
fi

# ops DIR: the same fallocate steps; one line per step: result, size, md5.
ops() {
	"$T_PY" - "$1" <<'EOF'
import os, sys, errno, ctypes, hashlib, subprocess
d = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
KEEP, PUNCH, COLLAPSE, ZERO, INSERT = 1, 2, 8, 0x10, 0x20
BS = 4096
def fa(fd, mode, off, ln):
    if libc.fallocate(fd, mode, ctypes.c_long(off), ctypes.c_long(ln)):
        return errno.errorcode.get(ctypes.get_errno(), "?")
    return "OK"
def pattern(n, seed):
    return bytes(((i * 2654435761 + seed * 40503) >> 7) & 0xff for i in range(n))
def state(p):
    with open(p, "rb") as f:
        data = f.read()
    return "%d %s" % (len(data), hashlib.md5(data).hexdigest()[:12])
n = 0
def step(desc, fd, p, mode, off, ln):
    global n
    n += 1
    print("%02d %-40s %-10s %s" % (n, desc, fa(fd, mode, off, ln), state(p)))
p = d + "/big"
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, pattern(600 * BS + 123, 1))
step("zero aligned", fd, p, ZERO, 4 * BS, 8 * BS)
step("zero aligned keep", fd, p, ZERO | KEEP, 20 * BS, 8 * BS)
step("zero unaligned", fd, p, ZERO, 30 * BS + 100, 3 * BS + 7)
step("zero in one block", fd, p, ZERO, 40 * BS + 10, 20)
step("zero across indirect", fd, p, ZERO | KEEP, 500 * BS - 5, 20 * BS + 10)
step("zero over the end", fd, p, ZERO, 600 * BS, 4 * BS)
step("zero past the end keep", fd, p, ZERO | KEEP, 700 * BS + 5, 4 * BS)
step("zero past the end", fd, p, ZERO, 800 * BS + 5, 100)
step("punch unaligned", fd, p, PUNCH | KEEP, 50 * BS + 1, 5 * BS)
step("zero over the punched hole", fd, p, ZERO, 49 * BS, 10 * BS)
os.pwrite(fd, b"after", 52 * BS + 3)
step("write into it, zero around", fd, p, ZERO | KEEP, 52 * BS, 3)
step("allocate keep", fd, p, KEEP, 900 * BS, 10 * BS)
step("grow into it by zero", fd, p, ZERO, 900 * BS, 5 * BS + 1)
# errors
step("zero|punch", fd, p, ZERO | PUNCH | KEEP, 0, BS)
step("punch without keep", fd, p, PUNCH, 0, BS)
step("zero length 0", fd, p, ZERO, 0, 0)
step("zero offset -1", fd, p, ZERO, -1, 10)
step("unknown mode 0x80", fd, p, 0x80, 0, 10)
os.close(fd)
ro = os.open(p, os.O_RDONLY)
step("zero on a read-only fd", ro, p, ZERO, 0, 10)
os.close(ro)
# small (inline) files
q = d + "/small"
fd = os.open(q, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, pattern(1000, 2))
step("small: zero inside", fd, q, ZERO, 100, 200)
step("small: zero past end keep", fd, q, ZERO | KEEP, 900, 300)
step("small: zero grows it", fd, q, ZERO, 950, 100)
step("small: zero beyond one block", fd, q, ZERO, 500, 3 * BS)
os.close(fd)
q = d + "/empty"
fd = os.open(q, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
step("empty: zero keep", fd, q, ZERO | KEEP, 0, 10 * BS)
step("empty: zero", fd, q, ZERO, 5, 10)
os.close(fd)
# append-only and immutable
def setflags(path, fl):
    subprocess.run(["chattr", fl, path], check=True)
q = d + "/flags"
with open(q, "wb") as f:
    f.write(pattern(3 * BS, 3))
setflags(q, "+a")
fd = os.open(q, os.O_WRONLY | os.O_APPEND)
step("append-only: zero", fd, q, ZERO, 0, 10)
step("append-only: zero keep", fd, q, ZERO | KEEP, 0, 10)
step("append-only: punch", fd, q, PUNCH | KEEP, 0, 10)
step("append-only: allocate", fd, q, 0, 3 * BS, BS)
os.close(fd)
setflags(q, "+i")
fd = os.open(q, os.O_RDONLY)
step("immutable (read fd): zero", fd, q, ZERO, 0, 10)
os.close(fd)
setflags(q, "-ai")
EOF
}

ops "$m" >"$t_dir/shoal.out"
ops "$e4" >"$t_dir/ext4.out"
check_eq "the same fallocate steps give ext4's results, sizes and contents ($(wc -l <"$t_dir/ext4.out") steps)" \
	"" "$(diff "$t_dir/ext4.out" "$t_dir/shoal.out" | head -20)"
check "... and the steps did run (ZERO_RANGE succeeded on ext4)" grep -q "zero aligned  *OK" "$t_dir/ext4.out"

# What the kernel's page cache and a mapping held before are gone at once.
check_eq "after ZERO_RANGE, a cached read and a mapping held before read zeros" OK "$(py '
import mmap
p = a[0]
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"x" * 65536)
m = mmap.mmap(fd, 65536)
assert os.pread(fd, 10, 4196) == b"x" * 10 and m[4196:4206] == b"x" * 10
if ctypes.CDLL(None, use_errno=True).fallocate(fd, 0x10, ctypes.c_long(4096), ctypes.c_long(8192)):
    raise SystemExit("fallocate: errno %d" % ctypes.get_errno())
got = (os.pread(fd, 10, 4196), m[4196:4206], m[12288:12290], m[4090:4096])
want = (bytes(10), bytes(10), b"xx", b"x" * 6)
print("OK" if got == want else "got %r" % (got,))' "$m/cached")"

# COLLAPSE_RANGE and INSERT_RANGE: Linux's FUSE refuses both before asking
# the daemon (fuse_file_fallocate: EOPNOTSUPP); libshoal has them
# (test_falloc).  Should a kernel pass them on, they must do what ext4 does.
collapse_insert() {
	"$T_PY" - "$1" <<'EOF'
import os, sys, errno, ctypes, hashlib
libc = ctypes.CDLL(None, use_errno=True)
p = sys.argv[1] + "/ci"
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, bytes(range(256)) * 16 * 40)
out = []
for mode, off, ln in ((8, 4096, 8192), (0x20, 4096, 8192), (8, 100, 4096)):
    r = "OK" if libc.fallocate(fd, mode, ctypes.c_long(off), ctypes.c_long(ln)) == 0 else \
        errno.errorcode.get(ctypes.get_errno(), "?")
    out.append("%s %d %s" % (r, os.fstat(fd).st_size,
                             hashlib.md5(open(p, "rb").read()).hexdigest()[:8]))
print(" | ".join(out))
EOF
}
got=$(collapse_insert "$m")
e4got=$(collapse_insert "$e4")
case $got in
ENOTSUP*)
	check_eq "COLLAPSE_RANGE and INSERT_RANGE: EOPNOTSUPP from the kernel over FUSE (README known limits)" \
		"ENOTSUP ENOTSUP ENOTSUP" "$(echo "$got" | awk -F' [|] ' '{ split($1, x, " "); split($2, y, " "); split($3, z, " "); print x[1], y[1], z[1] }')"
	;;
*) check_eq "COLLAPSE_RANGE and INSERT_RANGE reach shoal: ext4's results" "$e4got" "$got" ;;
esac

umount "$e4"
rc=0
t_umount "$m" || rc=$?
check_eq "shoal-mount exits 0 at unmount (no sanitizer report)" 0 "$rc"
[ "$rc" -eq 0 ] || tail -20 "$t_dir/mount.log" | sed 's/^/#   /'
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "fsck.shoal -n is clean after the test" 0 "$rc"
[ "$rc" -eq 0 ] || tail -20 "$t_dir/fsck.out" | sed 's/^/#   /'
t_done
