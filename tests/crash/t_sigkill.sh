#!/bin/bash
# t_sigkill.sh - the mount daemon killed with SIGKILL in the middle of a
# mixed workload, over and over on one image: after each kill a fresh mount
# replays the journal, every path the workload had fsync'ed (file, then its
# directory) holds exactly what it acknowledged, every file reads to its
# end, the unmount is clean and fsck.shoal -n finds nothing to fix.
#
# One round: shoal-mount -f in the background; tests/crash/workload.py in
# the background; sleep 0.2-2 s; kill -9 the daemon; detach the dead mount
# (umount -l) and kill the workload; mount again; check the acknowledgements
# of this round and the previous one (workload.py check) and the whole tree;
# remove older rounds' files; unmount; fsck.shoal -n.  Prints one ok/not ok
# line per round and a summary; exits 1 if any round failed.
#
# Environment: SHOAL_BUILD (build directory), SHOAL_SRC (source tree),
# SIGKILL_ROUNDS (default 50), SIGKILL_SEED (default: random, printed),
# SIGKILL_KEEP=1 keeps the temporary directory.
set -euo pipefail

: "${SHOAL_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${SHOAL_BUILD:=$SHOAL_SRC/build}"
ROUNDS=${SIGKILL_ROUNDS:-50}
SEED=${SIGKILL_SEED:-$(( (RANDOM << 15) | RANDOM ))}
MKFS=$SHOAL_BUILD/mkfs.shoal
MOUNT=$SHOAL_BUILD/shoal-mount
FSCK=$SHOAL_BUILD/fsck.shoal
WL=$SHOAL_SRC/tests/crash/workload.py
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

dir=$(mktemp -d /tmp/shoal-sigkill.XXXXXX)
img=$dir/img
mnt=$dir/mnt
daemon=
wpid=

# Detach whatever is mounted at $mnt and stop our processes (by pid).
detach() {
	if mountpoint -q "$mnt" 2>/dev/null || grep -q " $mnt " /proc/mounts; then
		umount -l "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
	fi
}
cleanup() {
	set +e
	[ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null
	if [ -n "$daemon" ]; then
		umount "$mnt" 2>/dev/null
		kill -9 "$daemon" 2>/dev/null
	fi
	detach
	wait 2>/dev/null
	if [ "${SIGKILL_KEEP:-0}" = 1 ]; then
		echo "# kept $dir"
	else
		rm -rf "$dir"
	fi
}
trap cleanup EXIT

# Start the daemon in the foreground mode, in the background; wait for the mount.
start_daemon() {
	"$MOUNT" -f -o lock=nolock "$img" "$mnt" 2>>"$dir/daemon.log" &
	daemon=$!
	for _ in $(seq 200); do
		if grep -q " $mnt fuse" /proc/mounts; then
			return 0
		fi
		if ! kill -0 "$daemon" 2>/dev/null; then
			wait "$daemon" || true
			daemon=
			return 1
		fi
		sleep 0.05
	done
	return 1
}

# Clean unmount: umount, then the daemon exits 0.
stop_daemon() {
	local rc=0
	umount "$mnt" || rc=1
	wait "$daemon" || rc=1
	daemon=
	return $rc
}

mkdir -p "$mnt"
"$MKFS" -j 1 -J 8M "$img" 512M >/dev/null
echo "# seed $SEED, $ROUNDS rounds, image $img"
RANDOM=$SEED
failed=0
have_fsck=1
[ -x "$FSCK" ] || have_fsck=0
start=$SECONDS

for round in $(seq 1 "$ROUNDS"); do
	why=
	stats=
	log=$dir/log.$round
	: >"$log"
	if ! start_daemon; then
		why="mount failed"
	elif ! mkdir "$mnt/r$round"; then
		why="mkdir failed"
	else
		"$PY" "$WL" run "$mnt/r$round" "$log" "$((SEED + round))" 2>>"$dir/workload.err" &
		wpid=$!
		ms=$((200 + RANDOM % 1801))
		sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
		if ! kill -0 "$wpid" 2>/dev/null; then
			why="the workload stopped before the kill"
			tail -n 3 "$log" "$dir/workload.err" 2>/dev/null | sed 's/^/#   /'
		fi
		kill -9 "$daemon"
		kill -9 "$wpid" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
		wait "$wpid" 2>/dev/null || true
		daemon=
		wpid=
		detach
		# the mount replays the journal
		if ! start_daemon; then
			why="mount after the kill failed"
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
			# keep this round and the previous one
			if [ "$round" -gt 2 ]; then
				rm -rf "$mnt/r$((round - 2))" || why="${why:-removing an old round failed}"
				rm -f "$dir/log.$((round - 2))"
			fi
			if ! stop_daemon; then
				why="${why:-unmount failed}"
			elif [ "$have_fsck" = 1 ]; then
				if ! fsck_out=$("$FSCK" -n "$img" 2>&1); then
					why="${why:-fsck.shoal -n found problems}"
					echo "$fsck_out" | tail -n 10 | sed 's/^/#   /'
				fi
			fi
		fi
	fi
	if [ -z "$why" ]; then
		echo "ok $round - kill and recovery round $round (${stats:-})"
	else
		failed=$((failed + 1))
		echo "not ok $round - kill and recovery round $round: $why"
		# a round that left a mount behind must not poison the next one
		if [ -n "$daemon" ]; then
			stop_daemon || true
		fi
		detach
	fi
done
[ "$have_fsck" = 1 ] || echo "ok $((ROUNDS + 1)) - SKIP fsck.shoal -n after each round: $FSCK not built"
echo "# $ROUNDS rounds, $failed failed, $((SECONDS - start)) s (seed $SEED)"
[ "$failed" -eq 0 ]
