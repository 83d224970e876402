#!/usr/bin/env bash
# t_ops_xattr_flags.sh - extended attributes, inode flags (chattr +A/+a/+i),
# fallocate (allocate, keep-size, punch-hole), SEEK_DATA/SEEK_HOLE,
# timestamps (utimens), chmod/chown, and when reads update atime under
# strictatime, relatime and noatime - each with its error cases, as ext4.
. "$(dirname "$0")/lib.sh"

img=$t_dir/img
m=$t_dir/mnt
t_mkfs "$img" 512M -J 8M
t_mount "$img" "$m"

dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# --- extended attributes ----------------------------------------------------------

f=$m/xf
echo data >"$f"
check "setfattr user.*" setfattr -n user.colour -v blue "$f"
check_eq "getfattr --absolute-names user.*" blue "$(getfattr --absolute-names --only-values -n user.colour "$f")"
check "setfattr trusted.*" setfattr -n trusted.secret -v 0x00ff00 "$f"
check_eq "getfattr --absolute-names trusted.* (binary value)" "0x00ff00" \
	"$(getfattr --absolute-names -e hex -n trusted.secret "$f" | sed -n 's/^trusted.secret=//p')"
check_eq "binary value read back byte for byte" "b'\\x00\\xff\\x00'" "$(py 'print(os.getxattr(a[0], "trusted.secret"))' "$f")"
check "replace a value" setfattr -n user.colour -v green "$f"
check_eq "replaced value" green "$(getfattr --absolute-names --only-values -n user.colour "$f")"
check_eq "empty value" "OK b''" "$(t_try 'os.setxattr(a[0], "user.empty", b"")' "$f") $(py 'print(os.getxattr(a[0], "user.empty"))' "$f")"
check_eq "list shows user.* and trusted.*" "trusted.secret user.colour user.empty" \
	"$(py 'print(*sorted(os.listxattr(a[0])))' "$f")"
check_eq "XATTR_CREATE on an existing name: EEXIST" EEXIST \
	"$(t_try 'os.setxattr(a[0], "user.colour", b"x", os.XATTR_CREATE)' "$f")"
check_eq "XATTR_CREATE on a new name" OK "$(t_try 'os.setxattr(a[0], "user.fresh", b"x", os.XATTR_CREATE)' "$f")"
check_eq "XATTR_REPLACE on a missing name: ENODATA" ENODATA \
	"$(t_try 'os.setxattr(a[0], "user.absent", b"x", os.XATTR_REPLACE)' "$f")"
check_eq "XATTR_REPLACE on an existing name" "OK b'y'" \
	"$(t_try 'os.setxattr(a[0], "user.fresh", b"y", os.XATTR_REPLACE)' "$f") $(py 'print(os.getxattr(a[0], "user.fresh"))' "$f")"
check_eq "get of a missing name: ENODATA" ENODATA "$(t_try 'os.getxattr(a[0], "user.absent")' "$f")"
check "remove" setfattr -x user.fresh "$f"
check_eq "get after remove: ENODATA" ENODATA "$(t_try 'os.getxattr(a[0], "user.fresh")' "$f")"
check_eq "remove of a missing name: ENODATA" ENODATA "$(t_try 'os.removexattr(a[0], "user.fresh")' "$f")"
check_eq "get into a buffer too small: ERANGE" ERANGE "$(t_try '
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(2)
if libc.getxattr(os.fsencode(a[0]), b"user.colour", buf, 2) < 0:
    e = ctypes.get_errno(); raise OSError(e, os.strerror(e))' "$f")"
check_eq "size query (size 0) returns the value length" 5 "$(py '
libc = ctypes.CDLL(None, use_errno=True)
print(libc.getxattr(os.fsencode(a[0]), b"user.colour", None, 0))' "$f")"
check_eq "name of 255 bytes after the prefix" OK "$(t_try 'os.setxattr(a[0], "user." + "n" * 250, b"v")' "$f")"
check_eq "name longer than 255 bytes: ERANGE" ERANGE "$(t_try 'os.setxattr(a[0], "user." + "n" * 251, b"v")' "$f")"
check_eq "unknown namespace: EOPNOTSUPP" ENOTSUP "$(t_try 'os.setxattr(a[0], "bogus.name", b"v")' "$f")"
check_eq "value of 1000 bytes" OK "$(t_try '
v = os.urandom(1000)
os.setxattr(a[0], "user.k1000", v)
assert os.getxattr(a[0], "user.k1000") == v' "$f")"
r=$(t_try 'os.setxattr(a[0], "user.huge", b"h" * 5000)' "$f")
check "value larger than a block: ENOSPC or E2BIG (got $r)" test "$r" = ENOSPC -o "$r" = E2BIG
check_eq "value beyond 64 KiB: E2BIG" E2BIG "$(t_try 'os.setxattr(a[0], "user.huger", b"h" * 65537)' "$f")"
echo g >"$m/xfill"
r=$(py '
n = 0
try:
    while n < 1000:
        os.setxattr(a[0], "user.fill%03d" % n, bytes([n % 256]) * 200); n += 1
    print("never full")
except OSError as e:
    print(errno.errorcode[e.errno], n)' "$m/xfill")
check "filling the xattr space ends in ENOSPC/E2BIG ($r)" bash -c "[[ '$r' =~ ^(ENOSPC|E2BIG)\ [0-9]+$ ]]"
nfill=${r#* }
check_eq "after ENOSPC every stored attribute is intact" OK "$(t_try '
for i in range(int(a[1])):
    assert os.getxattr(a[0], "user.fill%03d" % i) == bytes([i % 256]) * 200, i' "$m/xfill" "$nfill")"
check_eq "after removing one, another fits" OK "$(t_try '
os.removexattr(a[0], "user.fill000")
os.setxattr(a[0], "user.again", b"a" * 150)' "$m/xfill")"
mkdir "$m/xd"
ln -s xf "$m/xl"
check_eq "xattr on a directory" "OK b'dir'" \
	"$(t_try 'os.setxattr(a[0], "user.d", b"dir")' "$m/xd") $(py 'print(os.getxattr(a[0], "user.d"))' "$m/xd")"
check_eq "user.* on a symlink itself: EPERM" EPERM \
	"$(t_try 'os.setxattr(a[0], "user.l", b"l", follow_symlinks=False)' "$m/xl")"
check_eq "trusted.* on a symlink itself" OK \
	"$(t_try 'os.setxattr(a[0], "trusted.l", b"l", follow_symlinks=False)' "$m/xl")"
check_eq "xattr on a missing file: ENOENT" ENOENT "$(t_try 'os.setxattr(a[0], "user.x", b"x")' "$m/nope")"

# --- inode flags ---------------------------------------------------------------------

lsflags() { lsattr -d "$1" 2>/dev/null | awk '{ print $1 }' | tr -d -- "-e"; }
echo f >"$m/fa"
check "chattr +A" chattr +A "$m/fa"
check_eq "lsattr shows A" A "$(lsflags "$m/fa")"
check "chattr -A" chattr -A "$m/fa"
check_eq "lsattr shows nothing" "" "$(lsflags "$m/fa")"
ct0=$(stat -c %z "$m/fa")
chattr +A "$m/fa"
check "chattr changes ctime, seen by the next stat (the kernel's attributes dropped)" \
	test "$ct0" != "$(stat -c %z "$m/fa")"
chattr -A "$m/fa"

# append-only
echo start >"$m/app"
check "chattr +a" chattr +a "$m/app"
check_eq "lsattr shows a" a "$(lsflags "$m/app")"
check_eq "+a: appending works" "OK start more" \
	"$(t_try 'open(a[0], "a").write("more\n")' "$m/app") $(xargs <"$m/app")"
check_eq "+a: open for writing without O_APPEND: EPERM" EPERM "$(t_try 'os.open(a[0], os.O_WRONLY)' "$m/app")"
check_eq "+a: truncate: EPERM" EPERM "$(t_try 'os.truncate(a[0], 0)' "$m/app")"
check_eq "+a: O_TRUNC: EPERM" EPERM "$(t_try 'os.open(a[0], os.O_WRONLY | os.O_APPEND | os.O_TRUNC)' "$m/app")"
check_eq "+a: unlink: EPERM" EPERM "$(t_try 'os.unlink(a[0])' "$m/app")"
check_eq "+a: rename: EPERM" EPERM "$(t_try 'os.rename(a[0], a[0] + "2")' "$m/app")"
check_eq "+a: link: EPERM" EPERM "$(t_try 'os.link(a[0], a[0] + "2")' "$m/app")"
check_eq "+a: chmod: EPERM" EPERM "$(t_try 'os.chmod(a[0], 0o600)' "$m/app")"
check_eq "+a: utimes with explicit times: EPERM" EPERM "$(t_try 'os.utime(a[0], (1, 1))' "$m/app")"
check_eq "+a: utimes to now works" OK "$(t_try 'os.utime(a[0])' "$m/app")"
check_eq "+a: content intact" "start more" "$(xargs <"$m/app")"
check "chattr -a" chattr -a "$m/app"
check_eq "-a: truncate works again" OK "$(t_try 'os.truncate(a[0], 0)' "$m/app")"

# immutable
echo frozen >"$m/imm"
check "chattr +i" chattr +i "$m/imm"
check_eq "lsattr shows i" i "$(lsflags "$m/imm")"
check_eq "+i: read works" frozen "$(cat "$m/imm")"
check_eq "+i: open for writing: EPERM" EPERM "$(t_try 'os.open(a[0], os.O_WRONLY)' "$m/imm")"
check_eq "+i: open for appending: EPERM" EPERM "$(t_try 'os.open(a[0], os.O_WRONLY | os.O_APPEND)' "$m/imm")"
check_eq "+i: truncate: EPERM" EPERM "$(t_try 'os.truncate(a[0], 0)' "$m/imm")"
check_eq "+i: unlink: EPERM" EPERM "$(t_try 'os.unlink(a[0])' "$m/imm")"
check_eq "+i: rename: EPERM" EPERM "$(t_try 'os.rename(a[0], a[0] + "2")' "$m/imm")"
check_eq "+i: chmod: EPERM" EPERM "$(t_try 'os.chmod(a[0], 0o600)' "$m/imm")"
check_eq "+i: chown: EPERM" EPERM "$(t_try 'os.chown(a[0], 1, 1)' "$m/imm")"
check_eq "+i: link: EPERM" EPERM "$(t_try 'os.link(a[0], a[0] + "2")' "$m/imm")"
check_eq "+i: utimes: EPERM" EPERM "$(t_try 'os.utime(a[0], (1, 1))' "$m/imm")"
check_eq "+i: setxattr: EPERM" EPERM "$(t_try 'os.setxattr(a[0], "user.x", b"x")' "$m/imm")"
check_eq "+i: content intact" frozen "$(cat "$m/imm")"
mkdir "$m/immdir" "$m/immdir/full" "$m/immdir/empty"
touch "$m/immdir/inside" "$m/immdir/full/x"
check "chattr +i on a directory" chattr +i "$m/immdir"
check_eq "+i directory: create inside: EPERM" EPERM "$(t_try 'open(a[0], "w")' "$m/immdir/new")"
check_eq "+i directory: unlink inside: EPERM" EPERM "$(t_try 'os.unlink(a[0])' "$m/immdir/inside")"
check_eq "+i directory: link into it: EPERM" EPERM "$(t_try 'os.link(a[0], a[1])' "$m/fa" "$m/immdir/l")"
check_eq "+i directory: rmdir of an empty directory inside: EPERM" EPERM \
	"$(t_try 'os.rmdir(a[0])' "$m/immdir/empty")"
check_eq "+i directory: rmdir of a non-empty one: EPERM before ENOTEMPTY" EPERM \
	"$(t_try 'os.rmdir(a[0])' "$m/immdir/full")"
check_eq "+i directory: rmdir of a missing name: ENOENT" ENOENT "$(t_try 'os.rmdir(a[0])' "$m/immdir/nope")"
check_eq "+i directory: files inside stay writable" OK "$(t_try 'open(a[0], "w").write("x")' "$m/immdir/inside")"
check_eq "setting flags on a missing file fails" 1 "$(chattr +i "$m/nope" 2>/dev/null; echo $?)"

# --- fallocate ---------------------------------------------------------------------------

kib() { du -k "$1" | cut -f1; }
check "fallocate -l 10M" fallocate -l 10M "$m/fa1"
check_eq "size is 10 MiB" $((10 << 20)) "$(stat -c %s "$m/fa1")"
check "du grows to at least 10 MiB ($(kib "$m/fa1") KiB)" test "$(kib "$m/fa1")" -ge 10240
check_eq "allocated range reads zero" OK "$(t_try 'assert open(a[0], "rb").read() == bytes(10 << 20)' "$m/fa1")"
touch "$m/fa2"
check "fallocate --keep-size -l 4M" fallocate --keep-size -l 4M "$m/fa2"
check_eq "--keep-size: size stays 0" 0 "$(stat -c %s "$m/fa2")"
check "--keep-size: du grows to at least 4 MiB ($(kib "$m/fa2") KiB)" test "$(kib "$m/fa2")" -ge 4096
check_eq "--keep-size: a write after it reads back" OK "$(t_try '
open(a[0], "r+b").write(b"k" * 100000)
assert open(a[0], "rb").read() == b"k" * 100000' "$m/fa2")"
head -c $((1 << 20)) /dev/zero | tr '\0' 'p' >"$m/ph"
du0=$(kib "$m/ph")
check "fallocate --punch-hole 256K at 256K" fallocate --punch-hole -o 256K -l 256K "$m/ph"
check_eq "punched range reads zero, the rest is intact, size unchanged" OK "$(t_try '
d = open(a[0], "rb").read()
assert len(d) == 1 << 20
assert d[:256 << 10] == b"p" * (256 << 10)
assert d[256 << 10:512 << 10] == bytes(256 << 10)
assert d[512 << 10:] == b"p" * (512 << 10)' "$m/ph")"
du1=$(kib "$m/ph")
check "du shrinks by 256 KiB ($du0 -> $du1)" test $((du0 - du1)) -ge 256
check "punch a hole not aligned to blocks" fallocate --punch-hole -o 1000 -l 10000 "$m/ph"
check_eq "unaligned punch zeroes exactly its range" OK "$(t_try '
d = open(a[0], "rb").read()
assert d[:1000] == b"p" * 1000, "head"
assert d[1000:11000] == bytes(10000), "hole"
assert d[11000:256 << 10] == b"p" * ((256 << 10) - 11000), "tail"' "$m/ph")"
check "fallocate at a large offset (3 GiB)" fallocate -o 3G -l 64K "$m/fa3"
check_eq "size after fallocate at 3 GiB" $(((3 << 30) + (64 << 10))) "$(stat -c %s "$m/fa3")"
check_eq "fallocate on a directory fails" 1 "$(fallocate -l 1M "$m/xd" 2>/dev/null; echo $?)"

# --- SEEK_DATA / SEEK_HOLE -------------------------------------------------------------

check_eq "SEEK_DATA/SEEK_HOLE on a sparse file" "0 4096 1048576 1056768 ENXIO 1572863 ENXIO" "$(py '
p = a[0]
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, b"d" * 4096, 0)
os.pwrite(fd, b"e" * 5000, 1 << 20)
os.ftruncate(fd, 3 << 19)  # 1.5 MiB (t_ops_files covers growth past the map height)
out = [os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE),
       os.lseek(fd, 4096, os.SEEK_DATA), os.lseek(fd, 1 << 20, os.SEEK_HOLE)]
try:
    out.append(os.lseek(fd, (1 << 20) + 8192, os.SEEK_DATA))
except OSError as e:
    out.append(errno.errorcode[e.errno])
out.append(os.lseek(fd, (3 << 19) - 1, os.SEEK_HOLE))
try:
    out.append(os.lseek(fd, 3 << 20, os.SEEK_DATA))
except OSError as e:
    out.append(errno.errorcode[e.errno])
print(*out)' "$m/seek")"
check_eq "SEEK_DATA on an inline file" "0 10" "$(py '
fd = os.open(a[0], os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"0123456789")
print(os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE))' "$m/seek_inline")"

# --- timestamps, chmod, chown ---------------------------------------------------------------

echo t >"$m/ts"
check "touch -d with nanoseconds" touch -d "2001-02-03 04:05:06.123456789 UTC" "$m/ts"
check_eq "atime and mtime exact to the nanosecond" \
	"2001-02-03 04:05:06.123456789 +0000 2001-02-03 04:05:06.123456789 +0000" \
	"$(TZ=UTC stat -c '%x %y' "$m/ts")"
check "touch -a only" touch -a -d "2010-01-01 00:00:00.5 UTC" "$m/ts"
check_eq "touch -a changed atime only" "2010-01-01 00:00:00.500000000 +0000 2001-02-03 04:05:06.123456789 +0000" \
	"$(TZ=UTC stat -c '%x %y' "$m/ts")"
check "touch -m only" touch -m -d "2020-06-07 08:09:10.000000001 UTC" "$m/ts"
check_eq "touch -m changed mtime only" "2010-01-01 00:00:00.500000000 +0000 2020-06-07 08:09:10.000000001 +0000" \
	"$(TZ=UTC stat -c '%x %y' "$m/ts")"
check_eq "utimens with UTIME_NOW-style touch moves ctime forward" OK "$(py '
import time
c0 = os.stat(a[0]).st_ctime_ns
time.sleep(0.02)
os.utime(a[0])
s = os.stat(a[0])
print("OK" if s.st_ctime_ns > c0 and abs(s.st_mtime_ns - time.time_ns()) < 5 * 10**9 else "bad")' "$m/ts")"
touch "$m/ts2"
check_eq "times before 1970 and after 2038" "-86400000000001 4102444800999999999" "$(py '
os.utime(a[0], ns=(-86400000000001, 4102444800999999999))
s = os.stat(a[0])
print(s.st_atime_ns, s.st_mtime_ns)' "$m/ts2")"
check "chmod 4755" chmod 4755 "$m/ts"
check_eq "mode 4755" 4755 "$(stat -c %a "$m/ts")"
check "chmod 1777 on a directory" chmod 1777 "$m/xd"
check_eq "mode 1777" 1777 "$(stat -c %a "$m/xd")"
check "chown 1234:5678" chown 1234:5678 "$m/ts"
check_eq "owner 1234:5678" "1234 5678" "$(stat -c '%u %g' "$m/ts")"
check_eq "chown clears the setuid bit (as ext4)" 755 "$(stat -c %a "$m/ts")"
check "chown of the group only" chown :42 "$m/ts"
check_eq "owner 1234:42" "1234 42" "$(stat -c '%u %g' "$m/ts")"
check "chown -h of a symlink itself" chown -h 7:8 "$m/xl"
check_eq "symlink owner changed, target not" "7 8 0 0" \
	"$(stat -c '%u %g' "$m/xl") $(stat -c '%u %g' "$m/xf")"
check_eq "chmod of a missing file: ENOENT" ENOENT "$(t_try 'os.chmod(a[0], 0o644)' "$m/nope")"

# --- persistence of all of the above ------------------------------------------------------

state() {
	py '
d = a[0]
for n in sorted(os.listdir(d)):
    p = os.path.join(d, n)
    try:
        s = os.lstat(p)
        x = sorted((k, os.getxattr(p, k, follow_symlinks=False)) for k in os.listxattr(p, follow_symlinks=False))
        at = 0 if stat.S_ISLNK(s.st_mode) else s.st_atime_ns  # following a symlink may touch it
        print(n, oct(s.st_mode), s.st_uid, s.st_gid, s.st_size, s.st_blocks, at, s.st_mtime_ns, hash(tuple(x)))
    except OSError as e:
        print(n, "error", errno.errorcode[e.errno])' "$m"
	lsattr -d "$m"/* 2>/dev/null | grep -v '^lsattr' || true
}
PYTHONHASHSEED=0 state >"$t_dir/before"
t_umount "$m"
t_mount "$img" "$m"
if PYTHONHASHSEED=0 state >"$t_dir/after" && diff "$t_dir/before" "$t_dir/after" >"$t_dir/diff"; then
	ok "after remount: modes, owners, sizes, blocks, times, xattrs and flags are the same"
else
	not_ok "after remount: modes, owners, sizes, blocks, times, xattrs and flags are the same"
	head -20 "$t_dir/diff" | sed 's/^/#   /'
fi
chattr -i "$m/imm" "$m/immdir"

# --- atime -------------------------------------------------------------------------------

# Each case reads a file for the first time after a fresh mount (so the read
# reaches the filesystem, not the page cache) and compares atime before/after.
for n in strict strictA relat relat2 noat noatA; do
	echo "contents of $n" >"$m/at_$n"
done
old="2000-01-01 00:00:00 UTC"
touch -a -d "$old" "$m/at_relat" # relatime updates an atime older than mtime
touch -d "$old" "$m/at_relat2"   # ... and not one newer than mtime and ctime, < 24 h old
for n in strict strictA noat noatA; do touch -a -d "$old" "$m/at_$n"; done
chattr +A "$m/at_strictA" "$m/at_noatA"
atime() { stat -c %X "$1"; }
old_s=$(date -d "$old" +%s)

t_remount "$img" "$m" lock=nolock,strictatime
dropcaches
a0=$(atime "$m/at_strict")
cat "$m/at_strict" >/dev/null
a1=$(atime "$m/at_strict")
check "strictatime: a read updates atime ($a0 -> $a1)" test "$a0" -eq "$old_s" -a "$a1" -gt "$old_s"
cat "$m/at_strictA" >/dev/null
check_eq "strictatime + chattr +A: a read leaves atime" "$old_s" "$(atime "$m/at_strictA")"
cat "$m/at_relat2" >/dev/null # now atime > ctime, for the relatime case below

t_remount "$img" "$m" lock=nolock,noatime
dropcaches
cat "$m/at_noat" "$m/at_noatA" >/dev/null
check_eq "noatime: a read leaves atime" "$old_s $old_s" "$(atime "$m/at_noat") $(atime "$m/at_noatA")"

t_remount "$img" "$m" lock=nolock
dropcaches
r0=$(atime "$m/at_relat2")
cat "$m/at_relat" "$m/at_relat2" >/dev/null
r1=$(atime "$m/at_relat")
check "relatime: a read updates an atime older than mtime ($old_s -> $r1)" test "$r1" -gt "$old_s"
check_eq "relatime: a read leaves a recent atime newer than mtime" "$r0" "$(atime "$m/at_relat2")"
check_eq "noatime result persisted after remount" "$old_s" "$(atime "$m/at_noat")"
sync
t_remount "$img" "$m"
check "strictatime update persisted after remount" test "$(atime "$m/at_strict")" -gt "$old_s"

t_umount_fsck "$m" "$img"
t_done
