#!/bin/bash
# t_cluster_plock.sh - fcntl, OFD and flock locks hold across nodes (issue
# 20, defect 3; docs/LOCKING.md "Posix and flock locks").
#
# Two nodes a and b; lock-holding processes on each (plockctl.py, driven
# line by line, so every step waits for its answer, never for a sleep):
#   - the issue's one-liner: while a process on a holds flock(LOCK_EX),
#     `flock -n` on b fails;
#   - flock conversion shared <-> exclusive across nodes;
#   - POSIX byte ranges: disjoint ranges both granted, an overlapping one
#     refused (EAGAIN), F_GETLK on b reports a's lock (type and range, l_pid
#     0: the holder is on another node), unlock of a middle piece splits a
#     lock, adjacent ranges of one owner merge;
#   - F_SETLKW on b waits (not granted while a holds) and is granted when a
#     unlocks;
#   - F_SETLKW interrupted by a signal fails with EINTR and leaves no lock
#     behind;
#   - a deadlock across the two nodes is refused with EDEADLK on one side,
#     and the other side is granted once that side lets go;
#   - closing any fd of a file drops the process's POSIX locks on it (seen
#     from b), exiting drops them too;
#   - OFD locks: owned by the open file, not the process (a POSIX lock of
#     the same process conflicts with it, closing another fd keeps it),
#     dropped when the open file is released;
#   - a SIGKILL of a's shoal-mount while a process on a holds a lock: b
#     cannot take it until a's journal has been recovered, then can.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

helper=$(cd "$(dirname "$0")" && pwd)/plockctl.py
declare -A h_in h_out h_pid

# h_start H: a plockctl.py process called H
h_start() {
	local fd
	rm -f "$t_dir/$1.in" "$t_dir/$1.out"
	mkfifo "$t_dir/$1.in" "$t_dir/$1.out"
	"$T_PY" "$helper" <"$t_dir/$1.in" >"$t_dir/$1.out" &
	h_pid[$1]=$!
	exec {fd}>"$t_dir/$1.in"
	h_in[$1]=$fd
	exec {fd}<"$t_dir/$1.out"
	h_out[$1]=$fd
}
# h_read H SECONDS: H's next answer line, or TIMEOUT
h_read() {
	local line
	if read -r -t "$2" line <&"${h_out[$1]}"; then echo "$line"; else echo TIMEOUT; fi
}
# h H COMMAND...: send one command to H, print its answer (20 s at most)
h() {
	local n=$1
	shift
	echo "$*" >&"${h_in[$n]}"
	h_read "$n" 20
}
h_stop() {
	local pid=${h_pid[$1]:-}
	[ -n "$pid" ] || return 0
	echo exit >&"${h_in[$1]}" 2>/dev/null || true
	exec {h_in[$1]}>&- {h_out[$1]}<&-
	c_wait_pid "$pid" 20 || kill -9 "$pid" 2>/dev/null || true
	h_pid[$1]=
}
my_cleanup() {
	local rc=$? n
	set +e
	for n in "${!h_pid[@]}"; do
		[ -n "${h_pid[$n]}" ] && kill -9 "${h_pid[$n]}" 2>/dev/null
	done
	(exit $rc)
	c_cleanup
}
trap my_cleanup EXIT

c_mkfs 256M 3
c_start_lockd 2
c_mount a
c_mount b
A=$(c_mnt a)
B=$(c_mnt b)
for f in fl pr wt in dl cl ex ofd kill; do touch "$A/$f"; done
h_start a
h_start b

# --- flock ---------------------------------------------------------------
h a open fl "$A/fl" >/dev/null
h b open fl "$B/fl" >/dev/null
check_eq "flock(LOCK_EX) on a" OK "$(h a flock fl ex)"
held=no
flock -n "$B/fl" true || held=yes
check_eq "the issue's one-liner: flock -n on b fails while a holds LOCK_EX" yes "$held"
check_eq "flock LOCK_SH|LOCK_NB on b fails while a holds LOCK_EX" EAGAIN "$(h b flock fl sh nb)"
check_eq "a converts LOCK_EX to LOCK_SH" OK "$(h a flock fl sh)"
check_eq "then b gets LOCK_SH beside it" OK "$(h b flock fl sh nb)"
check_eq "a cannot convert to LOCK_EX while b holds LOCK_SH" EAGAIN "$(h a flock fl ex nb)"
check_eq "b lets go (LOCK_UN)" OK "$(h b flock fl un)"
check_eq "then a converts to LOCK_EX" OK "$(h a flock fl ex nb)"
check_eq "and b's LOCK_SH|LOCK_NB fails again" EAGAIN "$(h b flock fl sh nb)"
h a close fl >/dev/null
# the kernel sends RELEASE (which drops flock locks) after close returned
for ((i = 0; i < 100; i++)); do
	r=$(h b flock fl ex nb)
	[ "$r" = OK ] && break
	sleep 0.1
done
check_eq "closing the file drops a's flock: b gets LOCK_EX" OK "$r"
h b close fl >/dev/null

# --- POSIX byte ranges -----------------------------------------------------
h a open pr "$A/pr" >/dev/null
h b open pr "$B/pr" >/dev/null
check_eq "a: F_SETLK write lock on bytes 0-9" OK "$(h a lk pr setlk wr 0 10)"
check_eq "b: F_SETLK write lock on bytes 10-19 (disjoint) is granted" OK "$(h b lk pr setlk wr 10 10)"
check_eq "b: F_SETLK on bytes 5-14 (overlaps a's) fails" EAGAIN "$(h b lk pr setlk wr 5 10)"
check_eq "b: F_SETLK read lock on bytes 5-9 fails too" EAGAIN "$(h b lk pr setlk rd 5 5)"
got=$(h b lk pr getlk wr 0 5)
check_eq "b: F_GETLK reports a's write lock 0-9 (pid 0: on another node)" "wr 0 10 0" "$got"
check_eq "b: F_GETLK on 20-29 (free; b's own lock ignored) reports none" un "$(h b lk pr getlk wr 15 15)"
check_eq "a: unlock bytes 3-4 splits its lock" OK "$(h a lk pr setlk un 3 2)"
check_eq "b: F_GETLK on 0-9 now reports a's piece 0-2" "wr 0 3 0" "$(h b lk pr getlk wr 0 10)"
check_eq "b: the hole 3-4 is free for b" OK "$(h b lk pr setlk wr 3 2)"
check_eq "b: F_GETLK on 5-9 reports a's piece 5-9" "wr 5 5 0" "$(h b lk pr getlk rd 4 6)"
check_eq "a: write lock on 30-34" OK "$(h a lk pr setlk wr 30 5)"
check_eq "a: write lock on 35-39" OK "$(h a lk pr setlk wr 35 5)"
check_eq "b: F_GETLK sees one merged lock 30-39" "wr 30 10 0" "$(h b lk pr getlk rd 25 20)"
check_eq "a: converts 30-39 to a read lock" OK "$(h a lk pr setlk rd 30 10)"
check_eq "b: a read lock on 30-39 is granted beside it" OK "$(h b lk pr setlk rd 30 10)"
check_eq "a: cannot convert 30-39 back to write while b reads" EAGAIN "$(h a lk pr setlk wr 30 10)"
check_eq "a: a lock to end of file from 100 (len 0)" OK "$(h a lk pr setlk wr 100 0)"
check_eq "b: F_GETLK at 1000000 reports it (len 0: to end of file)" "wr 100 0 0" "$(h b lk pr getlk wr 1000000 1)"
h a close pr >/dev/null
h b close pr >/dev/null

# --- F_SETLKW waits until the holder unlocks ------------------------------
h a open wt "$A/wt" >/dev/null
h b open wt "$B/wt" >/dev/null
check_eq "a holds 0-9" OK "$(h a lk wt setlk wr 0 10)"
check_eq "b: F_SETLKW on 5-9 in a thread" started "$(h b bg wt setlkw wr 5 5)"
check_eq "b's F_SETLKW is not granted while a holds the range" TIMEOUT "$(h_read b 1)"
check_eq "a: F_GETLK on 0-9 does not see b's waiting request" un "$(h a lk wt getlk wr 0 10)"
check_eq "a unlocks" OK "$(h a lk wt setlk un 0 10)"
check_eq "b's F_SETLKW returns granted" "done OK" "$(h_read b 20)"
check_eq "a now sees b's lock" "wr 5 5 0" "$(h a lk wt getlk wr 0 10)"
h a close wt >/dev/null
h b close wt >/dev/null

# --- F_SETLKW interrupted by a signal --------------------------------------
h a open in "$A/in" >/dev/null
h b open in "$B/in" >/dev/null
check_eq "a holds 0" OK "$(h a lk in setlk wr 0 1)"
check_eq "b: F_SETLKW interrupted by SIGALRM fails with EINTR" EINTR "$(h b intr in wr 0 1)"
check_eq "a unlocks" OK "$(h a lk in setlk un 0 1)"
check_eq "b's interrupted request left no lock behind (a sees none)" un "$(h a lk in getlk wr 0 1)"
check_eq "a locks it again" OK "$(h a lk in setlk wr 0 1)"
h a close in >/dev/null
h b close in >/dev/null

# --- deadlock across nodes -------------------------------------------------
h a open dl "$A/dl" >/dev/null
h b open dl "$B/dl" >/dev/null
check_eq "a holds byte 0" OK "$(h a lk dl setlk wr 0 1)"
check_eq "b holds byte 10" OK "$(h b lk dl setlk wr 10 1)"
h a bg dl setlkw wr 10 1 >/dev/null
h b bg dl setlkw wr 0 1 >/dev/null
ra=TIMEOUT
rb=TIMEOUT
for ((i = 0; i < 100; i++)); do
	[ "$ra" = TIMEOUT ] && ra=$(h_read a 0.1)
	[ "$rb" = TIMEOUT ] && rb=$(h_read b 0.1)
	[ "$ra" != TIMEOUT ] || [ "$rb" != TIMEOUT ] && break
done
if [ "$ra" = "done EDEADLK" ] && [ "$rb" = TIMEOUT ]; then
	loser=a winner=b
elif [ "$rb" = "done EDEADLK" ] && [ "$ra" = TIMEOUT ]; then
	loser=b winner=a
else
	loser= winner=
fi
check "the cross-node deadlock is refused with EDEADLK on exactly one side (a: $ra, b: $rb)" \
	[ -n "$loser" ]
if [ -n "$loser" ]; then
	check_eq "$loser lets go of its byte" OK "$(h $loser lk dl setlk un 0 0)"
	check_eq "then $winner's F_SETLKW is granted" "done OK" "$(h_read $winner 20)"
fi
h a close dl >/dev/null
h b close dl >/dev/null

# --- close and exit drop POSIX locks ---------------------------------------
h a open x "$A/cl" >/dev/null
h a open y "$A/cl" >/dev/null
h b open cl "$B/cl" >/dev/null
check_eq "a locks 0-9 through fd x" OK "$(h a lk x setlk wr 0 10)"
check_eq "b cannot lock 0-9" EAGAIN "$(h b lk cl setlk wr 0 10)"
h a close y >/dev/null
check_eq "a closed another fd (y) of the file: its lock is gone for b" OK "$(h b lk cl setlk wr 0 10)"
h a close x >/dev/null
h b close cl >/dev/null

h a open ex "$A/ex" >/dev/null
h b open ex "$B/ex" >/dev/null
check_eq "a locks 0-9" OK "$(h a lk ex setlk wr 0 10)"
check_eq "b cannot lock 0-9" EAGAIN "$(h b lk ex setlk wr 0 10)"
h_stop a
check_eq "a's process exited: b locks 0-9" OK "$(h b lk ex setlk wr 0 10)"
h b close ex >/dev/null
h_start a

# --- OFD locks -------------------------------------------------------------
h a open x "$A/ofd" >/dev/null
h a open y "$A/ofd" >/dev/null
h b open o "$B/ofd" >/dev/null
check_eq "a: F_OFD_SETLK write lock 0-9 on fd x" OK "$(h a lk x ofd_setlk wr 0 10)"
check_eq "b: F_OFD_SETLK on 0-9 fails" EAGAIN "$(h b lk o ofd_setlk wr 0 10)"
check_eq "b: F_SETLK on 5 fails" EAGAIN "$(h b lk o setlk rd 5 1)"
check_eq "a: a POSIX lock of the same process conflicts with its OFD lock" EAGAIN \
	"$(h a lk y setlk wr 0 10)"
check_eq "a: so does an OFD lock through another open file" EAGAIN "$(h a lk y ofd_setlk wr 0 10)"
h a close y >/dev/null
check_eq "a closed fd y: the OFD lock (of fd x) stays" EAGAIN "$(h b lk o ofd_setlk wr 0 10)"
h a close x >/dev/null
for ((i = 0; i < 100; i++)); do
	r=$(h b lk o ofd_setlk wr 0 10)
	[ "$r" = OK ] && break
	sleep 0.1
done
check_eq "a closed fd x: once the file is released, b's F_OFD_SETLK is granted" OK "$r"
h b close o >/dev/null

# --- a node dies holding a lock --------------------------------------------
h a open k "$A/kill" >/dev/null
h b open k "$B/kill" >/dev/null
check_eq "a locks 0-9" OK "$(h a lk k setlk wr 0 10)"
apid=${t_pids[$A]}
kill -9 "$apid"
c_wait_pid "$apid" 10 || true
check_eq "right after a's shoal-mount died, b cannot take the lock" EAGAIN "$(h b lk k setlk wr 0 10)"
r=
early=no
for ((i = 0; i < 300; i++)); do
	rec=no
	grep -q "of node a recovered by node b" "$t_dir/lockd.log" && rec=yes
	r=$(h b lk k setlk wr 0 10)
	if [ "$r" = OK ]; then
		[ "$rec" = yes ] || grep -q "of node a recovered by node b" "$t_dir/lockd.log" ||
			early=yes
		break
	fi
	[ "$r" = EAGAIN ] || break
	sleep 0.1
done
check_eq "once a's journal is recovered, b takes the lock" OK "$r"
check_eq "not before: lockd had logged the recovery" no "$early"
kill -9 "${h_pid[a]}" 2>/dev/null || true
h_pid[a]=
fusermount3 -uz "$A" 2>/dev/null || umount -l "$A" 2>/dev/null || true
t_pids[$A]=
c_mounted[a]=
h_stop b
check "b unmounts cleanly" c_umount b
c_stop_lockd
c_fsck_check
[ $t_failed -eq 0 ] || c_logs
t_done
