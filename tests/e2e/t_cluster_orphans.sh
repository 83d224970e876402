#!/usr/bin/env bash
# t_cluster_orphans.sh - no unlinked inode is left once every node has
# unmounted cleanly (issue 20, defect 5; docs/FORMAT.md section 10).  A
# file one node has open and another node unlinks must be freed by
# whichever lets go last, whatever the order of close, forget and unmount,
# and when both nodes let go at once.
#  1. a has f open, b unlinks it, a closes, the kernel forgets f on a
#     (drop_caches), then both unmount;
#  4. each node creates and unlinks files in its own directory (fsstress
#     and rm -rf found 4-20 orphans this way): the dinode blocks one node
#     frees, with their iopen glocks cached, the other reuses;
#  3. churn: both nodes open, write, and unlink the same names, each
#     sometimes keeping a file open across the other's unlink.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

: "${ORPHAN_CHURN_SECS:=5}"

orphans() {
	local out
	out=$(t_fsck "$c_img" 2>&1)
	echo "$out" | sed -n 's/^\([0-9]*\) orphan inodes will be freed.*/\1/p' | grep . || echo 0
}

# scenario N WHAT: runs python case N against a fresh mount of a and b
scenario() {
	local n=$1 what=$2
	c_mount a
	c_mount b
	"$T_PY" - "$(c_mnt a)" "$(c_mnt b)" "$n" "$ORPHAN_CHURN_SECS" <<'EOF' >"$t_dir/s$n.out" 2>&1
import os, random, sys, time, subprocess
A, B, case, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def drop():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")
if case in (1, 2):
    for i in range(10):
        name = "f%d-%d" % (case, i)
        fd = os.open(os.path.join(A, name), os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"x" * (i * 5000 + 10))
        os.fsync(fd)
        os.unlink(os.path.join(B, name))
        os.close(fd)
    drop()
elif case == 4:
    # each node in its own directory, as fsstress + rm -rf: the dinode
    # blocks one node frees the other reuses
    import threading
    def work(m, tag):
        d = os.path.join(m, "own-" + tag)
        os.mkdir(d)
        end = time.monotonic() + secs
        r = 0
        while time.monotonic() < end:
            r += 1
            for i in range(100):
                with open(os.path.join(d, "%d-%d" % (r, i)), "wb") as f:
                    f.write(b"z" * (i * 97))
            for i in range(100):
                os.unlink(os.path.join(d, "%d-%d" % (r, i)))
    def mixed(m, tag):
        # fsstress-like: renames over names, hard links, held fds, rmdir
        rnd = random.Random(tag)
        d = os.path.join(m, "mix-" + tag)
        os.mkdir(d)
        held = []
        end = time.monotonic() + secs
        while time.monotonic() < end:
            op = rnd.randrange(7)
            a = os.path.join(d, "s%d" % rnd.randrange(8), "n%d" % rnd.randrange(12))
            b = os.path.join(d, "s%d" % rnd.randrange(8), "n%d" % rnd.randrange(12))
            try:
                if op == 0:
                    os.makedirs(os.path.dirname(a), exist_ok=True)
                    fd = os.open(a, os.O_RDWR | os.O_CREAT, 0o644)
                    os.write(fd, b"w" * rnd.randrange(1, 30000))
                    held.append(fd)
                elif op == 1:
                    os.rename(a, b)
                elif op == 2:
                    os.link(a, b)
                elif op == 3:
                    os.unlink(a)
                elif op == 4:
                    os.rmdir(os.path.dirname(a))
                elif op == 5:
                    os.truncate(a, rnd.randrange(50000))
                elif held:
                    os.close(held.pop(rnd.randrange(len(held))))
            except OSError:
                pass
        for fd in held:
            os.close(fd)
        subprocess.run(["rm", "-rf", d], check=True)
    ts = [threading.Thread(target=work, args=(A, "a")), threading.Thread(target=work, args=(B, "b")),
          threading.Thread(target=mixed, args=(A, "a")), threading.Thread(target=mixed, args=(B, "b"))]
    for t in ts: t.start()
    for t in ts: t.join()
else:
    rnd = random.Random(5)
    end = time.monotonic() + secs
    held = []
    while time.monotonic() < end:
        name = "c%d" % rnd.randrange(30)
        m1, m2 = (A, B) if rnd.random() < 0.5 else (B, A)
        try:
            fd = os.open(os.path.join(m1, name), os.O_RDWR | os.O_CREAT, 0o644)
            os.write(fd, b"y" * rnd.randrange(1, 20000))
            held.append(fd)
            os.unlink(os.path.join(m2, name))
        except FileNotFoundError:
            pass
        while len(held) > rnd.randrange(1, 6):
            os.close(held.pop(rnd.randrange(len(held))))
        if rnd.random() < 0.05:
            drop()
    for fd in held:
        os.close(fd)
    drop()
print("done")
EOF
	check_eq "$what: the workload ran" "done" "$(tail -1 "$t_dir/s$n.out")"
	check "$what: both unmount at once, each daemon exits 0" c_umount_parallel a b
	check_eq "$what: no orphan inode is left after both unmounted" 0 "$(orphans)"
	c_fsck_check "$what: fsck.shoal -n is clean"
}

c_mkfs 1G 3
c_start_lockd
scenario 1 "open on a, unlink on b, close and forget on a"
scenario 4 "each node creates and unlinks in its own directory"
scenario 3 "both nodes open and unlink the same names"
[ "$t_failed" -eq 0 ] || c_logs
t_done
