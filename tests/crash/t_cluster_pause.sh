#!/bin/bash
# t_cluster_pause.sh - a node paused past its lease never writes to the disk
# once it may have been fenced (issue 21, defect 2).
#
# Two nodes a and b on one image, a private shoal-lockd with a short lease.
# One round:
#   1. b mounts (shoal-mount -f with $SHOAL_TEST_WRITE_LOG: every device
#      write and flush of b is logged with its start and end time and b's
#      lease deadline, core/dev.c (9)); from its fresh view the filesystem
#      must be what a left at the end of the last round (the model);
#   2. b works (three tests/crash/pause_work.py node processes: creates, overwrites,
#      truncates, renames, unlinks, mkdirs, fsyncs in its directory bN and
#      writes into the shared files) for 0.2-1.2 s;
#   3. b's shoal-mount gets SIGSTOP, in the middle of that work;
#   4. the event: a's `recoveries` counter (shoal stat) grows - lockd has
#      declared b dead after its lease and a has replayed b's journal
#      (bounded: lease + 30 s);
#   5. a's turn (pause_work.py survivor): it rewrites, removes and renames
#      part of b's files, rewrites every shared file whole, adds files of
#      its own, fsyncs everything and syncfs; the tree a then sees is the
#      new model;
#   6. b's shoal-mount gets SIGCONT: a write through b's mount must fail
#      with EIO (b is fenced), b's worker ends on an error;
#   7. b unmounts (lazily if `shoal umount` fails: a fenced node) and its
#      daemon exits; then, from a: the tree is the model;
#   8. b's write log: no write of b succeeded that ended after b's lease
#      deadline (per the log; a write already in the kernel when b was
#      stopped ends, as the log sees it, when b runs again: those are
#      counted apart, see below), and none succeeded after SIGCONT.
# After the rounds b mounts once more and checks the model, then both
# unmount and fsck.shoal -n must find the image clean.
#
# What fails without the lease check (the code before it, a707ed3): b writes
# journal and resource-group blocks right after SIGCONT; b's next mount
# replays that stale transaction over a's newer data: its fresh view
# differs from the model (old contents of files a rewrote, files a
# removed), and fsck finds blocks used twice and wrong bitmap states (3 of
# 10 rounds, 3 fsck errors, in one run).  There is no write log on that
# code: the last check counts the rounds without one.
#
# A write that passed the lease check just before b was stopped, but whose
# system call had not begun, is submitted when b runs again: the lease
# check alone cannot stop it (issue 21's second rule, the on-disk journal
# generation, would).  The log cannot tell it from a write already in the
# kernel at the stop; both are reported, as "in flight at the stop".
#
# Environment: SHOAL_BUILD, SHOAL_SRC; PAUSE_ROUNDS (default 6, about 50 s
# on a loaded 2-CPU machine: 8 s a round; the issue's 30 take 4 minutes), PAUSE_SEED (default random, printed),
# PAUSE_LEASE (lockd's --lease in seconds, default 3: with 2 the survivor,
# starved of CPU for lease/2 on a loaded machine, fenced itself once in a
# 30-round run), E2E_KEEP=1 keeps the
# temporary directory.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../e2e/lib_cluster.sh"

: "${SHOAL_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
ROUNDS=${PAUSE_ROUNDS:-6}
SEED=${PAUSE_SEED:-$(((RANDOM << 15) | RANDOM))}
LEASE=${PAUSE_LEASE:-3}
WORK=$SHOAL_SRC/tests/crash/pause_work.py
RANDOM=$SEED
echo "# seed $SEED, $ROUNDS rounds, lease $LEASE s"
start=$SECONDS

boot_ns() { "$T_PY" -c 'import time; print(time.clock_gettime_ns(time.CLOCK_BOOTTIME))'; }

# tree NODE FILE: the model as NODE sees it now, into FILE.
tree() { timeout 60 "$T_PY" "$WORK" tree "$(c_mnt "$1")" >"$2" 2>&1; }

# same_tree WHAT NODE: NODE's tree is the model.
same_tree() {
	local out=$t_dir/tree.$2
	tree "$2" "$out" || true
	if cmp -s "$t_dir/model" "$out"; then
		ok "$1"
	else
		not_ok "$1: $(diff "$t_dir/model" "$out" | grep -c '^[<>]') lines differ"
		diff "$t_dir/model" "$out" | head -8 | sed 's/^/#   /' || true
	fi
}

# mount_b ROUND: mount b with its write log; retry while lockd still
# refuses the name (bounded: 15 s).
mount_b() {
	local i
	for ((i = 0; i < 30; i++)); do
		SHOAL_TEST_WRITE_LOG=$t_dir/wlog.$1 c_mount b >/dev/null && return 0
		c_mounted[b]=
		sleep 0.5
	done
	c_mount b # once more, printing why
}

# check_wlog ROUND T_CONT: step 8 on b's write log of ROUND.  b cannot
# begin anything while it is stopped: a line that began before T_CONT (taken
# right before SIGCONT) and ended after it was under way at the stop.
check_wlog() {
	local f=$t_dir/wlog.$1 res
	if [ ! -s "$f" ]; then
		echo "#   round $1: b wrote no write log"
		nolog=$((nolog + 1))
		return
	fi
	# W|F pid start end off len deadline err; deadline 0: no lease, 1: given up
	res=$(awk -v cont="$2" '
		$1 != "W" && $1 != "F" { next }
		$8 != 0 { refused++; next }
		$3 < cont && $4 > cont { inflight++; next }
		($7 == 1) || ($7 > 1 && $4 > $7) || ($3 > cont) {
			late++
			if (late <= 3)
				printf "#   late: %s\n", $0
		}
		{ n++ }
		END { printf "%d %d %d %d\n", n, late, inflight, refused }' "$f")
	read -r n late inflight refused <<<"$(echo "$res" | tail -1)"
	echo "$res" | sed '$d'
	check_eq "round $1: no write of b landed after its lease ($n writes before the stop, $inflight in flight at the stop, $refused refused)" 0 "$late"
	inflight_all=$((inflight_all + inflight))
	refused_all=$((refused_all + refused))
}

c_mkfs 1G 3
c_start_lockd "$LEASE"
c_mount a
"$T_PY" "$WORK" setup "$(c_mnt a)"
tree a "$t_dir/model"
inflight_all=0
nolog=0
refused_all=0
rfailed=0

for ((round = 1; round <= ROUNDS; round++)); do
	f0=$t_failed
	if ! mount_b "$round"; then
		not_ok "round $round: b mounts"
		break
	fi
	same_tree "round $round: b's fresh mount sees the model" b

	# 2-3: b works, and is stopped in the middle of it
	bwork=()
	for k in 0 1 2; do
		"$T_PY" "$WORK" node "$(c_mnt b)" "b$round/w$k" "$((SEED + 3 * round + k))" \
			>>"$t_dir/bwork.$round" 2>&1 &
		bwork+=($!)
	done
	for ((k = 0; k < 100; k++)); do # the workers have begun (10 s at most)
		[ -d "$(c_mnt b)/b$round/w0" ] && [ -d "$(c_mnt b)/b$round/w1" ] &&
			[ -d "$(c_mnt b)/b$round/w2" ] && break
		sleep 0.1
	done
	sleep "0.$((2 + RANDOM % 10))"
	bpid=${t_pids[$(c_mnt b)]}
	rec0=$(c_stat a recoveries)
	kill -STOP "$bpid"

	# 4: lockd declares b dead and a replays its journal
	t0=$SECONDS
	while [ "$(c_stat a recoveries)" = "$rec0" ] && [ $((SECONDS - t0)) -lt $((LEASE + 30)) ]; do
		sleep 0.1
	done
	rec1=$(c_stat a recoveries)
	if [ "$rec1" = "$rec0" ]; then
		not_ok "round $round: a recovers b's journal within $((LEASE + 30)) s"
		c_logs
		kill -CONT "$bpid"
		break
	fi
	t_rec=$((SECONDS - t0))

	# 5: a's turn; its tree is the model from now on
	if ! timeout 60 "$T_PY" "$WORK" survivor "$(c_mnt a)" "b$round" "$((SEED + 1000 + round))" \
		>"$t_dir/awork" 2>&1; then
		not_ok "round $round: a's work after the recovery"
		sed 's/^/#   /' "$t_dir/awork" | tail -5
	fi
	tree a "$t_dir/model"

	# 6: b wakes up fenced
	t_cont=$(boot_ns)
	kill -CONT "$bpid"
	got=$(T_RUNAS=(timeout 30); t_try '
		fd = os.open(a[0], os.O_WRONLY | os.O_CREAT, 0o644)
		os.write(fd, b"x" * 10000)
		os.fsync(fd)' "$(c_mnt b)/after-wake-$round")
	check_eq "round $round: b refuses writes after it wakes up (recovered after ${t_rec} s)" EIO "$got"
	for k in "${bwork[@]}"; do
		c_wait_pid "$k" 30 >/dev/null 2>&1 || kill -9 "$k" 2>/dev/null || true
	done
	echo "#   b's work: $(tr '\n' ';' <"$t_dir/bwork.$round")"

	# 7: b goes; a's view is the model
	if ! c_umount b >/dev/null 2>&1; then
		mnt=$(c_mnt b)
		mountpoint -q "$mnt" && umount -l "$mnt" 2>/dev/null
		c_wait_pid "$bpid" 30 >/dev/null 2>&1 || { kill -9 "$bpid" 2>/dev/null; c_wait_pid "$bpid" 5; } || true
		t_pids[$mnt]=
		t_fg[$mnt]=
		c_mounted[b]=
	fi
	same_tree "round $round: after b's unmount a sees what it left" a

	# 8: b's write log
	check_wlog "$round" "$t_cont"
	if [ "$t_failed" -gt "$f0" ]; then
		tail -5 "$t_dir/b.log" | sed 's/^/#   b: /'
		rfailed=$((rfailed + 1))
		[ $rfailed -ge 3 ] && { echo "# 3 rounds failed: stopping"; break; }
	fi
done

if mount_b end; then
	same_tree "after the rounds b's fresh mount sees the model" b
	same_tree "after the rounds a sees the model" a
else
	not_ok "b mounts after the rounds"
fi
check "every node unmounts cleanly" c_umount_all
c_stop_lockd
c_fsck_check
check_eq "b wrote its write log (\$SHOAL_TEST_WRITE_LOG) in every round (rounds without)" 0 "$nolog"
echo "# $((SECONDS - start)) s; writes in flight at a stop: $inflight_all; refused after the lease: $refused_all"
t_done
