#!/usr/bin/env bash
# t_cluster_mmap.sh - a dirty page of a shared mapping on one node never
# erases another node's write to the same page (issue 20, defect 1).
#
# FUSE does not tell the daemon when a mapping dirties a page (no
# page_mkwrite), so a node can hold dirty pages under no glock at all, and
# the kernel writes them back whenever it likes: after another node wrote
# other bytes of the same page.  Such a writeback (FUSE_WRITE_CACHE)
# writes only the bytes the kernel changed since it was last given the
# page (docs/LOCKING.md "Mapped pages").
#
# Before: the issue's one-liner read zeros where b had written BBBB, and
# with two writers on disjoint 64-byte slots of a 4-page file half the
# slots were lost (mmap against pwrite, pwrite against mmap, mmap against
# mmap).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

: "${MMAP_ROUNDS:=1}" # MMAP_ROUNDS=N for more (each round about 35 s)
c_mkfs 256M 3
c_start_lockd
c_mount a
c_mount b
A=$(c_mnt a)
B=$(c_mnt b)

check_eq "b's pwrite into a page a has dirty in a mapping survives a's msync" "b'BBBB'" "$(py '
import mmap
fa = os.open(a[0] + "/f", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fa, 4096)
fb = os.open(a[1] + "/f", os.O_RDWR)
m = mmap.mmap(fa, 4096)
m[0:4] = b"AAAA"
os.pwrite(fb, b"BBBB", 100)
m.flush()
m.close()
print(os.pread(fb, 4, 100))' "$A" "$B")"
check_eq "... and a's bytes are there too, on both nodes" "b'AAAA' b'AAAA'" "$(py '
print(open(a[0] + "/f", "rb").read(4), open(a[1] + "/f", "rb").read(4))' "$A" "$B")"

# two writers, disjoint 64-byte slots of a 4-page file, each slot written
# once by one of them through a mapping or pwrite, in turns
slots() { # MODE_A MODE_B ROUND
	py '
import mmap, random
mode = {"a": a[2], "b": a[3]}
name = "s-%s-%s-%s" % (a[2], a[3], a[4])
size = 4 * 4096
rnd = random.Random(int(a[4]))
fd, mp = {}, {}
fd["a"] = os.open(a[0] + "/" + name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd["a"], size)
fd["b"] = os.open(a[1] + "/" + name, os.O_RDWR)
for n in "ab":
    if mode[n] == "mmap":
        mp[n] = mmap.mmap(fd[n], size)
order = list(range(size // 64))
rnd.shuffle(order)
want = bytearray(size)
for i, slot in enumerate(order):
    n = "ab"[i % 2]
    data = (b"%s%05d" % (n.encode(), slot)).ljust(64, b".")
    want[slot * 64:(slot + 1) * 64] = data
    if mode[n] == "mmap":
        mp[n][slot * 64:(slot + 1) * 64] = data
    else:
        os.pwrite(fd[n], data, slot * 64)
for n in mp:
    mp[n].flush()
    mp[n].close()
bad = []
for n, m in (("a", a[0]), ("b", a[1])):
    got = open(m + "/" + name, "rb").read()
    lost = [s for s in range(size // 64) if got[s * 64:(s + 1) * 64] != want[s * 64:(s + 1) * 64]]
    if lost:
        bad.append("%s: %d of %d slots lost" % (n, len(lost), size // 64))
print("; ".join(bad) or "ok")' "$A" "$B" "$1" "$2" "$3"
}
for ((r = 1; r <= MMAP_ROUNDS; r++)); do
	for modes in "mmap pwrite" "pwrite mmap" "mmap mmap"; do
		set -- $modes
		check_eq "round $r: disjoint slots, a by $1, b by $2: none lost" ok "$(slots "$1" "$2" "$r")"
	done
done

# the mechanism, not luck: writebacks were merged, none written whole
for n in a b; do
	merged=$(c_stat $n mmap_merged)
	check "node $n merged its writebacks against their bases ($merged pages)" [ "${merged:-0}" -gt 0 ]
	check_eq "node $n wrote no page back whole (no base)" 0 "$(c_stat $n mmap_whole)"
done

check "every node unmounts cleanly" c_umount_all
c_stop_lockd
c_fsck_check
[ $t_failed -eq 0 ] || c_logs
t_done
