#!/usr/bin/env bash
# t_ops_files.sh - file operations on a real single-node mount, each with its
# error cases, as ext4 behaves: create/open/read/write (inline files, growth
# past the 3840-byte inline payload, multi-MiB files, sparse files at large
# offsets, O_APPEND, overwrites), truncate, fsync/fdatasync, unlink, link,
# symlink/readlink, mknod of every special type, statfs, name length limits,
# and persistence of all of it across unmount and mount.
. "$(dirname "$0")/lib.sh"

img=$t_dir/img
m=$t_dir/mnt
ref=$t_dir/ref
mkdir -p "$ref"
t_mkfs "$img" 1G -J 8M
t_mount "$img" "$m"


# --- create / open / read / write ------------------------------------------

# Small inline file.
head -c 100 /dev/urandom >"$ref/small"
cp "$ref/small" "$m/small"
check "small file (100 B) reads back" cmp -s "$ref/small" "$m/small"
check_eq "small file size" 100 "$(stat -c %s "$m/small")"

# Exactly the inline payload, and one byte more.
for n in 3839 3840 3841 4095 4096 4097 8192; do
	head -c $n /dev/urandom >"$ref/s$n"
	cp "$ref/s$n" "$m/s$n"
	check "file of $n bytes reads back" cmp -s "$ref/s$n" "$m/s$n"
done

# Growth across the inline boundary by appends of 100 bytes, checking the
# whole content after every step.
check_eq "grow by 100-byte appends from 0 to 12000 bytes, content right at each step" OK \
	"$(py '
p = a[0]
want = b""
with open(p, "wb") as f:
    pass
for i in range(120):
    chunk = bytes([(i * 7 + j) % 251 for j in range(100)])
    with open(p, "ab") as f:
        f.write(chunk)
    want += chunk
    with open(p, "rb") as f:
        got = f.read()
    if got != want:
        print("mismatch after", len(want), "bytes"); sys.exit()
print("OK")' "$m/grow")"

# Growth of an inline file by a write past its end (leaves a hole).
check_eq "inline file grown by a write at 10000: old data, zeros, new data" OK "$(py '
p = a[0]
with open(p, "wb") as f:
    f.write(b"a" * 1000)
with open(p, "r+b") as f:
    f.seek(10000); f.write(b"b" * 10)
d = open(p, "rb").read()
print("OK" if d == b"a" * 1000 + bytes(9000) + b"b" * 10 else "bad, len %d" % len(d))' "$m/inlhole")"

# Multi-MiB files.
head -c $((8 << 20)) /dev/urandom >"$ref/big8"
cp "$ref/big8" "$m/big8"
check "8 MiB file reads back" cmp -s "$ref/big8" "$m/big8"
head -c $(((3 << 20) + 123)) /dev/urandom >"$ref/odd"
dd if="$ref/odd" of="$m/odd" bs=65536 status=none
check "3 MiB + 123 B file written with dd reads back" cmp -s "$ref/odd" "$m/odd"
check_eq "its size" $(((3 << 20) + 123)) "$(stat -c %s "$m/odd")"
head -c $((40 << 20)) /dev/urandom >"$ref/big40"
cp "$ref/big40" "$m/big40"
check "40 MiB file (height-2 block map) reads back" cmp -s "$ref/big40" "$m/big40"

# Overwrite in the middle.
cp "$ref/big8" "$ref/big8mod"
printf 'OVERWRITTEN-IN-THE-MIDDLE' | dd of="$ref/big8mod" bs=1 seek=4000000 conv=notrunc status=none
printf 'OVERWRITTEN-IN-THE-MIDDLE' | dd of="$m/big8" bs=1 seek=4000000 conv=notrunc status=none
check "overwrite in the middle of an 8 MiB file" cmp -s "$ref/big8mod" "$m/big8"
cp "$ref/big8mod" "$ref/big8"
cp "$ref/s3839" "$ref/s3839mod"
printf 'XYZ' | dd of="$ref/s3839mod" bs=1 seek=2000 conv=notrunc status=none
printf 'XYZ' | dd of="$m/s3839" bs=1 seek=2000 conv=notrunc status=none
check "overwrite in the middle of an inline file" cmp -s "$ref/s3839mod" "$m/s3839"
cp "$ref/s3839mod" "$ref/s3839"
# An unaligned write straddling two blocks.
check_eq "unaligned 5000-byte write straddling blocks" OK "$(py '
p = a[0]
want = bytearray(open(p, "rb").read())
buf = os.urandom(5000)
fd = os.open(p, os.O_WRONLY)
os.pwrite(fd, buf, 12345)
os.close(fd)
want[12345:17345] = buf
print("OK" if open(p, "rb").read() == bytes(want) else "mismatch")' "$m/big8")"
cp "$m/big8" "$ref/big8"

# Sparse writes at large offsets; holes read as zeros.
check_eq "sparse writes at 1 MiB, 1 GiB, 100 GiB and 1 TiB" OK "$(py '
p = a[0]
fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
offs = [1 << 20, 1 << 30, 100 << 30, 1 << 40]
for o in offs:
    if os.pwrite(fd, b"DATA@%d" % o, o) != len(b"DATA@%d" % o):
        print("short write at", o); sys.exit()
for o in offs:
    d = os.pread(fd, 64, o)
    if not d.startswith(b"DATA@%d" % o):
        print("bad data at", o, d[:20]); sys.exit()
os.close(fd)
print("OK")' "$m/sparse")"
check_eq "sparse file size" $(((1 << 40) + 18)) "$(stat -c %s "$m/sparse")"
check_eq "holes read as zeros (start, middle, just before data, between)" OK "$(py '
fd = os.open(a[0], os.O_RDONLY)
for o, n in [(0, 65536), (12345, 100), ((1 << 20) - 4096, 4096), (1 << 29, 8192),
             ((1 << 30) + 4096, 4096), ((100 << 30) - 1, 1), (50 << 30, 65536),
             ((1 << 40) - 65536, 65536)]:
    if os.pread(fd, n, o) != bytes(n):
        print("non-zero at", o); sys.exit()
print("OK")' "$m/sparse")"
blocks=$(stat -c %b "$m/sparse")
check "sparse 1 TiB file allocates little (st_blocks $blocks < 1024)" test "$blocks" -lt 1024
check_eq "read at EOF returns nothing" 0 "$(py '
fd = os.open(a[0], os.O_RDONLY)
print(len(os.pread(fd, 100, 100)) + len(os.pread(fd, 100, 1 << 41)))' "$m/small")"
check_eq "read straddling EOF is short" 60 "$(py '
fd = os.open(a[0], os.O_RDONLY)
print(len(os.pread(fd, 100, 40)))' "$m/small")"

# O_APPEND: every write lands at the end, whatever the offset.
check_eq "O_APPEND writes go to the end even after lseek" "start-one-two" "$(py '
p = a[0]
open(p, "wb").write(b"start")
fd = os.open(p, os.O_WRONLY | os.O_APPEND)
os.write(fd, b"-one")
os.lseek(fd, 0, os.SEEK_SET)
os.write(fd, b"-two")
os.close(fd)
print(open(p, "rb").read().decode())' "$m/app")"
check_eq "O_APPEND across the inline boundary" OK "$(py '
p = a[0]
fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range(50):
    os.write(fd, bytes([65 + i % 26]) * 101)
os.close(fd)
d = open(p, "rb").read()
print("OK" if d == b"".join(bytes([65 + i % 26]) * 101 for i in range(50)) else "bad")' "$m/app2")"

# open error cases.
check_eq "open of a missing file: ENOENT" ENOENT "$(t_try 'os.open(a[0], os.O_RDONLY)' "$m/nope")"
check_eq "O_CREAT|O_EXCL on an existing file: EEXIST" EEXIST \
	"$(t_try 'os.open(a[0], os.O_CREAT | os.O_EXCL | os.O_WRONLY)' "$m/small")"
mkdir "$m/adir"
check_eq "open of a directory for writing: EISDIR" EISDIR "$(t_try 'os.open(a[0], os.O_WRONLY)' "$m/adir")"
check_eq "path through a regular file: ENOTDIR" ENOTDIR "$(t_try 'os.open(a[0], os.O_RDONLY)' "$m/small/x")"
check_eq "O_DIRECTORY on a file: ENOTDIR" ENOTDIR \
	"$(t_try 'os.open(a[0], os.O_RDONLY | os.O_DIRECTORY)' "$m/small")"
check_eq "write on an O_RDONLY fd: EBADF" EBADF \
	"$(t_try 'os.write(os.open(a[0], os.O_RDONLY), b"x")' "$m/small")"
cp "$ref/s8192" "$m/trunc_on_open"
check_eq "O_TRUNC empties an existing file" "0" "$(py '
os.close(os.open(a[0], os.O_WRONLY | os.O_TRUNC))
print(os.stat(a[0]).st_size)' "$m/trunc_on_open")"
check_eq "O_TRUNC file then rewritten reads only the new data" "new" "$(py '
open(a[0], "wb").write(b"new")
print(open(a[0], "rb").read().decode())' "$m/trunc_on_open")"

# --- truncate ---------------------------------------------------------------

check_eq "truncate down then up: the re-extended range reads zero (inline)" OK "$(py '
p = a[0]
open(p, "wb").write(b"q" * 3000)
os.truncate(p, 100)
if os.stat(p).st_size != 100: print("size after shrink", os.stat(p).st_size); sys.exit()
os.truncate(p, 3000)
d = open(p, "rb").read()
print("OK" if d == b"q" * 100 + bytes(2900) else "stale data after re-extend")' "$m/tr1")"
check_eq "truncate down mid-block then up (block-mapped file)" OK "$(py '
p = a[0]
open(p, "wb").write(b"r" * (1 << 20))
os.truncate(p, 5000)
os.truncate(p, 1 << 20)
d = open(p, "rb").read()
print("OK" if d == b"r" * 5000 + bytes((1 << 20) - 5000) else
      "stale data at %d" % next(i for i in range(5000, len(d)) if d[i]))' "$m/tr2")"
check_eq "truncate to zero then write again" "fresh" "$(py '
p = a[0]
open(p, "wb").write(b"s" * 100000)
os.truncate(p, 0)
with open(p, "r+b") as f: f.write(b"fresh")
print(open(p, "rb").read().decode())' "$m/tr3")"
mkdir "$m/trup"
check_eq "truncate up of a large file is sparse, reads zero" OK "$(py '
p = a[0]
open(p, "wb").write(b"t" * 10)
os.truncate(p, 5 << 30)
st = os.stat(p)
fd = os.open(p, os.O_RDONLY)
z = os.pread(fd, 4096, 3 << 30)
print("OK" if st.st_size == 5 << 30 and st.st_blocks < 64 and z == bytes(4096) else
      "size %d blocks %d" % (st.st_size, st.st_blocks))' "$m/trup/tr4")"
# Growing a file by truncate past what its block map height covers (inline ->
# 3 MiB needs height 2; 5000 B -> 1 GiB needs height 2 or 3).
check_eq "truncate up past the block map's height (inline -> 3 MiB, 8 KiB -> 1 GiB)" OK "$(py '
for n, init, size in [("up1", 10, 3 << 20), ("up2", 8192, 1 << 30)]:
    p = os.path.join(a[0], n)
    open(p, "wb").write(b"w" * init)
    os.truncate(p, size)
    d = open(p, "rb").read(init + 8192)
    if os.stat(p).st_size != size or d != b"w" * init + bytes(8192):
        print("bad", n); sys.exit()
print("OK")' "$m/trup")"
check_eq "ftruncate through an open fd, then write past the new end" OK "$(py '
p = a[0]
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"u" * 20000)
os.ftruncate(fd, 7000)
os.pwrite(fd, b"v", 9000)
os.close(fd)
d = open(p, "rb").read()
print("OK" if d == b"u" * 7000 + bytes(2000) + b"v" else "bad len %d" % len(d))' "$m/tr5")"
check_eq "truncate of a directory: EISDIR" EISDIR "$(t_try 'os.truncate(a[0], 0)' "$m/adir")"
check_eq "truncate to a negative size: EINVAL" EINVAL "$(t_try 'os.truncate(a[0], -1)' "$m/tr3")"
check_eq "truncate a missing file: ENOENT" ENOENT "$(t_try 'os.truncate(a[0], 0)' "$m/nope")"

# --- fsync / fdatasync / flush ------------------------------------------------

check_eq "fsync and fdatasync of a written file succeed" OK "$(t_try '
fd = os.open(a[0], os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"x" * 100000)
os.fsync(fd)
os.pwrite(fd, b"y", 50)
os.fdatasync(fd)
os.fsync(fd)
os.close(fd)' "$m/synced")"
check_eq "fsync of a read-only fd and of a clean file succeed" OK "$(t_try '
fd = os.open(a[0], os.O_RDONLY)
os.fsync(fd); os.fdatasync(fd); os.close(fd)' "$m/small")"
check_eq "close (flush) after writes succeeds, data visible through a new fd" OK "$(py '
fd = os.open(a[0], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"flushed")
os.close(fd)
print("OK" if open(a[0], "rb").read() == b"flushed" else "bad")' "$m/flushed")"
check "sync succeeds" sync
wb0=0
t_is_shoal && wb0=$("$T_SHOAL" stat "$m" | awk '$1 == "wb_written" { print $2 }')
# Small fdatasync'ed overwrites (shoal keeps them in its dirty-block index
# until the next commit): an O_DIRECT read, which the page cache does not
# serve, sees every one; a read after the caches are dropped too.
check_eq "small fdatasync'ed overwrites: O_DIRECT read and cold read see them" OK "$(py '
import mmap, random
p = a[0]
r = random.Random(5)
data = bytearray(r.randbytes(1 << 20))
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, data); os.fsync(fd)
for i in range(300):
    off = r.randrange(len(data) - 3000); b = r.randbytes(r.randrange(1, 3000))
    os.pwrite(fd, b, off); data[off:off + len(b)] = b
    os.fdatasync(fd)
os.close(fd)
fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)
n = os.preadv(fd, [buf], 0)
os.close(fd)
if n != len(data) or bytes(buf[:n]) != bytes(data):
    print("O_DIRECT read differs"); sys.exit()
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("3")
print("OK" if open(p, "rb").read() == bytes(data) else "cold read differs")' "$m/smallsync")"
if t_is_shoal; then
	# the commit (commit=5 by default; the unmount at the latest) writes each
	# dirty block home once: wb_visited == wb_written, both > 0
	# 300 writes over the 256 blocks of the file: well over 100 dirty blocks
	for _ in $(seq 1 100); do
		wbw=$("$T_SHOAL" stat "$m" | awk '$1 == "wb_written" { print $2 }')
		[ $((wbw - wb0)) -ge 100 ] && break
		sleep 0.1
	done
	wbv=$("$T_SHOAL" stat "$m" | awk '$1 == "wb_visited" { print $2 }')
	check "the commit wrote the dirty blocks home ($((wbw - wb0)) blocks, >= 100)" \
		[ $((wbw - wb0)) -ge 100 ]
	check_eq "writeback visits only the dirty blocks it writes (wb_visited == wb_written)" \
		"$wbw" "$wbv"
fi

# --- unlink -------------------------------------------------------------------

echo gone >"$m/victim"
check_eq "unlink" OK "$(t_try 'os.unlink(a[0])' "$m/victim")"
check_eq "stat after unlink: ENOENT" ENOENT "$(t_try 'os.stat(a[0])' "$m/victim")"
check_eq "unlink again: ENOENT" ENOENT "$(t_try 'os.unlink(a[0])' "$m/victim")"
check_eq "unlink of a directory: EISDIR" EISDIR "$(t_try 'os.unlink(a[0])' "$m/adir")"
check_eq "unlink through a file: ENOTDIR" ENOTDIR "$(t_try 'os.unlink(a[0])' "$m/small/x")"
check "unlinked name is not listed" bash -c "! ls -a '$m' | grep -qx victim"
cp "$ref/big8" "$m/bigvictim"
check_eq "unlink of a large file" OK "$(t_try 'os.unlink(a[0])' "$m/bigvictim")"

# --- link -----------------------------------------------------------------------

echo linked >"$m/l1"
check_eq "link count of a new file" 1 "$(stat -c %h "$m/l1")"
check_eq "link" OK "$(t_try 'os.link(a[0], a[1])' "$m/l1" "$m/l2")"
mkdir -p "$m/ldir"
check_eq "link into another directory" OK "$(t_try 'os.link(a[0], a[1])' "$m/l1" "$m/ldir/l3")"
check_eq "link count 3 on every name" "3 3 3" "$(stat -c %h "$m/l1" "$m/l2" "$m/ldir/l3" | xargs)"
check_eq "all names share one inode" 1 "$(stat -c %i "$m/l1" "$m/l2" "$m/ldir/l3" | sort -u | wc -l)"
echo more >>"$m/l2"
check_eq "write through one name is seen through another" "linked more" "$(xargs <"$m/ldir/l3")"
check_eq "link onto an existing name: EEXIST" EEXIST "$(t_try 'os.link(a[0], a[1])' "$m/l1" "$m/small")"
check_eq "link of a directory: EPERM" EPERM "$(t_try 'os.link(a[0], a[1])' "$m/adir" "$m/adir2")"
check_eq "link of a missing file: ENOENT" ENOENT "$(t_try 'os.link(a[0], a[1])' "$m/nope" "$m/nope2")"
check_eq "link into a missing directory: ENOENT" ENOENT \
	"$(t_try 'os.link(a[0], a[1])' "$m/l1" "$m/nodir/x")"
check_eq "link across filesystems: EXDEV" EXDEV "$(t_try 'os.link(a[0], a[1])' "$m/l1" "$t_dir/xdev")"
rm "$m/l1"
check_eq "unlink of one name: count drops to 2" "2 2" "$(stat -c %h "$m/l2" "$m/ldir/l3" | xargs)"
check_eq "ctime changes on link" OK "$(py '
p = a[0]
c0 = os.stat(p).st_ctime_ns
import time; time.sleep(0.02)
os.link(p, a[1])
print("OK" if os.stat(p).st_ctime_ns > c0 else "ctime not updated")' "$m/l2" "$m/l4")"

# --- symlink / readlink ----------------------------------------------------------

check_eq "symlink to a short target, readlink" "small" \
	"$(py 'os.symlink("small", a[0]); print(os.readlink(a[0]))' "$m/sl_short")"
check_eq "symlink resolves" "$(cat "$m/small" | sha256sum)" "$(sha256sum <"$m/sl_short")"
check_eq "lstat: a symlink of size 5" "symbolic link 5" "$(stat -c '%F %s' "$m/sl_short")"
for n in 100 3839 3840 3841 4000 4095; do
	check_eq "symlink target of $n bytes reads back" OK "$(py '
n = int(a[1])
t = ("d/" * n)[:n - 1] + "z"
os.symlink(t, a[0])
print("OK" if os.readlink(a[0]) == t and os.lstat(a[0]).st_size == n else "bad")' "$m/sl$n" $n)"
done
check_eq "symlink target of 4096 bytes: ENAMETOOLONG" ENAMETOOLONG \
	"$(t_try 'os.symlink("x" * 4096, a[0])' "$m/sl4096")"
check_eq "symlink onto an existing name: EEXIST" EEXIST "$(t_try 'os.symlink("x", a[0])' "$m/small")"
check_eq "dangling symlink: lstat ok, stat ENOENT" "OK ENOENT" \
	"$(t_try 'os.symlink("nowhere", a[0])' "$m/dangle") $(t_try 'os.stat(a[0])' "$m/dangle")"
check_eq "readlink of a regular file: EINVAL" EINVAL "$(t_try 'os.readlink(a[0])' "$m/small")"
check_eq "symlink to a directory is followed" "in" \
	"$(py 'os.symlink("adir", a[0]); open(a[0] + "/in", "w").write("x"); print(*os.listdir(a[1]))' \
		"$m/sl_dir" "$m/adir")"
check_eq "symlink loop: ELOOP" ELOOP \
	"$(t_try 'os.symlink("loop2", a[0]); os.symlink("loop1", a[1]); open(a[0])' "$m/loop1" "$m/loop2")"

# --- mknod ------------------------------------------------------------------------

check_eq "mkfifo" "fifo" "$(mkfifo "$m/fifo" && stat -c %F "$m/fifo")"
check_eq "fifo passes data" "through the fifo" \
	"$( (echo "through the fifo" >"$m/fifo" &) ; timeout 10 cat "$m/fifo")"
check_eq "unix socket node" "socket" "$(py '
import socket
s = socket.socket(socket.AF_UNIX); s.bind(a[0]); s.close()
print("socket" if stat.S_ISSOCK(os.lstat(a[0]).st_mode) else "not a socket")' "$m/sock")"
check_eq "char device 1:3" "character special file 1 3" \
	"$(mknod "$m/cdev" c 1 3 && stat -c '%F %Hr %Lr' "$m/cdev")"
check_eq "block device 7:0" "block special file 7 0" \
	"$(mknod "$m/bdev" b 7 0 && stat -c '%F %Hr %Lr' "$m/bdev")"
check_eq "char device with a large major and minor (300:1048575)" "300 1048575" "$(py '
os.mknod(a[0], 0o600 | stat.S_IFCHR, os.makedev(300, 1048575))
r = os.stat(a[0]).st_rdev
print(os.major(r), os.minor(r))' "$m/cbig")"
check_eq "mknod mode bits" "600" "$(stat -c %a "$m/cbig")"
check_eq "special files have size 0" "0 0 0" "$(stat -c %s "$m/fifo" "$m/cdev" "$m/bdev" | xargs)"
check_eq "mknod on an existing name: EEXIST" EEXIST "$(t_try 'os.mkfifo(a[0])' "$m/fifo")"
check_eq "regular file through mknod" "regular empty file" \
	"$(py 'os.mknod(a[0], 0o644 | stat.S_IFREG)' "$m/regnod" && stat -c %F "$m/regnod")"

# --- statfs ---------------------------------------------------------------------

sync
avail0=$(stat -f -c %a "$m")
bsz=$(stat -f -c %S "$m")
total=$(stat -f -c %b "$m")
check "statfs: free <= total and block size 4096" test "$avail0" -le "$total" -a "$bsz" -eq 4096
ffree0=$(stat -f -c %d "$m")
head -c $((64 << 20)) /dev/zero | tr '\0' 'z' >"$m/dfbig"
sync
avail1=$(stat -f -c %a "$m")
used=$(((avail0 - avail1) * bsz))
check "statfs: a 64 MiB file takes 64..66 MiB of free space (took $used bytes)" \
	test $used -ge $((64 << 20)) -a $used -le $((66 << 20))
for _ in 1 2 3 4 5; do touch "$m/inode_$_"; done
sync
ffree1=$(stat -f -c %d "$m")
check "statfs: free inodes drop when files are created ($ffree0 -> $ffree1)" test "$ffree1" -lt "$ffree0"
rm "$m/dfbig"
sync
for ((i = 0; i < 50; i++)); do
	avail2=$(stat -f -c %a "$m")
	[ $(((avail0 - avail2) * bsz)) -le $((1 << 20)) ] && break
	sleep 0.2
done
check "statfs: deleting it gives the space back (within 1 MiB: $avail0 -> $avail2)" \
	test $(((avail0 - avail2) * bsz)) -le $((1 << 20))
check_eq "df agrees with statfs" "$((avail2 * bsz / 1024))" "$(df -k --output=avail "$m" | tail -1 | xargs)"

# --- name lengths ----------------------------------------------------------------

n255=$(printf 'n%.0s' $(seq 255))
n256=$(printf 'n%.0s' $(seq 256))
check_eq "create a file with a 255-byte name" OK "$(t_try 'open(a[0], "w").write("255")' "$m/$n255")"
check_eq "stat it" "3" "$(stat -c %s "$m/$n255")"
check "readdir lists the 255-byte name" bash -c "ls '$m' | grep -qx '$n255'"
check_eq "mkdir with a 255-byte name" OK "$(t_try 'os.mkdir(a[0])' "$m/adir/$n255")"
check_eq "create with a 256-byte name: ENAMETOOLONG" ENAMETOOLONG \
	"$(t_try 'open(a[0], "w")' "$m/$n256")"
check_eq "stat of a 256-byte name: ENAMETOOLONG" ENAMETOOLONG "$(t_try 'os.stat(a[0])' "$m/$n256")"
check_eq "mkdir with a 256-byte name: ENAMETOOLONG" ENAMETOOLONG "$(t_try 'os.mkdir(a[0])' "$m/$n256")"
check_eq "symlink named with 256 bytes: ENAMETOOLONG" ENAMETOOLONG \
	"$(t_try 'os.symlink("x", a[0])' "$m/$n256")"
check_eq "link to a 256-byte name: ENAMETOOLONG" ENAMETOOLONG \
	"$(t_try 'os.link(a[0], a[1])' "$m/small" "$m/$n256")"
check_eq "rename to a 256-byte name: ENAMETOOLONG" ENAMETOOLONG \
	"$(t_try 'os.rename(a[0], a[1])' "$m/small" "$m/$n256")"
check_eq "mknod with a 256-byte name: ENAMETOOLONG" ENAMETOOLONG "$(t_try 'os.mkfifo(a[0])' "$m/$n256")"
check_eq "name with every byte but / and NUL" OK "$(t_try '
n = bytes(range(1, 47)) + bytes(range(48, 256))
open(os.fsencode(a[0]) + b"/" + n, "w").write("x")
assert n in os.listdir(os.fsencode(a[0]))' "$m/adir")"

# --- persistence across unmount / mount ------------------------------------------

# Everything: content checksums, and type, mode, size, links, rdev, target,
# mtime of every name.
snapshot() {
	py '
root = a[0]
def line(p):
    s = os.lstat(p)
    t = os.readlink(p) if stat.S_ISLNK(s.st_mode) else ""
    h = ""
    if stat.S_ISREG(s.st_mode) and s.st_size < (256 << 20):
        h = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return " ".join(str(x) for x in (oct(s.st_mode), s.st_size, s.st_nlink, s.st_rdev,
        s.st_uid, s.st_gid, s.st_mtime_ns, s.st_ino, hashlib.sha256(t.encode()).hexdigest(), h))
def err(e): print(os.path.relpath(e.filename, root), "listing error", errno.errorcode[e.errno])
for d, ds, fs in sorted(os.walk(root, onerror=err)):
    for n in sorted(ds + fs):
        p = os.path.join(d, n)
        try:
            print(os.path.relpath(p, root), line(p))
        except OSError as e:
            print(os.path.relpath(p, root), "error", errno.errorcode[e.errno])' "$1"
}
snapshot "$m" >"$t_dir/before"
if t_umount "$m"; then ok "unmount"; else not_ok "unmount"; fi
t_mount "$img" "$m"
snapshot "$m" >"$t_dir/after"
if diff "$t_dir/before" "$t_dir/after" >"$t_dir/diff"; then
	ok "after remount every file, checksum and attribute is the same ($(wc -l <"$t_dir/before") lines)"
else
	not_ok "after remount every file, checksum and attribute is the same"
	head -20 "$t_dir/diff" | sed 's/^/#   /'
fi
check "8 MiB file still equals the reference" cmp -s "$ref/big8" "$m/big8"
check "40 MiB file still equals the reference" cmp -s "$ref/big40" "$m/big40"
check_eq "sparse file still right after remount" OK "$(py '
fd = os.open(a[0], os.O_RDONLY)
ok = os.pread(fd, 100, 1 << 40) == b"DATA@%d" % (1 << 40) and os.pread(fd, 4096, 1 << 35) == bytes(4096)
print("OK" if ok else "bad")' "$m/sparse")"
check_eq "truncated file still reads zero after remount" OK "$(py '
d = open(a[0], "rb").read()
print("OK" if d == b"r" * 5000 + bytes((1 << 20) - 5000) else "stale data")' "$m/tr2")"
check_eq "files grown by truncate past their height keep their size after remount" \
	"$((5 << 30)) $((3 << 20)) $((1 << 30))" "$(stat -c %s "$m/trup/tr4" "$m/trup/up1" "$m/trup/up2" | xargs)"
check_eq "link counts after remount" "3 3" "$(stat -c %h "$m/l2" "$m/ldir/l3" | xargs)"
t_umount_fsck "$m" "$img"
t_done
