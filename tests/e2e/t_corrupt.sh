#!/usr/bin/env bash
# t_corrupt.sh - damaged metadata is detected, reported and contained: after
# overwriting bytes in the middle of a file's dinode, an inline directory's
# dinode and a hashed directory's leaf block on the unmounted image, using
# them gives EIO (no crash, no garbage), the daemon keeps serving, everything
# else reads fine, and the daemon's log names the damaged block.
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_corrupt.sh damages shoal's own metadata: nothing to compare with ext4"
	exit 0
fi

img=$t_dir/img
m=$t_dir/mnt
log=$t_dir/mount.log
t_mkfs "$img" 128M -J 4M
t_mount "$img" "$m"

mkdir "$m/d" "$m/vdir" "$m/hdir" "$m/other"
head -c 100 /dev/urandom >"$m/d/a"
head -c $((3 << 20)) /dev/urandom >"$m/d/b"
head -c 200 /dev/urandom >"$m/d/victim"
for i in $(seq 10 39); do echo "$i" >"$m/d/s$i"; done # names around the victim
for i in 1 2 3; do echo "v$i" >"$m/vdir/v$i"; done
"$T_PY" -c '
import os, sys
for i in range(2000):
    open(os.path.join(sys.argv[1], "entry-%04d" % i), "w").write(str(i))' "$m/hdir"
echo fine >"$m/other/ok"
bs=$(stat -f -c %S "$m")
(cd "$m" && sha256sum d/a d/b other/ok) >"$t_dir/sums"
victim=$(stat -c %i "$m/d/victim")
vdir=$(stat -c %i "$m/vdir")
hdir=$(stat -c %i "$m/hdir")
check "t_umount" t_umount "$m"
check_eq "block size" 4096 "$bs"

# A hashed directory's leaf: dinode payload -> hash-table block -> leaf.
leaf=$("$T_PY" - "$img" "$hdir" "$bs" <<'EOF'
import struct, sys
img, ino, bs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
f = open(img, "rb")
def blk(n):
    f.seek(n * bs); return f.read(bs)
di = blk(ino)
flags, height = struct.unpack_from("<IH", di, 160)
assert flags & 0x10000, "directory is not hashed"
p = struct.unpack_from("<Q", di, 256)[0]      # first block of the hash table
for _ in range(height - 1):                    # through indirect blocks
    p = struct.unpack_from("<Q", blk(p), 32)[0]
ht = blk(p)
assert struct.unpack_from("<H", ht, 4)[0] == 6, "not a hash-table block"
leaf = struct.unpack_from("<Q", ht, 32)[0]     # the leaf of hash-table entry 0
assert struct.unpack_from("<H", blk(leaf), 4)[0] == 5, "not a leaf block"
print(leaf)
EOF
) || true
check "found a leaf block of the hashed directory ($leaf)" test -n "$leaf"

# damage BLOCK: 16 random bytes at offset 1000 of the block.
damage() { head -c 16 /dev/urandom | dd of="$img" bs=1 seek=$(($1 * bs + 1000)) conv=notrunc status=none; }
damage "$victim"
damage "$vdir"
[ -n "$leaf" ] && damage "$leaf"

check "mount the damaged image (shoal-mount -f, stderr to a file)" t_mount_fg "$img" "$m" "$log"
pid=$T_FG_PID

# A damaged file dinode.
check_eq "stat of the damaged file: EIO" EIO "$(t_try 'os.stat(a[0])' "$m/d/victim")"
check_eq "reading the damaged file: EIO" EIO "$(t_try 'open(a[0], "rb").read()' "$m/d/victim")"
check_eq "writing the damaged file: EIO" EIO "$(t_try 'open(a[0], "r+b").write(b"x")' "$m/d/victim")"
check "the daemon still runs" t_pid_alive "$pid"
check "the other files of that directory read fine" bash -c "cd '$m' && sha256sum -c --quiet '$t_dir/sums'"
others="a b $(seq -f 's%g' 10 39 | xargs)"
check_eq "listing that directory with attributes (ls -l) shows every other file" "$others" \
	"$(ls -l "$m/d" 2>/dev/null | awk 'NR > 1 && $NF != "victim" { print $NF }' | sort | xargs)"
check_eq "a plain listing names them all, the damaged one too" "$others victim" \
	"$(ls "$m/d" 2>/dev/null | sort | xargs)"
check "the log names the damaged dinode block $victim" grep -qw "$victim" "$log"

# A damaged inline directory.
check_eq "listing the damaged directory: EIO" EIO "$(t_try 'os.listdir(a[0])' "$m/vdir")"
check_eq "a name inside it: EIO" EIO "$(t_try 'os.stat(a[0])' "$m/vdir/v1")"
check_eq "creating inside it: EIO" EIO "$(t_try 'open(a[0], "w")' "$m/vdir/new")"
check "the log names the damaged directory block $vdir" grep -qw "$vdir" "$log"

# A damaged leaf of a hashed directory.
if [ -n "$leaf" ]; then
	r=$("$T_PY" -c '
import os, sys, errno
try:
    n = len(os.listdir(sys.argv[1]))
    print("listed", n)
except OSError as e:
    print(errno.errorcode[e.errno])' "$m/hdir")
	check_eq "listing a hashed directory with a damaged leaf: EIO" EIO "$r"
	check "the log names the damaged leaf block $leaf" grep -qw "$leaf" "$log"
fi

# Everything else is fine, and the mount still writes.
check_eq "other directories list fine" "ok" "$(ls "$m/other")"
check_eq "the root lists fine" "d hdir other vdir" "$(ls "$m" | xargs)"
check_eq "new files can be written elsewhere" OK "$(t_try '
open(a[0], "w").write("after damage")
assert open(a[0]).read() == "after damage"' "$m/other/new")"
check "the daemon still runs at the end" t_pid_alive "$pid"
check "shoal stat counts corrupt blocks" test "$("$T_SHOAL" stat "$m" | awk '$1 == "corrupt" { print $2 }')" -ge 2
check "no crash: the daemon unmounts and exits 0" t_umount "$m"
if [ -s "$log" ]; then sed 's/^/#   log: /' "$log" | head -10; fi
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
if [ $rc -eq 77 ]; then
	skip "fsck.shoal -n finds the damage: build/fsck.shoal not built"
else
	check "fsck.shoal -n reports the damage (exit $rc, want 4)" test $rc -eq 4
fi
t_done
