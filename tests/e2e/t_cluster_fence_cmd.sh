#!/bin/bash
# t_cluster_fence_cmd.sh - shoal-lockd's --fence-cmd (docs/PROTOCOL.md
# "Fencing"): when a node dies, its journal is recovered only after the
# fence command has exited 0 for it.
#
# Two nodes a and b under a lockd with a 2 s lease and a fence command that
# records its arguments ($1 node, $2 journal id) and succeeds only once the
# test has created $t_dir/allow.  b writes and fsyncs a file, then its
# shoal-mount is killed (SIGKILL).  Then:
#   - lockd runs the command for b (journal 1) and logs its failure; a's
#     `recoveries` counter has not moved (nobody may replay b's journal);
#   - once allowed, the command's next try succeeds and a recovers b's
#     journal (the counter grows, bounded wait), after lockd logged the
#     fence; a reads b's file;
#   - b mounts again and reads it; both unmount; fsck.shoal -n is clean.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

C_LOCKD_OPTS=(--fence-cmd "echo \"\$1 \$2\" >>$t_dir/fenced; [ -e $t_dir/allow ]"
	--fence-timeout 10)
c_mkfs 256M 3
c_start_lockd 2
c_mount a
c_mount b
py 'fd = os.open(a[0], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"written by b\n")
os.fsync(fd)' "$(c_mnt b)/f"
rec0=$(c_stat a recoveries)
bpid=${t_pids[$(c_mnt b)]}
kill -9 "$bpid"
c_wait_pid "$bpid" 10 || true
# the guardian (fuse/guard.c) detaches the dead mount; if it has not yet
fusermount3 -uz "$(c_mnt b)" 2>/dev/null || umount -l "$(c_mnt b)" 2>/dev/null || true
t_pids[$(c_mnt b)]=
c_mounted[b]=

# lockd declares b dead after its lease, runs the command, which fails
for ((i = 0; i < 200; i++)); do
	grep -q "node b (jid 1): fence command failed (exit status 1)" "$t_dir/lockd.log" && break
	sleep 0.1
done
check "lockd runs the fence command when b dies, and logs its failure" \
	grep -q "node b (jid 1): fence command failed (exit status 1); recovery waits" "$t_dir/lockd.log"
check_eq "the command got b's name and journal id" "b 1" "$(head -1 "$t_dir/fenced" 2>/dev/null)"
check_eq "while the command fails, a does not recover b's journal" "$rec0" "$(c_stat a recoveries)"

# allowed: the next try succeeds, then a recovers b
touch "$t_dir/allow"
for ((i = 0; i < 300; i++)); do
	[ "$(c_stat a recoveries)" != "$rec0" ] && break
	sleep 0.1
done
check "once the command succeeds, a recovers b's journal (within 30 s)" \
	[ "$(c_stat a recoveries)" != "$rec0" ]
fenced_at=$(grep -n "node b (jid 1) fenced: journal 1 may be recovered" "$t_dir/lockd.log" | cut -d: -f1)
recovered_at=$(grep -n "journal 1 of node b recovered by node a" "$t_dir/lockd.log" | cut -d: -f1)
check "lockd logged the fence before the recovery" \
	[ -n "$fenced_at" ] && [ -n "$recovered_at" ] && [ "$fenced_at" -lt "$recovered_at" ]
check_eq "a reads what b had fsync'ed" "written by b" "$(cat "$(c_mnt a)/f")"
c_mount b
check_eq "b, mounted again, reads it" "written by b" "$(cat "$(c_mnt b)/f")"
check "every node unmounts cleanly" c_umount_all
c_stop_lockd
c_fsck_check
[ $t_failed -eq 0 ] || c_logs
t_done
