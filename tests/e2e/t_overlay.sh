#!/usr/bin/env bash
# t_overlay.sh - what overlayfs needs of its upper layer, on a single-node
# mount: O_TMPFILE (an unnamed file, nlink 0, freed at close; linkat names
# it unless O_EXCL), renameat2 RENAME_WHITEOUT (the source becomes a 0:0
# character device; NOREPLACE allowed, EXCHANGE refused), both as ext4 in
# the same run; then overlayfs itself with its upper and work directories
# on shoal (lower on the test's temporary directory): copy-up on write,
# delete of a lower file (a whiteout), rename of a lower file, a new file
# and directory, removal of a lower directory, the same view after the
# overlay and shoal are mounted again.  Ends with fsck.shoal -n clean.
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_overlay compares shoal with ext4 by itself: run it with E2E_FS=shoal"
	exit 0
fi
img=$t_dir/img
m=$t_dir/mnt
t_mkfs "$img" 256M -J 8M
t_mount_fg "$img" "$m" "$t_dir/mount.log"
e4img=$t_dir/ext4.img
e4=$t_dir/ext4
mkdir -p "$e4"
truncate -s 64M "$e4img"
mkfs.ext4 -q -F -b 4096 "$e4img" >/dev/null
if mount -o loop "$e4img" "$e4"; then
	t_mounts+=("$e4")
else
	echo "Bail out! cannot loop-mount an ext4 image to compare with"
	exit 1
fi

# ops DIR: O_TMPFILE and RENAME_WHITEOUT steps, one line each.
ops() {
	"$T_PY" - "$1" <<'EOF'
import os, sys, errno, ctypes, stat
d = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
NOREPLACE, EXCHANGE, WHITEOUT = 1, 2, 4
def err():
    return errno.errorcode.get(ctypes.get_errno(), "?")
def linkfd(fd, dst):
    r = libc.linkat(AT_FDCWD, b"/proc/self/fd/%d" % fd, AT_FDCWD, dst.encode(), AT_SYMLINK_FOLLOW)
    return "OK" if r == 0 else err()
def rename2(src, dst, fl):
    r = libc.renameat2(AT_FDCWD, src.encode(), AT_FDCWD, dst.encode(), fl)
    return "OK" if r == 0 else err()
def desc(p):
    try:
        st = os.lstat(p)
    except OSError as e:
        return errno.errorcode[e.errno]
    t = "chr %d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else \
        "dir" if stat.S_ISDIR(st.st_mode) else "reg %d" % st.st_size
    return "%s mode %o nlink %d" % (t, stat.S_IMODE(st.st_mode), st.st_nlink)
def rd(p):
    return open(p, "rb").read()
def ls(p):
    return sorted(n for n in os.listdir(p) if n != "lost+found")
def out(*x):
    print(" ".join(str(y) for y in x))
def sv():
    s = os.statvfs(d)
    return s.f_bfree
os.umask(0o022)
# O_TMPFILE
fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
os.write(fd, b"t" * 10000)
st = os.fstat(fd)
out("tmpfile", stat.S_ISREG(st.st_mode), oct(stat.S_IMODE(st.st_mode)), st.st_nlink, st.st_size,
    ls(d))
out("linkat", linkfd(fd, d + "/named"), desc(d + "/named"), os.fstat(fd).st_nlink, rd(d + "/named")[:3])
out("linkat again", linkfd(fd, d + "/named2"), desc(d + "/named"))
os.close(fd)
fd = os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, 0o600)
out("O_EXCL linkat", linkfd(fd, d + "/excl"), desc(d + "/excl"))
os.close(fd)
try:
    os.open(d + "/named", os.O_TMPFILE | os.O_RDWR, 0o600)
    out("tmpfile in a file: OK")
except OSError as e:
    out("tmpfile in a file", errno.errorcode[e.errno])
try:
    os.open(d, os.O_TMPFILE | os.O_RDONLY, 0o600)
    out("tmpfile read-only: OK")
except OSError as e:
    out("tmpfile read-only", errno.errorcode[e.errno])
os.mkdir(d + "/sub")
fd = os.open(d + "/sub", os.O_TMPFILE | os.O_WRONLY, 0o600)
os.write(fd, b"s")
out("tmpfile in sub, linked elsewhere", linkfd(fd, d + "/fromsub"), desc(d + "/fromsub"))
os.close(fd)
# RENAME_WHITEOUT
for n in ("w1", "w2", "w3"):
    open(d + "/" + n, "w").write(n)
out("whiteout", rename2(d + "/w1", d + "/w1moved", WHITEOUT), desc(d + "/w1"), desc(d + "/w1moved"))
out("whiteout over a target", rename2(d + "/w2", d + "/w3", WHITEOUT), desc(d + "/w2"), rd(d + "/w3"))
out("whiteout|noreplace onto a name", rename2(d + "/w3", d + "/named", WHITEOUT | NOREPLACE))
out("whiteout|noreplace", rename2(d + "/w3", d + "/w3new", WHITEOUT | NOREPLACE), desc(d + "/w3"))
out("whiteout|exchange", rename2(d + "/w3new", d + "/named", WHITEOUT | EXCHANGE))
out("whiteout of a missing name", rename2(d + "/nope", d + "/x", WHITEOUT))
os.mkdir(d + "/wd")
open(d + "/wd/in", "w").write("in")
out("whiteout of a directory", rename2(d + "/wd", d + "/sub/wd", WHITEOUT), desc(d + "/wd"),
    desc(d + "/sub"), ls(d + "/sub/wd"))
out("unlink a whiteout", os.unlink(d + "/w1"), desc(d + "/w1"))
out("names", ls(d))
EOF
}
ops "$m" >"$t_dir/shoal.out" 2>&1
ops "$e4" 2>&1 | sed "s|$e4|DIR|g" >"$t_dir/ext4.out"
sed -i "s|$m|DIR|g" "$t_dir/shoal.out"
check_eq "O_TMPFILE and RENAME_WHITEOUT steps give ext4's results ($(wc -l <"$t_dir/ext4.out") steps)" \
	"" "$(diff "$t_dir/ext4.out" "$t_dir/shoal.out" | head -20)"
check "... and they did run (a tmpfile was linked on ext4)" grep -q "^linkat OK reg 10000" "$t_dir/ext4.out"

# An unlinked tmpfile's blocks come back at its close.
check_eq "a 4 MiB O_TMPFILE file's blocks are free again after its close" OK "$(py '
d = a[0]
def free():
    return os.statvfs(d).f_bfree
b0 = free()
fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"x" * (4 << 20))
os.fsync(fd)
b1 = free()
os.close(fd)
for i in range(100):  # the release reaches shoal after close returned
    if free() == b0:
        break
    __import__("time").sleep(0.05)
print("OK" if b1 <= b0 - 1024 and free() == b0 else "free %d -> %d -> %d" % (b0, b1, free()))' "$m")"

# --- overlayfs with its upper layer on shoal ---------------------------------------
low=$t_dir/lower
ov=$t_dir/ov
mkdir -p "$low/ldir/deep" "$low/gone_dir" "$ov" "$m/up" "$m/work"
echo lower-a >"$low/a"
echo lower-b >"$low/b"
echo lower-c >"$low/c"
echo deep >"$low/ldir/deep/f"
ovmount() { mount -t overlay overlay -o "lowerdir=$low,upperdir=$m/up,workdir=$m/work" "$ov"; }
if ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then
	skip "overlayfs: this kernel has no overlay filesystem"
elif ! ovmount 2>"$t_dir/ov.err"; then
	not_ok "overlayfs mounts with upperdir and workdir on shoal"
	sed 's/^/#   /' "$t_dir/ov.err"
	dmesg 2>/dev/null | grep -i overlay | tail -3 | sed 's/^/#   /'
else
	t_mounts=("$ov" "${t_mounts[@]}") # unmounted first, should the test stop
	ok "overlayfs mounts with upperdir and workdir on shoal"
	check_eq "no overlayfs warning about the upper layer" "" \
		"$(dmesg 2>/dev/null | tail -20 | grep -i 'overlayfs: upper fs' | grep -E 'tmpfile|WHITEOUT|missing' | tail -2)"
	echo more >>"$ov/a"
	rm "$ov/b"
	mv "$ov/c" "$ov/c2"
	echo new >"$ov/new"
	mkdir "$ov/newdir"
	echo x >"$ov/newdir/x"
	rmdir "$ov/gone_dir"
	echo up >"$ov/ldir/deep/f2"
	view() { (cd "$1" && find . -printf '%p %y\n' | sort && cat a c2 new newdir/x ldir/deep/f ldir/deep/f2); }
	want="$(printf '%s\n' '. d' './a f' './c2 f' './ldir d' './ldir/deep d' './ldir/deep/f f' \
		'./ldir/deep/f2 f' './new f' './newdir d' './newdir/x f' \
		lower-a more lower-c new x deep up)"
	check_eq "the overlay shows the changes (copy-up, delete, rename, new, rmdir)" "$want" "$(view "$ov")"
	check_eq "the lower layer is unchanged" "$(printf '%s\n' lower-a lower-b lower-c)" \
		"$(cat "$low/a" "$low/b" "$low/c")"
	check_eq "the upper layer on shoal: the copied-up file, whiteouts for b, c and gone_dir" \
		"a:f b:c0:0 c:c0:0 c2:f gone_dir:c0:0" \
		"$(cd "$m/up" && for n in a b c c2 gone_dir; do
			printf '%s:%s ' "$n" "$(stat -c '%F' "$n" | sed 's/regular file/f/; s/character special file/c/')$(stat -c '%F' "$n" | grep -q character && stat -c '%t:%T' "$n")"
		done | sed 's/ $//')"
	umount "$ov"
	rc=0
	t_umount "$m" || rc=$?
	check_eq "shoal-mount exits 0 at the first unmount" 0 "$rc"
	t_mount_fg "$img" "$m" "$t_dir/mount2.log"
	if ovmount; then
		check_eq "the same view after the overlay and shoal are mounted again" "$want" "$(view "$ov")"
		umount "$ov"
	else
		not_ok "overlayfs mounts again on the remounted shoal"
	fi
fi

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
