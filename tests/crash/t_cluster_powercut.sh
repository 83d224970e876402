#!/bin/bash
# t_cluster_powercut.sh - the power cut of one node of a two-node cluster,
# end to end, over and over on one image: n0's device behaves as a disk
# with a volatile write cache and loses power at a random device write
# (shoal-mount's test hook SHOAL_TEST_POWER_CUT, fuse/main.c (7): what n0
# flushed is on the image, a random part of the pages it had not flushed
# is, the rest is lost, and n0's daemon is dead at that instant), while
# both nodes run tests/crash/workload.py (every kind of change, each synced
# and only then acknowledged).  Once n0's lease is over n1 replays n0's
# journal; then every path either node acknowledged holds exactly what it
# acknowledged, as seen from n1, and n1's workload ran on without an error.
# After the last round n0 mounts again, sees both nodes' last rounds, both
# unmount cleanly and fsck.shoal -n finds nothing to fix.
#
# Setup: shoal-lockd -f with a 2 s lease, n0 and n1 (shoal-mount -f) on one
# image with two journals.  One round: n0 mounts with
# SHOAL_TEST_POWER_CUT=N:SEED (N < POWERCUT_MAXW, SEED 0 = nothing
# unflushed kept one round in four; retried while lockd still refuses n0's
# name); n0 runs the workload in rNa, n1 in rNb (relative paths, so the
# logs name the same files on both nodes); wait until n0 dies of the cut
# (bounded by POWERCUT_WAIT s, then SIGKILL: every unflushed write lost);
# detach n0's dead mount and kill its workload; n1 reads what n0
# acknowledged (waiting on n0's locks until its journal is replayed); n1's
# recoveries counter grew; n1's workload is stopped and its own log checked;
# rounds older than the previous one are removed.  One ok/not ok per round.
#
# Environment: SHOAL_BUILD, SHOAL_SRC; POWERCUT_ROUNDS (default 12, about
# 75 s),
# POWERCUT_SEED (default random, printed), POWERCUT_MAXW (default 600),
# POWERCUT_WAIT (default 20), POWERCUT_LEASE (default 2),
# POWERCUT_KEEP=1 keeps the temporary directory.
set -euo pipefail

: "${SHOAL_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${SHOAL_BUILD:=$SHOAL_SRC/build}"
ROUNDS=${POWERCUT_ROUNDS:-12}
SEED=${POWERCUT_SEED:-$(((RANDOM << 15) | RANDOM))}
MAXW=${POWERCUT_MAXW:-600}
WAIT=${POWERCUT_WAIT:-20}
LEASE=${POWERCUT_LEASE:-2}
MKFS=$SHOAL_BUILD/mkfs.shoal
MOUNT=$SHOAL_BUILD/shoal-mount
LOCKD=$SHOAL_BUILD/shoal-lockd
FSCK=$SHOAL_BUILD/fsck.shoal
SHOAL=$SHOAL_BUILD/shoal
WL=$SHOAL_SRC/tests/crash/workload.py
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

dir=$(mktemp -d /tmp/shoal-clpower.XXXXXX)
img=$dir/img
sock=$dir/lockd.sock
lockd_pid=
daemon=("" "")
wl_pids=()
n=0
failed=0

ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
mnt_of() { echo "$dir/m$1"; }
mounted() { grep -q " $1 fuse" /proc/mounts; }
detach() {
	if grep -q " $1 " /proc/mounts; then
		fusermount3 -uz "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
	fi
}
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

cleanup() {
	local rc=$? i p
	set +e
	for p in "${wl_pids[@]}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
	for i in 0 1; do
		p=${daemon[$i]:-}
		if [ -n "$p" ]; then
			timeout 10 umount "$(mnt_of "$i")" 2>/dev/null
			for _ in $(seq 50); do pid_alive "$p" || break; sleep 0.1; done
			kill -9 "$p" 2>/dev/null
		fi
		detach "$(mnt_of "$i")"
	done
	[ -n "$lockd_pid" ] && kill "$lockd_pid" 2>/dev/null
	wait 2>/dev/null
	if [ "${POWERCUT_KEEP:-0}" = 1 ]; then
		echo "# kept $dir"
	else
		rm -rf "$dir"
	fi
	exit $rc
}
trap cleanup EXIT

# start_node I [ENV=VALUE]: 0 once mounted, 1 if the daemon exited first.
start_node() {
	local i=$1 mnt
	shift
	mnt=$(mnt_of "$i")
	mkdir -p "$mnt"
	env "$@" "$MOUNT" -f -o "lock=shoal:unix:$sock,node=n$i" "$img" "$mnt" 2>>"$dir/n$i.log" &
	daemon[$i]=$!
	for _ in $(seq 400); do
		mounted "$mnt" && return 0
		if ! kill -0 "${daemon[$i]}" 2>/dev/null; then
			wait "${daemon[$i]}" 2>/dev/null || true
			daemon[$i]=
			return 1
		fi
		sleep 0.05
	done
	kill -9 "${daemon[$i]}" 2>/dev/null
	wait "${daemon[$i]}" 2>/dev/null || true
	daemon[$i]=
	detach "$mnt"
	return 1
}

# start_node_retry I SECONDS [ENV=VALUE]: lockd refuses a dead node's name
# while its lease runs.  A start that dies of its power cut during the mount
# counts as started (cut_in_mount=1).
start_node_retry() {
	local i=$1 limit=$2 t0=$SECONDS c0
	shift 2
	tries=0
	cut_in_mount=0
	while :; do
		tries=$((tries + 1))
		c0=$(grep -c 'power cut at write' "$dir/n$i.log" || true)
		start_node "$i" "$@" && return 0
		if [ "$(grep -c 'power cut at write' "$dir/n$i.log" || true)" -gt "$c0" ]; then
			cut_in_mount=1
			return 0
		fi
		[ $((SECONDS - t0)) -ge "$limit" ] && break
		sleep 0.5
	done
	return 1
}

stop_node() {
	local i=$1 rc=0
	timeout 60 umount "$(mnt_of "$i")" || rc=1
	if [ -n "${daemon[$i]}" ]; then
		wait "${daemon[$i]}" || rc=1
	fi
	daemon[$i]=
	return $rc
}

recoveries() {
	timeout 10 "$SHOAL" stat "$(mnt_of "$1")" 2>/dev/null |
		awk '$1 == "recoveries" { print $2 }' || true
}

# check_on I DIR LOG...: workload.py check in node I's mountpoint.
check_on() {
	local i=$1 d=$2 out rc=0
	shift 2
	out=$(cd "$(mnt_of "$i")" && timeout 60 "$PY" "$WL" check "$d" "$@" 2>&1) || rc=$?
	echo "$out" | grep -v '^# [0-9]* acks' | sed "s/^/# n$i: /" || true
	[ $rc -eq 124 ] && echo "# n$i: the check hung for 60 s"
	stats=$(echo "$out" | grep '^# [0-9]* acks' | sed 's/^# //') || true
	return $rc
}

show_logs() {
	local i
	for i in 0 1; do
		grep -v '^$' "$dir/n$i.log" 2>/dev/null | tail -n 4 | sed "s/^/#   n$i log: /"
	done
	tail -n 6 "$dir/lockd.log" | sed 's/^/#   lockd: /'
}

# --- setup ---------------------------------------------------------------------

"$MKFS" -q -j 2 -J 16M -t clpower:fs "$img" 1G
: >"$dir/n0.log"
: >"$dir/n1.log"
"$LOCKD" -f --listen "unix:$sock" --lease "$LEASE" 2>"$dir/lockd.log" &
lockd_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
echo "# seed $SEED, $ROUNDS rounds, cut at a write < $MAXW, lease $LEASE s, image $img"
RANDOM=$SEED
start=$SECONDS
if start_node 1; then
	ok "node n1 mounted"
else
	not_ok "node n1 mounted"
	show_logs
	exit 1
fi

# --- rounds --------------------------------------------------------------------

rfailed=0
cuts=0
round=0
for round in $(seq 1 "$ROUNDS"); do
	why=()
	how=
	w=$((((RANDOM << 15) | RANDOM) % MAXW))
	keep=$(((RANDOM << 15) | RANDOM))
	[ $((RANDOM % 4)) = 0 ] && keep=0
	m0=$(mnt_of 0)
	m1=$(mnt_of 1)
	loga=$dir/log.$round.a
	logb=$dir/log.$round.b
	: >"$loga"
	: >"$logb"
	c0=$(grep -c 'power cut at write' "$dir/n0.log" || true)
	rec0=$(recoveries 1)
	if ! start_node_retry 0 $((LEASE * 3 + 10)) SHOAL_TEST_POWER_CUT="$w:$keep"; then
		not_ok "round $round: n0 mounts ($tries attempts)"
		show_logs
		rfailed=$((rfailed + 1))
		[ $rfailed -ge 3 ] && break
		continue
	fi
	mkdir "$m1/r${round}b"
	(cd "$m1" && exec "$PY" "$WL" run "r${round}b" "$logb" "$((SEED + 2 * round + 1))") \
		2>>"$dir/workload.err" &
	wb=$!
	wa=
	started_a=
	if [ "$cut_in_mount" = 1 ]; then
		how="cut during n0's mount"
	elif mkdir "$m0/r${round}a" 2>/dev/null; then
		(cd "$m0" && exec "$PY" "$WL" run "r${round}a" "$loga" "$((SEED + 2 * round))") \
			2>>"$dir/workload.err" &
		wa=$!
		started_a=1
	fi
	wl_pids=("$wb" $wa)
	t0=$SECONDS
	while [ -n "${daemon[0]}" ] && pid_alive "${daemon[0]}" && [ $((SECONDS - t0)) -lt "$WAIT" ]; do
		if [ -n "$wa" ] && ! pid_alive "$wa"; then
			# an error the cut caused may come before n0 is seen dead
			if ! wait "$wa" && lives_on "${daemon[0]}"; then
				why+=("n0's workload failed before the cut")
			fi
			wa=
		fi
		sleep 0.02
	done
	if [ -n "${daemon[0]}" ] && pid_alive "${daemon[0]}"; then
		kill -9 "${daemon[0]}"
		how="write $w not reached in $WAIT s: killed, every unflushed write lost"
	fi
	[ -n "${daemon[0]}" ] && { wait "${daemon[0]}" 2>/dev/null || true; }
	daemon[0]=
	if [ -n "$wa" ]; then
		kill -9 "$wa" 2>/dev/null || true
		wait "$wa" 2>/dev/null || true
	fi
	detach "$m0"
	if [ "$(grep -c 'power cut at write' "$dir/n0.log" || true)" -gt "$c0" ]; then
		cuts=$((cuts + 1))
		how="${how:+$how, }cut at write $w, keep seed $keep"
	elif [ "${how#write}" = "$how" ]; then
		why+=("n0 died, but not of the cut")
	fi
	t_cut=$(date +%s%N)
	acks=$(grep -c '^ACK ' "$loga" || true)

	# n1 reads what n0 acknowledged: it waits for n0's journal replay
	# (a cut during n0's mount or its mkdir left nothing to read)
	stats_a="no workload"
	if [ -n "$started_a" ]; then
		check_on 1 "r${round}a" "$loga" || why+=("n1 does not see what n0 acknowledged")
		stats_a=$stats
	fi
	rec1=$rec0
	for _ in $(seq 150); do
		rec1=$(recoveries 1)
		[ "${rec1:-0}" -gt "${rec0:-0}" ] && break
		sleep 0.1
	done
	t_rec=$((($(date +%s%N) - t_cut) / 1000000))
	[ "${rec1:-0}" -gt "${rec0:-0}" ] || why+=("n1 did not recover n0's journal (recoveries $rec0 -> $rec1)")

	# n1 worked on through n0's death without an error
	pid_alive "$wb" || why+=("n1's workload stopped")
	kill -9 "$wb" 2>/dev/null || true
	wait "$wb" 2>/dev/null || true
	wl_pids=()
	if grep -q '^ERROR' "$logb"; then
		why+=("n1's workload failed: $(grep '^ERROR' "$logb" | head -1)")
	fi
	check_on 1 "r${round}b" "$logb" || why+=("n1 does not see its own acknowledged files")
	stats_b=$stats
	if [ "$round" -gt 2 ]; then
		rm -rf "$m1/r$((round - 2))a" "$m1/r$((round - 2))b" ||
			why+=("removing round $((round - 2)) failed")
		rm -f "$dir/log.$((round - 2)).a" "$dir/log.$((round - 2)).b"
	fi
	what="round $round: n0 ${how} ($acks acks; n0 $stats_a; n1 $stats_b), recovery seen after ${t_rec} ms"
	if [ ${#why[@]} -eq 0 ]; then
		ok "$what"
	else
		not_ok "$what"
		printf '#   %s\n' "${why[@]}"
		show_logs
		rfailed=$((rfailed + 1))
		[ $rfailed -ge 3 ] && { echo "# 3 rounds failed: stopping"; break; }
	fi
done

# --- the end: n0 back, both unmount, fsck ----------------------------------------

if start_node_retry 0 $((LEASE * 3 + 10)); then
	ok "n0 mounts again after the last cut ($tries attempts)"
	for i in 0 1; do
		bad=0
		for r in $((round - 1)) $round; do
			[ -f "$dir/log.$r.a" ] || continue
			if [ -s "$dir/log.$r.a" ]; then # n0's workload ran
				check_on $i "r${r}a" "$dir/log.$r.a" || bad=1
			fi
			check_on $i "r${r}b" "$dir/log.$r.b" || bad=1
		done
		if [ $bad = 0 ]; then ok "n$i sees the last rounds' files"; else not_ok "n$i sees the last rounds' files"; fi
	done
else
	not_ok "n0 mounts again after the last cut ($tries attempts)"
	show_logs
fi
for i in 0 1; do
	if [ -z "${daemon[$i]}" ]; then
		continue
	elif stop_node "$i"; then
		ok "n$i unmounts cleanly"
	else
		not_ok "n$i unmounts cleanly"
		tail -n 3 "$dir/n$i.log" | sed 's/^/#   /'
	fi
done
kill "$lockd_pid" 2>/dev/null || true
wait "$lockd_pid" 2>/dev/null || true
lockd_pid=
if fsck_out=$("$FSCK" -n "$img" 2>&1); then
	ok "fsck.shoal -n is clean after $round rounds"
else
	not_ok "fsck.shoal -n is clean after $round rounds"
	echo "$fsck_out" | grep -v '^Pass' | tail -n 15 | sed 's/^/#   /'
fi
echo "# $n checks, $cuts cut by the hook, $failed failed, $((SECONDS - start)) s (seed $SEED)"
[ "$failed" -eq 0 ]
