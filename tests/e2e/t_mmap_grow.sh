#!/usr/bin/env bash
# t_mmap_grow.sh - a file grown by ftruncate while a shared writable mapping
# of it is being written (Python's mmap.resize: ftruncate, then mremap; the
# workload of seeds/003 and bench mmext mremap).  The kernel drops a FUSE
# file's page cache at every size change and writes each dirty page first by
# itself; shoal-mount starts writeback of such a file before answering the
# SETATTR (fuse/wbkick.c), so the pages leave in large requests.
#
# Checks: every byte is right after a remount (with the kick, with two
# files grown at once, and with max_threads=1, where kicking is off); the
# kernel's page writes of the kicked run are a few per hunk, not one per
# page (`shoal stat` page_writes, wb_kicks); no run hangs (each has 120 s).
. "$(dirname "$0")/lib.sh"

img=$t_dir/img
m=$t_dir/mnt
t_mkfs "$img" 512M -J 16M

H=$((256 << 10)) # hunk: 64 pages
N=32             # hunks: 8 MiB

# grow FILE...: each file grown hunk by hunk through one mapping, in
# parallel processes; every byte a function of the file's number and offset.
grow() {
	timeout 120 "$T_PY" -c '
import mmap, os, sys
H, N = int(sys.argv[1]), int(sys.argv[2])
def pat(k, off):
    return bytes(((off + i) * 7 + k * 13 + (off + i) // 4096) & 255 for i in range(64)) * (H // 64)
pids = []
for k, path in enumerate(sys.argv[3:]):
    pid = os.fork()
    if pid == 0:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, H)
        mm = mmap.mmap(fd, H)
        for h in range(N):
            if h:
                mm.resize((h + 1) * H)   # ftruncate + mremap
            mm[h * H:(h + 1) * H] = pat(k, h * H)
        mm.flush()
        mm.close()
        os.close(fd)
        os._exit(0)
    pids.append(pid)
bad = [p for p in pids if os.waitpid(p, 0)[1] != 0]
print("OK" if not bad else "child failed")' "$H" "$N" "$@"
}

# verify FILE...: the pattern grow wrote, read back with pread.
verify() {
	"$T_PY" -c '
import os, sys
H, N = int(sys.argv[1]), int(sys.argv[2])
def pat(k, off):
    return bytes(((off + i) * 7 + k * 13 + (off + i) // 4096) & 255 for i in range(64)) * (H // 64)
for k, path in enumerate(sys.argv[3:]):
    if os.stat(path).st_size != H * N:
        sys.exit("%s: size %d" % (path, os.stat(path).st_size))
    fd = os.open(path, os.O_RDONLY)
    for h in range(N):
        if os.pread(fd, H, h * H) != pat(k, h * H):
            sys.exit("%s: hunk %d differs" % (path, h))
    os.close(fd)
print("OK")' "$H" "$N" "$@"
}

stat_of() { "$T_SHOAL" stat "$1" | awk -v k="$2" '$1 == k { print $2 }'; }

# --- the default mount: kicks -----------------------------------------------
t_mount "$img" "$m"
if t_is_shoal; then
	pw0=$(stat_of "$m" page_writes)
	k0=$(stat_of "$m" wb_kicks)
fi
check_eq "a file grown by mremap hunk by hunk: the program finishes" OK "$(grow "$m/one")"
if t_is_shoal; then
	pw=$(($(stat_of "$m" page_writes) - pw0))
	kicks=$(($(stat_of "$m" wb_kicks) - k0))
	# Without the kick the kernel writes each page of hunks 1..N-1 alone
	# (64 a hunk); with it, the first resize (nothing noted yet) and then
	# a few large writes a hunk.
	check "the kernel's page writes are a few per hunk, not one per page ($pw for $N hunks of 64 pages)" \
		test "$pw" -lt $((N * 8))
	check "writeback was kicked at (almost) every resize ($kicks of $((N - 1)))" test "$kicks" -ge $((N - 3))
	check_eq "kicking stays on" 0 "$(stat_of "$m" wb_kick_off)"
fi
check_eq "two files grown at once by two processes: the program finishes" OK "$(grow "$m/a" "$m/b")"
t_remount "$img" "$m"
check_eq "after a remount every byte of the grown file is right" OK "$(verify "$m/one")"
check_eq "after a remount every byte of the two files grown at once is right" OK "$(verify "$m/a" "$m/b")"

# --- one worker thread: the kick cannot be served, so it is off -------------
if t_is_shoal; then
	t_remount "$img" "$m" lock=nolock,max_threads=1
	check_eq "max_threads=1: the grow finishes (no kick waits on itself)" OK "$(grow "$m/one")"
	check_eq "max_threads=1: kicking is off" "1 0" "$(stat_of "$m" wb_kick_off) $(stat_of "$m" wb_kicks)"
	pw=$(stat_of "$m" page_writes)
	check "max_threads=1: the kernel writes the pages itself, one at a time ($pw)" test "$pw" -ge $(((N - 1) * 32))
	t_remount "$img" "$m" lock=nolock,max_threads=2
	check_eq "max_threads=2: two files grown at once finish" OK "$(grow "$m/a" "$m/b")"
	t_remount "$img" "$m"
	check_eq "max_threads=1 and 2: every byte right after a remount" OKOK "$(verify "$m/one")$(verify "$m/a" "$m/b")"
fi
t_umount_fsck "$m" "$img"
t_done
