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

t_done
