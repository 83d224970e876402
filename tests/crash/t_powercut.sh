#!/bin/bash
# t_powercut.sh - the power cut, end to end, over and over on one image: a
# lock=nolock shoal-mount runs tests/crash/workload.py (every kind of change,
# each fsync'ed or fdatasync'ed and only then acknowledged) on a device
# that behaves as a disk with a volatile write cache, and the power goes at
# a random device write: what was flushed is on the image, of what was not
# a random part of the pages is and the rest is lost, and the daemon is dead
# at that instant (shoal-mount's test hook SHOAL_TEST_POWER_CUT, fuse/main.c
# (7)).  After each cut a fresh mount replays the journal, every path the
# workload acknowledged holds exactly what it acknowledged (contents, mode,
# owner, times, extended attributes, link target), every file reads to its
# end, the unmount is clean and fsck.shoal -n finds nothing to fix.
#
# One round: pick the write number N (0..POWERCUT_MAXW-1; the mount itself
# writes a few dozen, so some cuts fall into the mount) and the seed that
# picks the unflushed pages kept (0, nothing kept, one round in four);
# shoal-mount -f with SHOAL_TEST_POWER_CUT=N:SEED; the workload in the
# background; wait until the daemon dies of the cut (bounded: if the
# workload is too slow to reach write N in POWERCUT_WAIT s the test kills
# the daemon, which loses every unflushed write, and says so); detach the
# dead mount and kill the workload; mount again without the hook; check the
# acknowledgements of this round and the previous one (workload.py check)
# and the whole tree; remove older rounds' files; unmount; fsck.shoal -n.
# Prints one ok/not ok line per round and a summary; exits 1 if any failed.
#
# Environment: SHOAL_BUILD, SHOAL_SRC; POWERCUT_ROUNDS (default 25, about 90 s;
# the issue asks 50 per CI run, which takes about 3 min on 2 loaded cores),
# POWERCUT_SEED (default random, printed; a round's N and keep seed derive
# from it), POWERCUT_MAXW (default 600), POWERCUT_WAIT (default 20),
# POWERCUT_KEEP=1 keeps the temporary directory.
set -euo pipefail

: "${SHOAL_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${SHOAL_BUILD:=$SHOAL_SRC/build}"
ROUNDS=${POWERCUT_ROUNDS:-25}
SEED=${POWERCUT_SEED:-$(((RANDOM << 15) | RANDOM))}
MAXW=${POWERCUT_MAXW:-600}
WAIT=${POWERCUT_WAIT:-20}
MKFS=$SHOAL_BUILD/mkfs.shoal
MOUNT=$SHOAL_BUILD/shoal-mount
FSCK=$SHOAL_BUILD/fsck.shoal
WL=$SHOAL_SRC/tests/crash/workload.py
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

dir=$(mktemp -d /tmp/shoal-powercut.XXXXXX)
img=$dir/img
mnt=$dir/mnt
daemon=
wpid=

pid_alive() { # a zombie counts as gone
	local st
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

# lives_on PID: 0 if the process is still there 2 s later.
lives_on() {
	for _ in $(seq 40); do
		pid_alive "$1" || return 1
		sleep 0.05
	done
	return 0
}

detach() {
	if grep -q " $mnt " /proc/mounts; then
		umount -l "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
	fi
}
cleanup() {
	local rc=$?
	set +e
	[ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null
	if [ -n "$daemon" ]; then
		umount "$mnt" 2>/dev/null
		kill -9 "$daemon" 2>/dev/null
	fi
	detach
	wait 2>/dev/null
	if [ "${POWERCUT_KEEP:-0}" = 1 ]; then
		echo "# kept $dir"
	else
		rm -rf "$dir"
	fi
	exit $rc
}
trap cleanup EXIT

# start_daemon [ENV=VALUE]: shoal-mount -f in the background; 0 once it is
# mounted, 1 if the daemon exited first (as one cut during the mount does).
start_daemon() {
	env "$@" "$MOUNT" -f -o lock=nolock "$img" "$mnt" 2>>"$dir/daemon.log" &
	daemon=$!
	for _ in $(seq 400); do
		grep -q " $mnt fuse" /proc/mounts && return 0
		if ! kill -0 "$daemon" 2>/dev/null; then
			wait "$daemon" || true
			daemon=
			return 1
		fi
		sleep 0.05
	done
	return 1
}

stop_daemon() {
	local rc=0
	umount "$mnt" || rc=1
	wait "$daemon" || rc=1
	daemon=
	return $rc
}

mkdir -p "$mnt"
: >"$dir/daemon.log"
"$MKFS" -j 1 -J 8M "$img" 512M >/dev/null
echo "# seed $SEED, $ROUNDS rounds, cut at a write < $MAXW, image $img"
RANDOM=$SEED
failed=0
cuts=0
start=$SECONDS

for round in $(seq 1 "$ROUNDS"); do
	why=
	stats=
	how=
	log=$dir/log.$round
	: >"$log"
	w=$((((RANDOM << 15) | RANDOM) % MAXW))
	keep=$(((RANDOM << 15) | RANDOM))
	[ $((RANDOM % 4)) = 0 ] && keep=0
	ncut0=$(grep -c 'power cut at write' "$dir/daemon.log" 2>/dev/null || true)
	if ! start_daemon SHOAL_TEST_POWER_CUT="$w:$keep"; then
		how="cut during the mount"
	elif ! mkdir "$mnt/r$round" 2>/dev/null; then
		how="cut before the workload"
	else
		"$PY" "$WL" run "$mnt/r$round" "$log" "$((SEED + round))" 2>>"$dir/workload.err" &
		wpid=$!
		t0=$SECONDS
		while pid_alive "$daemon" && [ $((SECONDS - t0)) -lt "$WAIT" ]; do
			if ! pid_alive "$wpid"; then
				# an error the cut caused (ENOENT once the dead
				# mount is detached) may come before the daemon
				# is seen dead
				if ! wait "$wpid" && lives_on "$daemon"; then
					why="the workload failed before the cut"
				fi
				wpid=
				break
			fi
			sleep 0.02
		done
		if pid_alive "$daemon"; then
			kill -9 "$daemon"
			how="write $w not reached in $WAIT s: killed, every unflushed write lost"
		fi
		wait "$daemon" 2>/dev/null || true
		daemon=
		if [ -n "$wpid" ]; then
			kill -9 "$wpid" 2>/dev/null || true
			wait "$wpid" 2>/dev/null || true
			wpid=
		fi
		if [ -n "$why" ]; then
			tail -n 3 "$log" "$dir/workload.err" 2>/dev/null | sed 's/^/#   /'
		fi
	fi
	ncut1=$(grep -c 'power cut at write' "$dir/daemon.log" 2>/dev/null || true)
	if [ "$ncut1" -gt "$ncut0" ]; then
		cuts=$((cuts + 1))
		how="${how:+$how, }cut at write $w, keep seed $keep"
	elif [ -z "$how" ] || [ "${how#write}" = "$how" ]; then
		why="${why:-the daemon died, but not of the cut}"
		tail -n 3 "$dir/daemon.log" | sed 's/^/#   /'
	fi
	detach
	if [ -n "$daemon" ]; then
		kill -9 "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
		daemon=
	fi
	# the mount replays the journal
	if ! start_daemon; then
		why="${why:-mount after the cut failed}"
		tail -n 3 "$dir/daemon.log" | sed 's/^/#   /'
	else
		logs=$log
		[ -f "$dir/log.$((round - 1))" ] && logs="$dir/log.$((round - 1)) $log"
		# shellcheck disable=SC2086
		if ! out=$("$PY" "$WL" check "$mnt" $logs); then
			why="${why:-acknowledged data lost or tree unreadable}"
		fi
		echo "$out" | grep -v '^# [0-9]* acks' || true
		stats=$(echo "$out" | grep '^# [0-9]* acks' | sed 's/^# //')
		if [ "$round" -gt 2 ] && [ -e "$mnt/r$((round - 2))" ]; then
			rm -rf "$mnt/r$((round - 2))" || why="${why:-removing an old round failed}"
		fi
		rm -f "$dir/log.$((round - 2))"
		if ! stop_daemon; then
			why="${why:-unmount failed}"
		elif ! fsck_out=$("$FSCK" -n "$img" 2>&1); then
			why="${why:-fsck.shoal -n found problems}"
			echo "$fsck_out" | tail -n 10 | sed 's/^/#   /'
		fi
	fi
	if [ -z "$why" ]; then
		echo "ok $round - power cut round $round ($how; ${stats:-})"
	else
		failed=$((failed + 1))
		echo "not ok $round - power cut round $round ($how): $why"
		if [ -n "$daemon" ]; then
			stop_daemon || true
		fi
		detach
	fi
done
echo "# $ROUNDS rounds ($cuts cut by the hook), $failed failed, $((SECONDS - start)) s (seed $SEED)"
[ "$failed" -eq 0 ]
