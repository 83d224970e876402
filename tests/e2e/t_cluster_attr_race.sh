#!/usr/bin/env bash
# t_cluster_attr_race.sh - replies that reach the kernel after the glock they
# were made under left the node.  shoal replies once the operation's holds
# ended, so between the operation and the kernel reading its reply another
# node can take the glock: this node's demote worker then tells the kernel
# to drop the inode's attributes (FUSE_NOTIFY_INVAL_INODE) and, for a
# directory, every name (FUSE_NOTIFY_INC_EPOCH), and the other node changes
# the file.  The kernel checks a getattr reply, and a lookup of an inode it
# has, against a notification that came meanwhile (attr_version), and
# stamps the name a lookup or create makes with the epoch of when it sent
# the request; but it took the attributes of an inode it did not have yet
# (lookup, readdirplus, create...) as they were, and stamps readdirplus
# names with the epoch of when it reads the reply.  So, before the fixes:
#   lookup, readdir: with a day's attribute lifetime, c kept the size it
#     had looked up (t_cluster_random.sh, about once in 8 runs: a size of
#     16 read on c well after b's append returned);
#   rootdir_unlink: c kept a name b had unlinked (t_cluster_random.sh:
#     "stale name", an open that succeeded after another node's unlink).
# Entry replies now give a file's attributes a lifetime in a cluster too
# (an inode the kernel had: the attr_version check; one it did not have:
# fuse/main.c tells it again until it has it, now_retry), so lookup and
# create fail without that retry.
# The other cases pass either way (setattr: the kernel checks that reply
# too, on this kernel).
#
# Node c runs with SHOAL_TEST_REPLY_DELAY_MS (fuse/ops.c): every reply
# carrying attributes waits that long after its operation ended.  While c's
# reply waits, b changes (appends to, or unlinks) the file; once both
# returned, c must show b's change (stat, and a read to the end of the
# file), as a (which took no part) does.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

: "${ATTR_RACE_DELAY_MS:=1500}"
c_mkfs 1G 3
c_start_lockd
c_mount a
c_mount b
SHOAL_TEST_REPLY_DELAY_MS=$ATTR_RACE_DELAY_MS c_mount c
A=$(c_mnt a)
B=$(c_mnt b)
C=$(c_mnt c)

# race CASE: one case; prints "OK" or what went wrong.
race() {
	"$T_PY" - "$A" "$B" "$C" "$1" "$ATTR_RACE_DELAY_MS" <<'EOF'
import errno, os, sys, threading, time
A, B, C, d, delay = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) / 1000.0
case = d
slot0, slot1, slot2 = b"0" * 16, b"1" * 16, b"2" * 16
if case.startswith("root"):
    # in the root directory, whose dentry the kernel never looks up again
    f, d = "f-" + d, ""
else:
    f = os.path.join(d, "f")
    os.mkdir(os.path.join(B, d))
if case != "create":
    with open(os.path.join(B, f), "wb") as fp:  # made on b
        fp.write(slot0 + slot1)
os.stat(os.path.join(C, d))  # c's walk to d asks nothing more
done = {}
fd = None
if case == "setattr":
    # c truncates to one slot; b appends one while c's reply waits
    fd = os.open(os.path.join(C, f), os.O_RDWR)
    os.fstat(fd)  # c's kernel has the attributes (size 32)
    def c_op():
        os.ftruncate(fd, 16)
    want = slot0 + slot2
elif case == "create":
    # c makes the file (new to its kernel, a reply with a lifetime for its
    # attributes); b appends to it meanwhile
    def c_op():
        os.close(os.open(os.path.join(C, f), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    want = slot2
elif case == "lookup":
    # c looks the file up (new to its kernel); b appends meanwhile
    def c_op():
        os.stat(os.path.join(C, f))
    want = slot0 + slot1 + slot2
else:
    # c lists the directory (readdirplus: the entry of a file new to its
    # kernel, or one it has); b appends to the file, or unlinks it, meanwhile
    if case.endswith("known"):
        os.stat(os.path.join(C, f))
    if case.endswith("open"):  # d stays in use on c: its dentry and children stay
        dfd = os.open(os.path.join(C, d), os.O_RDONLY | os.O_DIRECTORY)
    def c_op():
        os.listdir(os.path.join(C, d))
    want = None if "unlink" in case else slot0 + slot1 + slot2
def c_run():
    c_op()
    done["c"] = time.monotonic()
t = threading.Thread(target=c_run)
t.start()
time.sleep(delay / 3)  # c's operation is done, its reply waits
if want is None:
    os.unlink(os.path.join(B, f))
else:
    with open(os.path.join(B, f), "ab") as fp:
        fp.write(slot2)
done["b"] = time.monotonic()
t.join()
if fd is not None:
    os.close(fd)
# (in a cluster a readdir hands out no attributes or names, nothing waits)
sys.stderr.write("# %s: b's change ended %.3f s %s c's operation returned\n" %
                 (case, abs(done["c"] - done["b"]), "before" if done["b"] < done["c"] else "after"))
def look(mnt):
    try:
        st = os.stat(os.path.join(mnt, f))
        with open(os.path.join(mnt, f), "rb") as fp:
            return st.st_size, fp.read()
    except OSError as e:
        return errno.errorcode[e.errno], None
on_a, on_c = look(A), look(C)
want = ("ENOENT", None) if want is None else (len(want), want)
bad = []
if on_a != want:
    bad.append("a: %r, want %r" % (on_a, want))
if on_c != want:
    bad.append("c (stat, read): %r, want %r" % (on_c, want))
print("; ".join(bad) if bad else "OK")
sys.exit(1 if bad else 0)
EOF
}

for case in ${ATTR_RACE_CASES:-rootdir_unlink setattr create lookup readdir readdir_known readdir_unlink readdir_unlink_known}; do
	check_eq "while c's $case reply waits, b changes the file: c then shows b's change" "OK" "$(race "$case")"
done

check "shoal umount of a, b and c (each daemon exits 0)" c_umount_all
c_fsck_check
c_retry_check
[ "$t_failed" -eq 0 ] || c_logs
t_done
