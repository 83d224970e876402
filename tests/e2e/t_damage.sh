#!/usr/bin/env bash
# t_damage.sh - what a reader does with damaged metadata (docs/FORMAT.md
# "Damage"): a file whose block map is damaged reads as EIO, never as a
# shorter file; the daemon logs the block and the inode once and says the
# filesystem needs fsck; EUCLEAN never reaches an application; and fsck.shoal
# repairs what the mount refused.  Images are damaged on the unmounted file
# at offsets computed from the on-disk structures (python below).
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_damage.sh damages shoal's own metadata: nothing to compare with ext4"
	exit 0
fi

img=$t_dir/img
m=$t_dir/mnt
log=$t_dir/mount.log
bs=4096

# py_img 'CODE' ARGS: python with the image open (f), blk(n) reading block n,
# put(n, off, bytes) writing into it, u16/u32/u64(buf, off) little-endian.
py_img() {
	local code=$1
	shift
	"$T_PY" -c "import struct, sys
f = open(sys.argv[1], 'r+b'); a = sys.argv[2:]; bs = $bs
def blk(n):
    f.seek(n * bs); return f.read(bs)
def put(n, off, b):
    f.seek(n * bs + off); f.write(b)
def u16(b, o): return struct.unpack_from('<H', b, o)[0]
def u32(b, o): return struct.unpack_from('<I', b, o)[0]
def u64(b, o): return struct.unpack_from('<Q', b, o)[0]
_t = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _t.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b: c = _t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def seal(n, b):  # write block n as b with a valid mh_crc (FORMAT.md 1.1)
    b = bytearray(b); b[8:12] = bytes(4)
    struct.pack_into('<I', b, 8, crc32c(bytes(b))); put(n, 0, bytes(b))
def leaf_of(ino):  # the leaf of hash-table entry 0 of hashed directory ino
    di = blk(ino)
    assert u32(di, 160) & 0x10000, 'directory is not hashed'
    p = u64(di, 256)
    for _ in range(u16(di, 164) - 1): p = u64(blk(p), 32)
    assert u16(blk(p), 4) == 6, 'not a hash-table block'
    leaf = u64(blk(p), 32)
    assert u16(blk(leaf), 4) == 5, 'not a leaf'
    return leaf
$code" "$img" "$@"
}

# --- 1. a damaged indirect block: EIO, never a truncated file ------------
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"
# 3 MiB at 4 KiB blocks: height 2, the dinode's pointers 0 and 1 name two
# indirect blocks (508 data blocks each); the second one maps 2032 KiB on.
head -c $((3 << 20)) /dev/urandom >"$m/big"
echo fine >"$m/ok"
big=$(stat -c %i "$m/big")
check "t_umount" t_umount "$m"
ind=$(py_img '
di = blk(int(a[0]))
assert u16(di, 164) == 2, "height %d" % u16(di, 164)
p = u64(di, 256 + 8)
assert u16(blk(p), 4) == 4, "not an indirect block"
print(p)' "$big")
# one byte of the second indirect block's pointers changes
py_img 'b = blk(int(a[0])); put(int(a[0]), 100, bytes([b[100] ^ 0x01]))' "$ind"

check "mount the image with a damaged indirect block" t_mount_fg "$img" "$m" "$log"
pid=$T_FG_PID
check_eq "reading the whole file: EIO (not a shorter file)" EIO \
	"$(t_try 'd = open(a[0], "rb").read(); print("# read", len(d), "bytes")' "$m/big")"
rc=0
n=$(cat "$m/big" 2>/dev/null | wc -c) || true
cat "$m/big" >/dev/null 2>&1 || rc=$?
check "cat of the file fails (exit $rc, $n bytes)" test "$rc" -ne 0
check_eq "reading at the damaged block's range: EIO" EIO \
	"$(t_try 'fd = os.open(a[0], os.O_RDONLY); os.pread(fd, 65536, 508 * 4096)' "$m/big")"
check_eq "... again (the kernel kept no short end of file)" EIO \
	"$(t_try 'fd = os.open(a[0], os.O_RDONLY); os.pread(fd, 4096, 600 * 4096)' "$m/big")"
check_eq "the size is still 3 MiB" $((3 << 20)) "$(stat -c %s "$m/big")"
check_eq "the bytes before it still read" OK \
	"$(t_try 'fd = os.open(a[0], os.O_RDONLY); assert len(os.pread(fd, 4096, 4096)) == 4096' "$m/big")"
check_eq "the other file reads" fine "$(cat "$m/ok")"
check "the log names the damaged block $ind and inode $big" \
	grep -q "block $ind (inode $big)" "$log"
check_eq "... once, however often it was read" 1 "$(grep -c "block $ind " "$log")"
check_eq "shoal stat: needs_fsck 1, the block and the inode" "1 $ind $big" \
	"$("$T_SHOAL" stat "$m" | awk '$1 == "needs_fsck" { print $2, $3, $4 }')"
check "the daemon still runs" t_pid_alive "$pid"
check "unmount" t_umount "$m"
rc=0
"$T_FSCK" -n "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "fsck -n finds the damage" 4 "$rc"
# fsck_y_clean WHAT: fsck -y repairs (exit 1), then fsck -n is clean (0).
fsck_y_clean() {
	local rc=0
	"$T_FSCK" -y "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
	check_eq "$1: fsck -y repairs it" 1 "$rc"
	[ "$rc" -eq 1 ] || sed 's/^/#   /' "$t_dir/fsck.out" | head -20
	rc=0
	"$T_FSCK" -n "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
	check_eq "$1: fsck -n is clean after it" 0 "$rc"
	[ "$rc" -eq 0 ] || sed 's/^/#   /' "$t_dir/fsck.out" | head -20
}
fsck_y_clean "damaged indirect block"

# --- 2. a directory leaf chain that loops: EIO, no crash, no hang ---------
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"
mkdir "$m/hdir" "$m/other"
"$T_PY" -c '
import os, sys
for i in range(600):
    open(os.path.join(sys.argv[1], "entry-%04d" % i), "w").close()' "$m/hdir"
echo fine >"$m/other/ok"
hdir=$(stat -c %i "$m/hdir")
check "t_umount" t_umount "$m"
# the leaf's lf_next (byte 40) names the leaf itself, with a valid CRC: only
# the rule that a chain ends catches it
leaf=$(py_img 'l = leaf_of(int(a[0])); b = bytearray(blk(l)); struct.pack_into("<Q", b, 40, l)
seal(l, b); print(l)' "$hdir")
check "mount with a leaf chained to itself (leaf $leaf)" t_mount_fg "$img" "$m" "$log"
pid=$T_FG_PID
check_eq "listing the directory: EIO" EIO "$(timeout 60 "$T_PY" -c '
import os, sys, errno
try:
    print("listed", len(os.listdir(sys.argv[1])))
except OSError as e:
    print(errno.errorcode[e.errno])' "$m/hdir")"
check "the daemon survives the listing" t_pid_alive "$pid"
check_eq "a name that is not there (walks the chain): EIO" EIO \
	"$(timeout 60 "$T_PY" -c '
import os, sys, errno
names = ["nothere-%d" % i for i in range(64)]
r = "ENOENT"
for n in names:
    try:
        os.stat(os.path.join(sys.argv[1], n))
    except OSError as e:
        if e.errno != errno.ENOENT:
            r = errno.errorcode[e.errno]
            break
print(r)' "$m/hdir")"
check_eq "creating names in it fails with EIO for the looping range, nothing else" "EIO" \
	"$(timeout 60 "$T_PY" -c '
import os, sys, errno
r = set()
for i in range(64):
    try:
        open(os.path.join(sys.argv[1], "new-%d" % i), "w").close()
    except OSError as e:
        r.add(errno.errorcode[e.errno])
print(" ".join(sorted(r)))' "$m/hdir")"
check_eq "removing the directory: fails (EIO or ENOTEMPTY), no hang" yes \
	"$(timeout 60 rm -rf "$m/hdir" 2>/dev/null; test -d "$m/hdir" && echo yes)"
check "the daemon still runs" t_pid_alive "$pid"
check_eq "the other directory reads" fine "$(cat "$m/other/ok")"
check "the log names the leaf $leaf and directory $hdir" grep -q "block $leaf (inode $hdir)" "$log"
check "unmount" t_umount "$m"
fsck_y_clean "leaf chained to itself"

# --- 3. an xattr block whose count is wrong: EIO, not a lost attribute ----
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"
echo data >"$m/x"
t_try 'os.setxattr(a[0], "user.one", b"1"); os.setxattr(a[0], "user.two", b"2")' "$m/x" >/dev/null
xi=$(stat -c %i "$m/x")
check "t_umount" t_umount "$m"
# xh_count (byte 32) says 1 of the 2 entries: removing "one" would free the
# block and lose "two"
xb=$(py_img 'x = u64(blk(int(a[0])), 136); b = bytearray(blk(x)); assert u32(b, 32) == 2
struct.pack_into("<I", b, 32, 1); seal(x, b); print(x)' "$xi")
check "mount with a wrong xattr count" t_mount_fg "$img" "$m" "$log"
check_eq "getxattr: EIO" EIO "$(t_try 'os.getxattr(a[0], "user.two")' "$m/x")"
check_eq "removexattr: EIO" EIO "$(t_try 'os.removexattr(a[0], "user.one")' "$m/x")"
check_eq "listxattr: EIO" EIO "$(t_try 'os.listxattr(a[0])' "$m/x")"
check_eq "the data still reads" data "$(cat "$m/x")"
check "the log names the xattr block $xb and inode $xi" grep -q "block $xb (inode $xi)" "$log"
check "unmount" t_umount "$m"
fsck_y_clean "wrong xattr count"

# --- 4. a file size of 2^63 or more: damage to fsck and to the mount -------
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"
head -c 10000 /dev/urandom >"$m/f"
echo small >"$m/s"
head -c 10000 "$m/f" >"$t_dir/f.want"
fi=$(stat -c %i "$m/f")
si=$(stat -c %i "$m/s")
check "t_umount" t_umount "$m"
py_img 'for i in a: b = bytearray(blk(int(i))); struct.pack_into("<Q", b, 48, 1 << 63); seal(int(i), b)' \
	"$fi" "$si"
check "mount with two inodes of di_size 2^63" t_mount_fg "$img" "$m" "$log"
check_eq "stat of the file: EIO" EIO "$(t_try 'os.stat(a[0])' "$m/f")"
check_eq "reading the other: EIO" EIO "$(t_try 'open(a[0], "rb").read()' "$m/s")"
check "the log names inode $fi" grep -q "block $fi: inode size is 2^63 or more" "$log"
check_eq "shoal stat: needs_fsck 1" 1 "$("$T_SHOAL" stat "$m" | awk '$1 == "needs_fsck" { print $2 }')"
check "unmount" t_umount "$m"
rc=0
"$T_FSCK" -n "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "fsck -n finds the sizes" 4 "$rc"
fsck_y_clean "di_size 2^63"
t_mount "$img" "$m"
check_eq "after fsck the file keeps its data (size: its last block's end)" \
	"$(sha256sum <"$t_dir/f.want")" "$(head -c 10000 "$m/f" | sha256sum)"
check_eq "... and a size below 2^63" 12288 "$(stat -c %s "$m/f")"
check_eq "the inline file reads its bytes" small "$(head -c 6 "$m/s" | tr -d '\n')"
check "unmount" t_umount "$m"

# --- 5. EUCLEAN never reaches an application ------------------------------
# A file's data block marked FREE in its group's bitmap: freeing it (the
# truncate) finds it already free, damage that libshoal reports as EUCLEAN.
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"
head -c 20000 /dev/urandom >"$m/t"
ti=$(stat -c %i "$m/t")
check "t_umount" t_umount "$m"
db=$(py_img '
sb = blk(0); rgfirst, rgblocks = u64(sb, 216), u32(sb, 228)
d = u64(blk(int(a[0])), 256)                 # its first data block (height 1)
h = rgfirst + (d - rgfirst) // rgblocks * rgblocks
rg = bytearray(blk(h)); k = d - u64(rg, 40)
assert (rg[96 + k // 4] >> (2 * (k % 4))) & 3 == 1, "not DATA"
rg[96 + k // 4] &= ~(3 << (2 * (k % 4))) & 0xff
struct.pack_into("<I", rg, 52, u32(rg, 52) + 1); seal(h, rg); print(d)' "$ti")
check "mount with data block $db of inode $ti marked free" t_mount_fg "$img" "$m" "$log"
check_eq "truncating the file: EIO, not EUCLEAN" EIO "$(t_try 'os.truncate(a[0], 0)' "$m/t")"
check "the log names block $db and says it answered EIO" \
	grep -q "damaged metadata (block $db, inode .*answering EIO" "$log"
check "unmount" t_umount "$m"
fsck_y_clean "data block marked free"

# --- 6. fsck chooses the superblock as the mount does ----------------------
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"
echo kept >"$m/f"
check "t_umount" t_umount "$m"
cp "$img" "$t_dir/good"
nblocks=$(py_img 'print(u64(blk(0), 48))')
root=$(py_img 'print(u64(blk(0), 192))')
# sbcase WHAT OFF VALUE: primary field at OFF (u64) set to VALUE, CRC valid:
# a primary the mount refuses and opens the backup instead
sbcase() {
	cp "$t_dir/good" "$img"
	py_img 'b = bytearray(blk(0)); struct.pack_into("<Q", b, int(a[0]), int(a[1])); seal(0, b)' "$2" "$3"
	local rc=0
	check "$1: the mount opens it (through the backup)" t_mount_fg "$img" "$m" "$log"
	check_eq "$1: and reads the file" kept "$(cat "$m/f" 2>&1)"
	t_umount "$m" || true
	"$T_FSCK" -n "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
	check_eq "$1: fsck -n reports the primary (not exit 8)" 4 "$rc"
	[ "$rc" -eq 4 ] || sed 's/^/#   /' "$t_dir/fsck.out" | head -5
	fsck_y_clean "$1"
	check_eq "$1: the primary is repaired from the backup" "$nblocks $root" \
		"$(py_img 'print(u64(blk(0), 48), u64(blk(0), 192))')"
	check_eq "$1: the backup is unchanged" "$(dd if="$t_dir/good" bs=4096 skip=$((nblocks - 1)) count=1 status=none | sha256sum)" \
		"$(dd if="$img" bs=4096 skip=$((nblocks - 1)) count=1 status=none | sha256sum)"
	check "$1: it mounts after fsck" t_mount "$img" "$m"
	check_eq "$1: the file is there" kept "$(cat "$m/f" 2>&1)"
	t_umount "$m" || true
}
sbcase "primary sb_blocks past the device" 48 $((1 << 40))
sbcase "primary sb_root outside the groups" 192 5
# both copies bad: nothing is written, exit 8
cp "$t_dir/good" "$img"
py_img 'for n in (0, int(a[0])): put(n, 300, b"garbage")' $((nblocks - 1))
before=$(sha256sum <"$img")
rc=0
"$T_FSCK" -y "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "both superblocks bad: fsck -y exits 8" 8 "$rc"
check_eq "... and writes nothing" "$before" "$(sha256sum <"$img")"

t_done
