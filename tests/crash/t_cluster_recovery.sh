#!/bin/bash
# t_cluster_recovery.sh - a cluster node killed with SIGKILL in the middle of
# a writing workload, over and over, while the other nodes keep working on
# the same image: once the dead node's lease has expired a survivor replays
# its journal before anything the dead node held is granted again, so every
# file the dead node had fsync'ed is there, complete, as seen from the
# survivors; the dead node then mounts again under its own name and sees
# the same; after the last round every node unmounts cleanly and
# fsck.shoal -n finds nothing to fix.  About 80 s for the 20 rounds.
#
# Setup: shoal-lockd -f with a 2 s lease (short, with some room for a loaded
# machine: a node fences itself when lockd has not answered for lease/2),
# three nodes n0 n1 n2 (shoal-mount -f, one mountpoint each) on one image
# with three journals.  A failed round prints the tail of every node's log
# and of lockd's.
#
# One round: pick a victim X and an active survivor S (the third node P only
# looks); X runs tests/crash/workload.py in its directory rNx, S in rNs
# (both with relative paths, run from the node's mountpoint, so the
# acknowledgement logs name the same files on every node); after a random
# 0.3-2 s X's daemon gets SIGKILL (and its workload too), its dead mount is
# detached; then
#   - right away, racing the lease expiry and the recovery, S reads every
#     file X acknowledged (workload.py check rNx LOG): this blocks on X's
#     locks until X's journal is replayed, and must then find exactly what
#     X acknowledged;
#   - the survivors' `recoveries` counters (shoal stat) grow within
#     lease + 10 s (a survivor replayed X's journal);
#   - P checks the same after the recovery;
#   - S's workload, which ran through all this, stopped on no error; its
#     acknowledgements hold as seen from S and P;
#   - X mounts again as the same node (retrying up to 15 s: lockd refuses
#     the name while X's lease runs) and sees X's and S's files;
#   - the directories of round N-2 are removed from a random node.
# Each round prints one ok / not ok line.  Then every daemon is killed at
# once (two of them in a workload) and every node mounts again under its
# own name, with nobody alive to recover it (the first to mount replays
# them all), and sees what was acknowledged; then the unmounts and fsck.
#
# Environment: SHOAL_BUILD, SHOAL_SRC; CLREC_ROUNDS (default 20),
# CLREC_SEED (default random, printed), CLREC_LEASE (default 2),
# CLREC_KEEP=1 keeps the temporary directory.
set -euo pipefail

: "${SHOAL_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${SHOAL_BUILD:=$SHOAL_SRC/build}"
ROUNDS=${CLREC_ROUNDS:-20}
SEED=${CLREC_SEED:-$(((RANDOM << 15) | RANDOM))}
LEASE=${CLREC_LEASE:-2}
MKFS=$SHOAL_BUILD/mkfs.shoal
MOUNT=$SHOAL_BUILD/shoal-mount
LOCKD=$SHOAL_BUILD/shoal-lockd
FSCK=$SHOAL_BUILD/fsck.shoal
SHOAL=$SHOAL_BUILD/shoal
WL=$SHOAL_SRC/tests/crash/workload.py
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
NODES=3

dir=$(mktemp -d /tmp/shoal-clrec.XXXXXX)
img=$dir/img
sock=$dir/lockd.sock
lockd_pid=
daemon=() # node -> shoal-mount pid ("" when not mounted)
wl_pids=()
n=0
failed=0

ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }

mnt_of() { echo "$dir/m$1"; }

mounted() { grep -q " $1 fuse" /proc/mounts; }

detach() { # MNT: whatever is (dead or alive) mounted there goes away
	if grep -q " $1 " /proc/mounts; then
		fusermount3 -uz "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
	fi
}

pid_alive() { # a zombie counts as gone
	local st
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

cleanup() {
	local rc=$? i p
	set +e
	for p in "${wl_pids[@]}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
	for i in $(seq 0 $((NODES - 1))); do
		p=${daemon[$i]:-}
		if [ -n "$p" ]; then
			timeout 10 umount "$(mnt_of "$i")" 2>/dev/null
			for _ in $(seq 50); do pid_alive "$p" || break; sleep 0.1; done
			kill -9 "$p" 2>/dev/null
		fi
		detach "$(mnt_of "$i")"
	done
	if [ -n "$lockd_pid" ]; then
		kill -CONT "$lockd_pid" 2>/dev/null
		kill "$lockd_pid" 2>/dev/null
	fi
	wait 2>/dev/null
	if [ "${CLREC_KEEP:-0}" = 1 ]; then
		echo "# kept $dir"
	else
		rm -rf "$dir"
	fi
	exit $rc
}
trap cleanup EXIT

# Start node i (shoal-mount -f in the background, stderr to its log) and
# wait until it is mounted: 0, or 1 if the daemon exited (refused).
start_node() {
	local i=$1 mnt
	mnt=$(mnt_of "$i")
	mkdir -p "$mnt"
	"$MOUNT" -f -o "lock=shoal:unix:$sock,node=n$i" "$img" "$mnt" 2>>"$dir/n$i.log" &
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
	kill -9 "${daemon[$i]}" 2>/dev/null # neither mounted nor gone after 20 s
	wait "${daemon[$i]}" 2>/dev/null || true
	daemon[$i]=
	detach "$mnt"
	return 1
}

# Mount node i, retrying for up to $2 seconds (a dead node's name is refused
# while its lease runs).  The number of attempts goes to $tries.
start_node_retry() {
	local i=$1 limit=$2 t0=$SECONDS
	tries=0
	while :; do
		tries=$((tries + 1))
		start_node "$i" && return 0
		[ $((SECONDS - t0)) -ge "$limit" ] && break
		sleep 0.5
	done
	return 1
}

# Clean unmount of node i: umount, then its daemon exits 0.
stop_node() {
	local i=$1 mnt rc=0
	mnt=$(mnt_of "$i")
	timeout 60 umount "$mnt" || rc=1
	if [ -n "${daemon[$i]}" ]; then
		wait "${daemon[$i]}" || rc=1
	fi
	daemon[$i]=
	return $rc
}

recoveries() { # the sum of the recoveries counters of the nodes given
	local i sum=0 v
	for i in "$@"; do
		v=$(timeout 10 "$SHOAL" stat "$(mnt_of "$i")" 2>/dev/null |
			awk '$1 == "recoveries" { print $2 }') || true
		sum=$((sum + ${v:-0}))
	done
	echo "$sum"
}

# check NODE DIR LOG...: workload.py check, run in NODE's mountpoint, on
# DIR (relative); prints the failures; 1 if any (or if it hung for 60 s).
check_on() {
	local i=$1 d=$2 out rc=0
	shift 2
	out=$(cd "$(mnt_of "$i")" && timeout 60 "$PY" "$WL" check "$d" "$@" 2>&1) || rc=$?
	echo "$out" | grep -v '^# [0-9]* acks' | sed "s/^/# n$i: /" || true
	[ $rc -eq 124 ] && echo "# n$i: the check hung for 60 s"
	stats=$(echo "$out" | grep '^# [0-9]* acks' | sed 's/^# //') || true
	return $rc
}

# After a failed round: what the nodes and lockd said lately.
show_logs() {
	local i
	for i in $(seq 0 $((NODES - 1))); do
		grep -v '^$' "$dir/n$i.log" 2>/dev/null | tail -n 4 | sed "s/^/#   n$i log: /"
	done
	tail -n 8 "$dir/lockd.log" | sed 's/^/#   lockd: /'
}

# ok "$1" if the why array is empty, else not ok with the reasons and the
# logs, and 1.
verdict() {
	if [ ${#why[@]} -eq 0 ]; then
		ok "$1"
		return 0
	fi
	not_ok "$1"
	printf '#   %s\n' "${why[@]}"
	show_logs
	return 1
}

sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }

# --- setup ---------------------------------------------------------------------

"$MKFS" -q -j $NODES -J 16M -t clrec:fs "$img" 1G
"$LOCKD" -f --listen "unix:$sock" --lease "$LEASE" 2>"$dir/lockd.log" &
lockd_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
echo "# seed $SEED, $ROUNDS rounds, lease $LEASE s, image $img"
RANDOM=$SEED
start=$SECONDS
for i in $(seq 0 $((NODES - 1))); do
	if start_node "$i"; then
		ok "node n$i mounted"
	else
		not_ok "node n$i mounted"
		tail -n 5 "$dir/n$i.log" | sed 's/^/#   /'
		exit 1
	fi
done

# --- rounds --------------------------------------------------------------------

rfailed=0
for round in $(seq 1 "$ROUNDS"); do
	why=()
	tries=0
	x=$((RANDOM % NODES))
	s=$(((x + 1 + RANDOM % (NODES - 1)) % NODES))
	p=$((3 - x - s))
	mx=$(mnt_of $x)
	ms=$(mnt_of $s)
	logx=$dir/log.$round.x
	logs=$dir/log.$round.s
	: >"$logx"
	: >"$logs"
	if ! mkdir "$mx/r${round}x" "$ms/r${round}s"; then
		not_ok "round $round: mkdir r${round}x on n$x and r${round}s on n$s"
		show_logs
		rfailed=$((rfailed + 1))
		[ $rfailed -ge 3 ] && break
		continue
	fi
	(cd "$mx" && exec "$PY" "$WL" run "r${round}x" "$logx" "$((SEED + 2 * round))") \
		2>>"$dir/workload.err" &
	wx=$!
	(cd "$ms" && exec "$PY" "$WL" run "r${round}s" "$logs" "$((SEED + 2 * round + 1))") \
		2>>"$dir/workload.err" &
	ws=$!
	wl_pids=("$wx" "$ws")
	ms_delay=$((300 + RANDOM % 1701))
	sleep_ms $ms_delay
	kill -0 "$wx" 2>/dev/null || why+=("X's workload stopped before the kill")
	rec0=$(recoveries $s $p)
	kill -9 "${daemon[$x]}"
	kill -9 "$wx" 2>/dev/null || true
	wait "${daemon[$x]}" 2>/dev/null || true
	wait "$wx" 2>/dev/null || true
	daemon[$x]=
	detach "$mx"
	t_kill=$(date +%s%N)
	acks=$(grep -c '^ACK ' "$logx" || true)

	# 1. the survivor reads what X acknowledged, racing X's recovery
	check_on $s "r${round}x" "$logx" || why+=("n$s (survivor) does not see what n$x acknowledged")
	t_check=$((($(date +%s%N) - t_kill) / 1000000))
	stats1=$stats

	# 2. a survivor replayed X's journal
	rec1=$rec0
	for _ in $(seq 150); do
		rec1=$(recoveries $s $p)
		[ "$rec1" -gt "$rec0" ] && break
		sleep 0.1
	done
	t_rec=$((($(date +%s%N) - t_kill) / 1000000))
	[ "$rec1" -gt "$rec0" ] || why+=("no survivor recovered n$x's journal (recoveries $rec0 -> $rec1)")

	# 3. the passive node sees the same after the recovery
	check_on $p "r${round}x" "$logx" || why+=("n$p (passive) does not see what n$x acknowledged")

	# 4. S worked on through X's death without an error
	kill -0 "$ws" 2>/dev/null || why+=("n$s's workload stopped")
	kill -9 "$ws" 2>/dev/null || true
	wait "$ws" 2>/dev/null || true
	wl_pids=()
	if grep -q '^ERROR' "$logs"; then
		why+=("n$s's workload failed: $(grep '^ERROR' "$logs" | head -1)")
	fi
	check_on $s "r${round}s" "$logs" || why+=("n$s does not see its own acknowledged files")
	check_on $p "r${round}s" "$logs" || why+=("n$p does not see what n$s acknowledged")

	# 5. X comes back under its own name and sees everything
	if ! start_node_retry $x 15; then
		why+=("n$x cannot mount again ($tries attempts)")
		tail -n 3 "$dir/n$x.log" | sed 's/^/#   /'
	else
		check_on $x "r${round}x" "$logx" || why+=("n$x after its remount does not see what it acknowledged")
		check_on $x "r${round}s" "$logs" || why+=("n$x after its remount does not see what n$s acknowledged")
	fi

	# 6. older rounds go, removed by some node
	if [ "$round" -gt 2 ]; then
		rmnode=$((RANDOM % NODES))
		[ -n "${daemon[$rmnode]}" ] || rmnode=$s
		rm -rf "$(mnt_of $rmnode)/r$((round - 2))x" "$(mnt_of $rmnode)/r$((round - 2))s" ||
			why+=("removing round $((round - 2)) on n$rmnode failed")
		rm -f "$dir/log.$((round - 2)).x" "$dir/log.$((round - 2)).s"
	fi

	what="round $round: n$x killed after ${ms_delay} ms ($acks acks; $stats1), n$s active, check done after ${t_check} ms, recovery seen after ${t_rec} ms, remount in $tries tries"
	if ! verdict "$what"; then
		rfailed=$((rfailed + 1))
		for i in $(seq 0 $((NODES - 1))); do
			[ -n "${daemon[$i]}" ] && continue
			detach "$(mnt_of $i)"
			start_node_retry $i 15 || true
		done
		if [ $rfailed -ge 3 ]; then
			echo "# 3 rounds failed: stopping"
			break
		fi
	fi
done

# --- the whole cluster dies ------------------------------------------------------
# Every daemon is killed at once, two of them in the middle of a workload:
# nobody is left to replay anyone's journal, lockd keeps running.  Each node
# mounts again under its own name once its lease is over (n0 through the
# new path: lockd lets it in while its old life is pending recovery; its
# mount replays the other journals, as every mount does, and its own), and
# every node sees what the others acknowledged.  (Before
# 2026-12-04 lockd refused a dead name until a live node had recovered it:
# none could mount again.)
if [ "$rfailed" -lt 3 ]; then
	why=()
	for i in 0 1; do
		: >"$dir/log.all.$i"
		mkdir "$(mnt_of $i)/all$i" || why+=("mkdir all$i on n$i")
		(cd "$(mnt_of $i)" && exec "$PY" "$WL" run "all$i" "$dir/log.all.$i" "$((SEED + 7 + i))") \
			2>>"$dir/workload.err" &
		wl_pids+=($!)
	done
	sleep_ms $((500 + RANDOM % 1000))
	for i in $(seq 0 $((NODES - 1))); do
		[ -n "${daemon[$i]}" ] && kill -9 "${daemon[$i]}"
	done
	for p in "${wl_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	for i in $(seq 0 $((NODES - 1))); do
		[ -n "${daemon[$i]}" ] && { wait "${daemon[$i]}" 2>/dev/null || true; }
		daemon[$i]=
		detach "$(mnt_of $i)"
	done
	wait "${wl_pids[@]}" 2>/dev/null || true
	wl_pids=()
	t0=$SECONDS
	for i in $(seq 0 $((NODES - 1))); do
		start_node_retry $i 15 || why+=("n$i cannot mount again after the whole cluster died ($tries attempts)")
	done
	t_all=$((SECONDS - t0))
	for i in $(seq 0 $((NODES - 1))); do
		[ -n "${daemon[$i]}" ] || continue
		for j in 0 1; do
			check_on $i "all$j" "$dir/log.all.$j" ||
				why+=("n$i does not see what n$j acknowledged before the whole cluster died")
		done
	done
	verdict "the whole cluster killed: every node mounts again under its name ($t_all s) and sees what was acknowledged" || true
fi

# --- the end: every node unmounts, fsck ----------------------------------------

# one last look at the last two rounds from every node
for i in $(seq 0 $((NODES - 1))); do
	[ -n "${daemon[$i]}" ] || continue
	bad=0
	for r in $((round - 1)) $round; do
		[ -f "$dir/log.$r.x" ] || continue
		check_on $i "r${r}x" "$dir/log.$r.x" || bad=1
		check_on $i "r${r}s" "$dir/log.$r.s" || bad=1
	done
	if [ $bad = 0 ]; then ok "n$i sees the last rounds' files"; else not_ok "n$i sees the last rounds' files"; fi
done
for i in $(seq 0 $((NODES - 1))); do
	if [ -z "${daemon[$i]}" ]; then
		not_ok "n$i unmounts cleanly (it is not mounted)"
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
if [ ! -x "$FSCK" ]; then
	ok "SKIP fsck.shoal -n: $FSCK not built"
elif fsck_out=$("$FSCK" -n "$img" 2>&1); then
	ok "fsck.shoal -n is clean after $round rounds"
	# every node unmounted cleanly: each unlinked inode was freed by the
	# last node that used it (or by the remount of a killed node)
	if echo "$fsck_out" | grep -q 'orphan'; then
		not_ok "no unlinked inodes left after the clean unmounts: $(echo "$fsck_out" | grep orphan)"
	else
		ok "no unlinked inodes left after the clean unmounts"
	fi
else
	not_ok "fsck.shoal -n is clean after $round rounds"
	echo "$fsck_out" | grep -v '^Pass' | tail -n 15 | sed 's/^/#   /'
fi
echo "# $n checks, $failed failed, $((SECONDS - start)) s (seed $SEED)"
[ "$failed" -eq 0 ]
