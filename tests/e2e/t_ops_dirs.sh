#!/usr/bin/env bash
# t_ops_dirs.sh - directory operations on a real single-node mount, each with
# its error cases, as ext4 behaves: mkdir/rmdir and link counts, readdir of
# small and large (20,000 entries) directories and while they change, rename
# in all its forms (replace, directories, RENAME_NOREPLACE, RENAME_EXCHANGE),
# fsyncdir, and a file unlinked while open.
. "$(dirname "$0")/lib.sh"

img=$t_dir/img
m=$t_dir/mnt
t_mkfs "$img" 1G -J 8M
t_mount "$img" "$m"

# rename2 FLAGS OLD NEW: renameat2() through libc; prints OK or the errno name.
rename2() {
	t_try '
libc = ctypes.CDLL(None, use_errno=True)
if libc.renameat2(-100, os.fsencode(a[1]), -100, os.fsencode(a[2]), int(a[0])):
    e = ctypes.get_errno()
    raise OSError(e, os.strerror(e))' "$@"
}
NOREPLACE=1
EXCHANGE=2
nlink() { stat -c %h "$1"; }

# --- mkdir / rmdir --------------------------------------------------------------

check_eq "mkdir" OK "$(t_try 'os.mkdir(a[0], 0o750)' "$m/d")"
check_eq "new directory: type, mode 0750 and 2 links" "directory 750 2" "$(stat -c '%F %a %h' "$m/d")"
check_eq "mkdir honours the umask" "700" "$(umask 077 && mkdir "$m/um" && stat -c %a "$m/um")"
check_eq "mkdir on an existing directory: EEXIST" EEXIST "$(t_try 'os.mkdir(a[0])' "$m/d")"
echo x >"$m/file"
check_eq "mkdir on an existing file: EEXIST" EEXIST "$(t_try 'os.mkdir(a[0])' "$m/file")"
check_eq "mkdir in a missing directory: ENOENT" ENOENT "$(t_try 'os.mkdir(a[0])' "$m/nope/d")"
check_eq "mkdir through a file: ENOTDIR" ENOTDIR "$(t_try 'os.mkdir(a[0])' "$m/file/d")"
root_links=$(nlink "$m")
for i in 1 2 3 4 5; do mkdir "$m/d/sub$i"; done
touch "$m/d/f1" "$m/d/f2"
check_eq "parent nlink = 2 + subdirectories (files do not count)" 7 "$(nlink "$m/d")"
check_eq "root nlink counts its subdirectories" "$root_links" "$(($(find "$m" -mindepth 1 -maxdepth 1 -type d | wc -l) + 2))"
check_eq "rmdir of a non-empty directory: ENOTEMPTY" ENOTEMPTY "$(t_try 'os.rmdir(a[0])' "$m/d")"
check_eq "rmdir of a file: ENOTDIR" ENOTDIR "$(t_try 'os.rmdir(a[0])' "$m/d/f1")"
check_eq "rmdir of a missing name: ENOENT" ENOENT "$(t_try 'os.rmdir(a[0])' "$m/d/none")"
check_eq "rmdir of '.': EINVAL" EINVAL "$(t_try 'os.rmdir(a[0])' "$m/d/sub1/.")"
check_eq "rmdir" OK "$(t_try 'os.rmdir(a[0])' "$m/d/sub5")"
check_eq "rmdir: parent nlink drops" 6 "$(nlink "$m/d")"
check_eq "rmdir'd directory is gone" ENOENT "$(t_try 'os.stat(a[0])' "$m/d/sub5")"
check_eq "'..' of a subdirectory is its parent" "$(stat -c %i "$m/d")" "$(stat -c %i "$m/d/sub1/..")"
mkdir -p "$m/deep/a/b/c/d/e/f/g/h"
check_eq "mkdir -p of a deep path" "directory" "$(stat -c %F "$m/deep/a/b/c/d/e/f/g/h")"
check_eq "directory mtime changes when an entry is added" OK "$(py '
d = a[0]; t0 = os.stat(d).st_mtime_ns
import time; time.sleep(0.02)
open(os.path.join(d, "new"), "w").close()
t1 = os.stat(d).st_mtime_ns
time.sleep(0.02)
os.unlink(os.path.join(d, "new"))
print("OK" if t0 < t1 < os.stat(d).st_mtime_ns else "mtime %d %d %d" % (t0, t1, os.stat(d).st_mtime_ns))' "$m/d")"

# --- readdir ------------------------------------------------------------------------

check_eq "readdir of a small directory: exact set with . and .." \
	". .. f1 f2 sub1 sub2 sub3 sub4" "$(ls -a "$m/d" | sort | xargs)"
check_eq "readdir of an empty directory: . and .." ". .." "$(ls -a "$m/d/sub1" | xargs)"
check_eq "d_type of entries" "d sub1 f f1" "$(py '
e = {x.name: x for x in os.scandir(a[0])}
print("d" if e["sub1"].is_dir(follow_symlinks=False) else "?", "sub1",
      "f" if e["f1"].is_file(follow_symlinks=False) else "?", "f1")' "$m/d")"

big=$m/big
mkdir "$big"
py '
for i in range(20000):
    open(os.path.join(a[0], "entry-%05d-%s" % (i, "x" * (i % 40))), "w").close()' "$big"
py '
for i in range(20000):
    print("entry-%05d-%s" % (i, "x" * (i % 40)))' | sort >"$t_dir/all"
ls -f "$big" | grep -v '^\.\.\?$' | sort >"$t_dir/ls1" || true
check_eq "20,000 entries: ls counts 20000" 20000 "$(wc -l <"$t_dir/ls1")"
check "20,000 entries: readdir gives exactly the names created" diff -q "$t_dir/all" "$t_dir/ls1"
check_eq "20,000 entries: no name listed twice" "" "$(uniq -d "$t_dir/ls1" | head -3)"
check_eq "20,000 entries: every name found by stat" 20000 "$(py '
n = 0
for l in open(a[1]):
    try:
        os.stat(os.path.join(a[0], l.strip())); n += 1
    except OSError:
        pass
print(n)' "$big" "$t_dir/all")"
check_eq "20,000 entries: a missing name is ENOENT" ENOENT "$(t_try 'os.stat(a[0])' "$big/entry-99999")"
py '
for i in range(0, 20000, 2):
    os.unlink(os.path.join(a[0], "entry-%05d-%s" % (i, "x" * (i % 40))))' "$big"
py '
for i in range(1, 20000, 2):
    print("entry-%05d-%s" % (i, "x" * (i % 40)))' | sort >"$t_dir/half"
ls -f "$big" | grep -v '^\.\.\?$' | sort >"$t_dir/ls2" || true
check "after deleting half: readdir gives exactly the other 10,000" diff -q "$t_dir/half" "$t_dir/ls2"
check_eq "after deleting half: a deleted name is ENOENT" ENOENT "$(t_try 'os.stat(a[0])' "$big/entry-00000-")"
check_eq "big directory nlink is 2" 2 "$(nlink "$big")"

# readdir while the directory changes: names never touched are listed exactly
# once; none is listed twice.
chg=$m/chg
mkdir "$chg"
check_eq "readdir while creating and deleting: untouched names exactly once" OK "$(py '
d = a[0]
for i in range(3000):
    open(os.path.join(d, "keep-%d" % i), "w").close()
for i in range(1500):
    open(os.path.join(d, "del-%d" % i), "w").close()
seen = []
n_new = n_del = 0
with os.scandir(d) as it:
    for k, e in enumerate(it):
        seen.append(e.name)
        if k % 50 == 0:
            for j in range(60):
                open(os.path.join(d, "new-%d" % n_new), "w").close(); n_new += 1
            for j in range(30):
                if n_del < 1500:
                    os.unlink(os.path.join(d, "del-%d" % n_del)); n_del += 1
dups = set(x for x in seen if seen.count(x) > 1) if len(seen) != len(set(seen)) else set()
missing = [i for i in range(3000) if "keep-%d" % i not in set(seen)]
if dups: print("duplicates:", sorted(dups)[:5])
elif missing: print("missing:", missing[:5], len(missing))
else:
    final = set(os.listdir(d))
    want = set(["keep-%d" % i for i in range(3000)] + ["new-%d" % i for i in range(n_new)] +
               ["del-%d" % i for i in range(n_del, 1500)])
    print("OK" if final == want else "final listing wrong: %d vs %d" % (len(final), len(want)))' "$chg")"

# --- rename ----------------------------------------------------------------------

mkdir -p "$m/r/a" "$m/r/b"
echo one >"$m/r/a/f"
ino=$(stat -c %i "$m/r/a/f")
check_eq "rename a file within a directory" OK "$(t_try 'os.rename(a[0], a[1])' "$m/r/a/f" "$m/r/a/g")"
check_eq "old name gone, new name has the same inode" "ENOENT $ino" \
	"$(t_try 'os.stat(a[0])' "$m/r/a/f") $(stat -c %i "$m/r/a/g")"
check_eq "rename a file across directories" OK "$(t_try 'os.rename(a[0], a[1])' "$m/r/a/g" "$m/r/b/g")"
check_eq "content follows" one "$(cat "$m/r/b/g")"
mkdir "$m/r/a/sd"
touch "$m/r/a/sd/inside"
check_eq "parent link counts before moving a directory" "3 2" "$(nlink "$m/r/a") $(nlink "$m/r/b")"
check_eq "rename a directory across directories" OK "$(t_try 'os.rename(a[0], a[1])' "$m/r/a/sd" "$m/r/b/sd")"
check_eq "parent link counts follow the directory" "2 3" "$(nlink "$m/r/a") $(nlink "$m/r/b")"
check_eq "moved directory's '..' is its new parent" "$(stat -c %i "$m/r/b")" "$(stat -c %i "$m/r/b/sd/..")"
check_eq "moved directory keeps its content" inside "$(ls "$m/r/b/sd")"
check_eq "rename a directory within its directory" OK "$(t_try 'os.rename(a[0], a[1])' "$m/r/b/sd" "$m/r/b/sd2")"
check_eq "parent nlink unchanged by an in-place directory rename" 3 "$(nlink "$m/r/b")"

# Over an existing file: the replaced inode loses a link.
echo new >"$m/r/src"
echo old >"$m/r/dst"
ln "$m/r/dst" "$m/r/dst_other"
check_eq "victim has 2 links" 2 "$(nlink "$m/r/dst_other")"
check_eq "rename over an existing file" OK "$(t_try 'os.rename(a[0], a[1])' "$m/r/src" "$m/r/dst")"
check_eq "target has the source's content, source name gone" "new ENOENT" \
	"$(cat "$m/r/dst") $(t_try 'os.stat(a[0])' "$m/r/src")"
check_eq "replaced inode's link count dropped to 1, content intact" "1 old" \
	"$(nlink "$m/r/dst_other") $(cat "$m/r/dst_other")"
check_eq "rename a file over itself is a no-op" "OK new" \
	"$(t_try 'os.rename(a[0], a[0])' "$m/r/dst") $(cat "$m/r/dst")"
ln "$m/r/dst" "$m/r/dst_hl"
check_eq "rename between two links of one inode: both names stay" "OK 2" \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dst" "$m/r/dst_hl") $(ls "$m/r" | grep -c '^dst$\|^dst_hl$')"

# Directories.
mkdir -p "$m/r/dsrc/keep" "$m/r/dempty" "$m/r/dfull/x"
check_eq "rename a directory over an empty directory" OK \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dsrc" "$m/r/dempty")"
check_eq "it replaced the empty one" keep "$(ls "$m/r/dempty")"
check_eq "rename a directory onto a non-empty directory: ENOTEMPTY" ENOTEMPTY \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dempty" "$m/r/dfull")"
check_eq "rename a directory into its own subdirectory: EINVAL" EINVAL \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dfull" "$m/r/dfull/x/y")"
check_eq "rename a directory onto itself/sub: EINVAL" EINVAL \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dfull" "$m/r/dfull/x")"
check_eq "rename a file onto a directory: EISDIR" EISDIR \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dst" "$m/r/dfull")"
check_eq "rename a directory onto a file: ENOTDIR" ENOTDIR \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dfull" "$m/r/dst")"
check_eq "rename of a missing source: ENOENT" ENOENT "$(t_try 'os.rename(a[0], a[1])' "$m/r/none" "$m/r/x")"
check_eq "rename into a missing directory: ENOENT" ENOENT \
	"$(t_try 'os.rename(a[0], a[1])' "$m/r/dst" "$m/r/none/x")"
check_eq "rename across filesystems: EXDEV" EXDEV "$(t_try 'os.rename(a[0], a[1])' "$m/r/dst" "$t_dir/x")"
check_eq "link counts after directory replacement" "$(($(find "$m/r" -mindepth 1 -maxdepth 1 -type d | wc -l) + 2))" \
	"$(nlink "$m/r")"

# renameat2 flags.
echo A >"$m/r/ea"
echo B >"$m/r/eb"
check_eq "RENAME_NOREPLACE onto an existing name: EEXIST" EEXIST \
	"$(rename2 $NOREPLACE "$m/r/ea" "$m/r/eb")"
check_eq "RENAME_NOREPLACE left both untouched" "A B" "$(cat "$m/r/ea" "$m/r/eb" | xargs)"
check_eq "RENAME_NOREPLACE onto a free name" "OK A" \
	"$(rename2 $NOREPLACE "$m/r/ea" "$m/r/ec") $(cat "$m/r/ec")"
mv "$m/r/ec" "$m/r/ea"
ia=$(stat -c %i "$m/r/ea")
ib=$(stat -c %i "$m/r/eb")
check_eq "RENAME_EXCHANGE of two files" OK "$(rename2 $EXCHANGE "$m/r/ea" "$m/r/eb")"
check_eq "contents and inodes swapped" "B A $ib $ia" \
	"$(cat "$m/r/ea" "$m/r/eb" | xargs) $(stat -c %i "$m/r/ea") $(stat -c %i "$m/r/eb")"
mkdir -p "$m/r/xd/child"
echo F >"$m/r/b/xf"
rl=$(nlink "$m/r")
bl=$(nlink "$m/r/b")
check_eq "RENAME_EXCHANGE of a directory with a file in another directory" OK \
	"$(rename2 $EXCHANGE "$m/r/xd" "$m/r/b/xf")"
check_eq "types swapped" "regular file directory" "$(stat -c %F "$m/r/xd") $(stat -c %F "$m/r/b/xf")"
check_eq "file content and directory content followed" "F child" "$(cat "$m/r/xd") $(ls "$m/r/b/xf")"
check_eq "parents' link counts moved with the directory" "$((rl - 1)) $((bl + 1))" \
	"$(nlink "$m/r") $(nlink "$m/r/b")"
check_eq "exchanged directory's '..' is its new parent" "$(stat -c %i "$m/r/b")" \
	"$(stat -c %i "$m/r/b/xf/..")"
check_eq "RENAME_EXCHANGE with a missing target: ENOENT" ENOENT \
	"$(rename2 $EXCHANGE "$m/r/ea" "$m/r/nothere")"
check_eq "RENAME_EXCHANGE|RENAME_NOREPLACE: EINVAL" EINVAL \
	"$(rename2 $((EXCHANGE | NOREPLACE)) "$m/r/ea" "$m/r/eb")"
check_eq "RENAME_EXCHANGE of a directory into its own subdirectory: EINVAL" EINVAL \
	"$(rename2 $EXCHANGE "$m/r/b" "$m/r/b/xf/child")"

# Renames inside the big (hashed) directory.
check_eq "rename within a hashed directory, then over an existing entry" OK "$(py '
d = a[0]
os.rename(os.path.join(d, "entry-00001-x"), os.path.join(d, "renamed-1"))
os.rename(os.path.join(d, "entry-00003-xxx"), os.path.join(d, "entry-00005-xxxxx"))
names = set(os.listdir(d))
ok = "renamed-1" in names and "entry-00001-x" not in names and "entry-00003-xxx" not in names \
     and "entry-00005-xxxxx" in names and len(names) == 9999
print("OK" if ok else "bad: %d names" % len(names))' "$big")"

# --- fsyncdir -------------------------------------------------------------------

check_eq "fsync of a directory fd" OK "$(t_try '
fd = os.open(a[0], os.O_RDONLY | os.O_DIRECTORY)
os.fsync(fd); os.close(fd)' "$m/r")"
check_eq "fsync of the big directory after changes" OK "$(t_try '
open(os.path.join(a[0], "synced-entry"), "w").close()
fd = os.open(a[0], os.O_RDONLY | os.O_DIRECTORY)
os.fsync(fd); os.close(fd)' "$big")"

# --- unlinked while open -----------------------------------------------------------

sync
free0=$(stat -f -c %a "$m")
fifo=$t_dir/ctl
mkfifo "$fifo" "$fifo.back"
# A Python process keeps the file open across the checks below.
py '
fd = os.open(a[0], os.O_RDWR | os.O_CREAT, 0o644)
data = bytes(range(256)) * (32 << 12)          # 32 MiB
os.write(fd, data)
os.fsync(fd)
os.unlink(a[0])
back = open(a[2], "w")
back.write("unlinked %d\n" % os.fstat(fd).st_nlink); back.flush()
open(a[1]).read()                               # wait for "go on"
ok = os.pread(fd, len(data), 0) == data
os.pwrite(fd, b"still writable", 1000)
ok = ok and os.pread(fd, 14, 1000) == b"still writable"
back.write("readback %s\n" % ("ok" if ok else "bad")); back.flush()
os.close(fd)
back.write("closed\n"); back.close()' "$m/open_unlinked" "$fifo" "$fifo.back" &
exec 7<>"$fifo.back" # read-write: opening does not wait for the writer
read -r -t 60 l1 <&7 || l1="timeout"
check_eq "open file unlinked: fstat nlink 0" "unlinked 0" "$l1"
check_eq "its name is gone" ENOENT "$(t_try 'os.stat(a[0])' "$m/open_unlinked")"
sync
free1=$(stat -f -c %a "$m")
check "space stays allocated while it is open ($free0 -> $free1 blocks free)" \
	test $((free0 - free1)) -ge 8000
timeout 60 bash -c "echo go >'$fifo'" || true
read -r -t 60 l2 <&7 || l2="timeout"
check_eq "read back through the fd after unlink" "readback ok" "$l2"
read -r -t 60 l3 <&7 || l3="timeout"
exec 7<&-
wait
check_eq "closed" closed "$l3"
sync
for ((i = 0; i < 50; i++)); do
	free2=$(stat -f -c %a "$m")
	[ $((free0 - free2)) -le 256 ] && break
	sleep 0.2
done
check "space freed after the last close ($free0 -> $free2 blocks free)" test $((free0 - free2)) -le 256

# An unlinked file held open by a process that is then killed.
"$T_PY" -c '
import os, sys, time
a = sys.argv[1:]
fd = os.open(a[0], os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"z" * (8 << 20)); os.fsync(fd)
os.unlink(a[0])
print("ready", flush=True)
time.sleep(3600)' "$m/held" >"$t_dir/held.out" &
holder=$!
for ((i = 0; i < 100; i++)); do grep -q ready "$t_dir/held.out" && break; sleep 0.1; done
check_eq "a second file is unlinked and held open" ready "$(cat "$t_dir/held.out")"

# --- persistence ----------------------------------------------------------------

ls -f "$big" | grep -v '^\.\.\?$' | sort >"$t_dir/ls3" || true
kill "$holder"
wait "$holder" 2>/dev/null || true
if t_umount "$m"; then ok "unmount"; else not_ok "unmount"; fi
t_mount "$img" "$m"
ls -f "$big" | grep -v '^\.\.\?$' | sort >"$t_dir/ls4" || true
check "after remount the big directory lists the same names" diff -q "$t_dir/ls3" "$t_dir/ls4"
check_eq "after remount link counts of r, r/a, r/b" "$(find "$m/r" -mindepth 1 -maxdepth 1 -type d | wc -l) 2 4" \
	"$(($(nlink "$m/r") - 2)) $(nlink "$m/r/a") $(nlink "$m/r/b")"
check_eq "after remount the exchanged pair is still swapped" "B A" "$(cat "$m/r/ea" "$m/r/eb" | xargs)"
check_eq "after remount the unlinked files are gone" "ENOENT ENOENT" \
	"$(t_try 'os.stat(a[0])' "$m/open_unlinked") $(t_try 'os.stat(a[0])' "$m/held")"
sync
for ((i = 0; i < 50; i++)); do
	free3=$(stat -f -c %a "$m")
	[ $((free0 - free3)) -le 256 ] && break
	sleep 0.2
done
check "after remount the space of both unlinked files is free ($free0 -> $free3)" \
	test $((free0 - free3)) -le 256
py '
for n in os.listdir(a[0]):
    os.unlink(os.path.join(a[0], n))' "$big"
check_eq "the emptied big directory can be removed" OK "$(t_try 'os.rmdir(a[0])' "$big")"
t_umount_fsck "$m" "$img"
t_done
