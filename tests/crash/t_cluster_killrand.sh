#!/bin/bash
# t_cluster_killrand.sh - a dying daemon never leaves its users hanging
# (issue 22): a cluster node's shoal-mount gets SIGKILL at random moments
# under a load that moves glocks between the nodes all the time, including
# right as a demotion starts and right as a survivor starts to replay a
# dead node's journal, and each time
#   - within 2 s every program of the load on the killed node's mount has
#     ended on ENOTCONN or EIO (or ECONNABORTED: what the kernel gives a
#     request it had sent when the connection was aborted; none hangs, none
#     is left in D state), the
#     dead mount is gone from /proc/self/mountinfo and every thread of the
#     killed daemon has exited (its guardian, fuse/guard.c, aborted the FUSE
#     connection and detached the mount);
#   - lockd reports the dead node's journal recovered by a survivor (within
#     lease + 20 s), and then every program of every survivor makes
#     progress again (within 20 s) and none ended;
#   - the node mounts again under its name and its load starts again; one
#     time in four (KILLRAND_MOUNTKILL=25 percent) it is first killed once
#     more in the middle of that mount
#     (after a random 0-400 ms, or, under gdb, right after its mount(2),
#     before it served a request), and the same 2 s checks hold.
# At the end every node unmounts cleanly, a fresh mount finds every
# acknowledged (fsync'ed) write and removal of every program's whole life
# (killrand_work.py check), and fsck.shoal -n is clean.
#
# Setup: a private shoal-lockd (lease KILLRAND_LEASE, default 2 s), three
# nodes a b c on one image with three journals; two programs per node
# (tests/crash/killrand_work.py run; one with its working directory inside
# the mount): 4 KiB writes, each fsync'ed, of the program's own region of
# four shared files that every node writes and reads (the inode glocks move
# between the nodes all the time: demotions with write-back and
# invalidation), reads of whole shared files, and files made, fsync'ed and
# removed in one shared directory.
#
# A round, one of (picked with the seed):
#   plain    a random node killed after a random 0-1.5 s;
#   demote   after a random 0-1.5 s, the node is killed at its next queued
#            demotion (`shoal trace` event `demote`, killrand_work.py killon);
#   recover  a node killed after a random 0-1.5 s; then the first survivor
#            that asks for (or is granted) the dead node's journal lock is
#            killed at that event, in the middle of its recovery; the last
#            node recovers both.
# No wait is a sleep: each polls for its event, with a bound.
#
# Environment: SHOAL_BUILD, SHOAL_SRC; KILLRAND_ROUNDS (default 8, about
# 60 s on a loaded 2-CPU machine; the issue's 100 take about 10 minutes),
# KILLRAND_SEED (default random, printed), KILLRAND_LEASE (default 2),
# KILLRAND_MOUNTKILL (default 25),
# E2E_KEEP=1 keeps the temporary directory.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../e2e/lib_cluster.sh"

: "${SHOAL_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
ROUNDS=${KILLRAND_ROUNDS:-8}
SEED=${KILLRAND_SEED:-$(((RANDOM << 15) | RANDOM))}
LEASE=${KILLRAND_LEASE:-2}
MOUNTKILL=${KILLRAND_MOUNTKILL:-25} # percent of the remounts killed half-way
WORK=$SHOAL_SRC/tests/crash/killrand_work.py
export SHOAL=$T_SHOAL # for killon
RANDOM=$SEED
echo "# seed $SEED, $ROUNDS rounds, lease $LEASE s (rerun: KILLRAND_SEED=$SEED KILLRAND_ROUNDS=$ROUNDS)"
start=$SECONDS
nodes=(a b c)
declare -A wpid # program id -> pid
declare -A widx=([a]=0 [b]=1 [c]=2)

now_ns() { date +%s%N; }
ms_since() { echo $((($(now_ns) - $1) / 1000000)); }
sleep_ms() { sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"; }
in_mountinfo() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# start_load NODE SEQ0: the node's two programs.
start_load() {
	local node=$1 seq0=$2 mnt p id slot
	mnt=$(c_mnt "$node")
	for p in 0 1; do
		id=$node$p
		slot=$((widx[$node] * 2 + p))
		if [ $p = 0 ]; then
			"$T_PY" "$WORK" run "$id" "$slot" "$mnt" "$t_dir/load-$id.log" "$seq0" \
				"$((SEED + seq0 + slot))" 2>>"$t_dir/load-$id.err" &
		else
			(cd "$mnt" && exec "$T_PY" "$WORK" run "$id" "$slot" . "$t_dir/load-$id.log" "$seq0" \
				"$((SEED + seq0 + slot))") 2>>"$t_dir/load-$id.err" &
		fi
		wpid[$id]=$!
	done
}

# progress ID: the program's completed operations so far (all its lives).
progress() { grep -c '^[AFGR] ' "$t_dir/load-$1.log" 2>/dev/null || true; }

# What a program that did not end is doing: state and kernel stack.
proc_info() {
	local pid=$1
	echo "state $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)," \
		"in $(head -3 "/proc/$pid/stack" 2>/dev/null | sed 's/^\[<0>\] //; s/+0x.*//' | tr '\n' ' ')"
}

# mount_retry NODE SECONDS: mount NODE again, retrying (lockd refuses the
# name of a node whose lease still runs) for up to SECONDS.  Sets tries.
mount_retry() {
	local node=$1 limit=$2 t0=$SECONDS i
	tries=0
	while :; do
		tries=$((tries + 1))
		cat "$t_dir/$node.log" >>"$t_dir/$node.all.log" 2>/dev/null || true
		if c_mount "$node" >"$t_dir/mount.out" 2>&1; then
			# mounted once its control socket answers (the traces use it)
			for ((i = 0; i < 200; i++)); do
				"$T_SHOAL" status "$(c_mnt "$node")" >/dev/null 2>&1 && return 0
				sleep 0.05
			done
			echo "# n$node: mounted, but its control socket does not answer after 10 s"
			return 1
		fi
		[ $((SECONDS - t0)) -ge "$limit" ] && break
		sleep 0.3
	done
	sed 's/^/#   /' "$t_dir/mount.out" | tail -4
	return 1
}

# killed NODE KILL_NS: the checks of a node whose daemon got SIGKILL at
# KILL_NS; adds to why[] and to the round's report (what).
killed() {
	local node=$1 kns=$2 mnt dpid id p st t_prog= t_mnt= t_dmn= e
	local -a left
	mnt=$(c_mnt "$node")
	dpid=${t_pids[$mnt]}
	while :; do
		left=()
		for p in 0 1; do
			c_pid_done "${wpid[$node$p]}" || left+=("$node$p")
		done
		[ -n "$t_prog" ] || [ ${#left[@]} -gt 0 ] || t_prog=$(ms_since "$kns")
		[ -n "$t_mnt" ] || in_mountinfo "$mnt" || t_mnt=$(ms_since "$kns")
		[ -n "$t_dmn" ] || ! c_pid_done "$dpid" || t_dmn=$(ms_since "$kns")
		[ -n "$t_prog" ] && [ -n "$t_mnt" ] && [ -n "$t_dmn" ] && break
		[ "$(ms_since "$kns")" -gt 2000 ] && break
		sleep 0.02
	done
	for id in "${left[@]}"; do
		why+=("n$node: program $id still running 2 s after the kill: $(proc_info "${wpid[$id]}")")
	done
	[ -n "$t_mnt" ] || why+=("n$node: the dead mount is still in the mount table 2 s after the kill")
	if [ -z "$t_dmn" ]; then
		why+=("n$node: the killed daemon still has threads 2 s after the kill:" \
			"$(for t in /proc/"$dpid"/task/*; do proc_info "${t#/proc/}"; done | sort | uniq -c | head -3 | tr '\n' ';')")
	fi
	[ ${#left[@]} -eq 0 ] && [ -n "$t_dmn" ] || c_abort "$node" # free what hangs, for the rest
	for p in 0 1; do
		id=$node$p
		st=0
		c_wait_pid "${wpid[$id]}" 10 || st=$?
		if [ $st = 124 ]; then
			kill -9 "${wpid[$id]}" 2>/dev/null
			wait "${wpid[$id]}" 2>/dev/null || true
		elif [ $st != 3 ]; then
			e=$(grep '^E ' "$t_dir/load-$id.log" | tail -1)
			why+=("n$node: program $id ended with status $st (${e:-no error logged}), not on ENOTCONN, ECONNABORTED or EIO")
		fi
		wpid[$id]=
	done
	c_wait_pid "$dpid" 10 >/dev/null 2>&1 || true
	if in_mountinfo "$mnt"; then # free the mountpoint for the rest of the test
		c_abort "$node"
		umount -l "$mnt" 2>/dev/null || true
	fi
	t_pids[$mnt]=
	t_fg[$mnt]=
	c_mounted[$node]=
	what+=" n$node killed: programs ended ${t_prog:-never} ms, mount gone ${t_mnt:-never} ms, daemon gone ${t_dmn:-never} ms;"
}

# recovered NODE COUNT0: lockd says NODE's journal was recovered (more
# than COUNT0 such lines) within lease + 20 s.
recovered_lines() { grep -c "of node $1 recovered by" "$t_dir/lockd.log" || true; }
recovered() {
	local node=$1 c0=$2 t0=$SECONDS
	while [ "$(recovered_lines "$node")" -le "$c0" ]; do
		if [ $((SECONDS - t0)) -gt $((LEASE + 20)) ]; then
			why+=("n$node: lockd reports no recovery of its journal within $((LEASE + 20)) s")
			return 1
		fi
		sleep 0.05
	done
	what+=" n$node recovered by $(grep "of node $node recovered by" "$t_dir/lockd.log" | tail -1 | sed 's/.*recovered by node \([^;]*\);.*/n\1/');"
}

# survivors_progress KNS NODE...: every program of every NODE completes 3
# more operations (within 20 s) and none has ended.
survivors_progress() {
	local kns=$1 node p id t0=$SECONDS
	shift
	declare -A p0
	for node in "$@"; do
		for p in 0 1; do p0[$node$p]=$(progress "$node$p"); done
	done
	for node in "$@"; do
		for p in 0 1; do
			id=$node$p
			while [ "$(progress "$id")" -lt $((p0[$id] + 3)) ]; do
				if c_pid_done "${wpid[$id]}"; then
					why+=("n$node (a survivor): program $id ended: $(grep '^E ' "$t_dir/load-$id.log" | tail -1)")
					break
				fi
				if [ $((SECONDS - t0)) -gt 20 ]; then
					why+=("n$node (a survivor): program $id made no progress for 20 s: $(proc_info "${wpid[$id]}")")
					break
				fi
				sleep 0.05
			done
		done
	done
	what+=" survivors progressed $(ms_since "$kns") ms after the kill;"
}

# mount_killed NODE: start NODE's mount and SIGKILL it in the middle of
# its start (journal replay, join, FUSE mount): after a random 0-400 ms,
# or (under gdb) right after fuse_session_mount returned, before the
# daemon has served a request; the same 2 s checks, without programs.
mount_killed() {
	local node=$1 mnt dpid d kns t_mnt= t_dmn=
	mnt=$(c_mnt "$node")
	cat "$t_dir/$node.log" >>"$t_dir/$node.all.log" 2>/dev/null || true
	if [ $((RANDOM % 2)) = 0 ] && command -v gdb >/dev/null; then
		d="right after its mount(2)"
		timeout 60 gdb -q -batch -ex 'set breakpoint pending on' -ex 'set pagination off' \
			-ex 'break fuse_session_mount' -ex run -ex finish -ex 'info inferiors' -ex kill \
			--args "$T_MOUNT" -f -o "lock=shoal:unix:$c_sock,node=$node" "$c_img" "$mnt" \
			>"$t_dir/gdb.out" 2>"$t_dir/$node.log" || true
		kns=$(now_ns)
		dpid=$(awk '/process [0-9]+/ { for (i = 1; i < NF; i++) if ($i == "process") print $(i + 1) }' \
			"$t_dir/gdb.out" | tail -1)
		if ! grep -q 'Breakpoint 1, ' "$t_dir/gdb.out" || ! grep -q 'killed\]' "$t_dir/gdb.out"; then
			d+=" (gdb did not get there: $(tail -1 "$t_dir/$node.log") $(tail -1 "$t_dir/gdb.out"))"
		fi
	else
		"$T_MOUNT" -f -o "lock=shoal:unix:$c_sock,node=$node" "$c_img" "$mnt" 2>"$t_dir/$node.log" &
		dpid=$!
		d=$((RANDOM % 400))
		sleep_ms $d
		kill -9 "$dpid"
		kns=$(now_ns)
		d="$d ms"
	fi
	while :; do
		[ -n "$t_mnt" ] || in_mountinfo "$mnt" || t_mnt=$(ms_since "$kns")
		[ -z "$dpid" ] || [ -n "$t_dmn" ] || ! c_pid_done "$dpid" || t_dmn=$(ms_since "$kns")
		[ -n "$t_mnt" ] && { [ -z "$dpid" ] || [ -n "$t_dmn" ]; } && break
		[ "$(ms_since "$kns")" -gt 2000 ] && break
		sleep 0.02
	done
	[ -n "$t_mnt" ] || why+=("n$node killed $d into its mount: the dead mount is still in the mount table 2 s after")
	[ -z "$dpid" ] || [ -n "$t_dmn" ] || why+=("n$node killed $d into its mount: the daemon still has threads 2 s after")
	[ -z "$dpid" ] || c_wait_pid "$dpid" 10 >/dev/null 2>&1 || true
	if in_mountinfo "$mnt"; then
		umount -l "$mnt" 2>/dev/null || true
	fi
	what+=" n$node killed $d into its mount: mount gone ${t_mnt:-never} ms;"
}

# journal NODE: the number of NODE's journal (its sticky journal glock).
journal_of() {
	"$T_SHOAL" glocks "$(c_mnt "$1")" 'gltype == 9' 2>/dev/null |
		awk '/^G:/ && / f:[A-Z]*S/ { split($3, n, "/"); print n[2]; exit }' | { read -r h && echo $((16#$h)); }
}

# --- setup ---------------------------------------------------------------------

c_mkfs 1G 3
c_start_lockd "$LEASE"
for node in "${nodes[@]}"; do c_mount "$node"; done
mkdir -p "$(c_mnt a)/shared/d"
for node in "${nodes[@]}"; do start_load "$node" 0; done
ok "3 nodes mounted, 6 programs started"

# --- rounds --------------------------------------------------------------------

rfailed=0
declare -A kinds=()
for round in $(seq 1 "$ROUNDS"); do
	why=()
	what=
	r=$((RANDOM % 8))
	if [ $r -lt 4 ]; then kind=plain; elif [ $r -lt 6 ]; then kind=demote; else kind=recover; fi
	v=${nodes[$((RANDOM % 3))]}
	survivors=()
	for node in "${nodes[@]}"; do [ "$node" = "$v" ] || survivors+=("$node"); done
	victims=("$v")
	d=$((RANDOM % 1500))
	declare -A rc0=()
	for node in "${nodes[@]}"; do rc0[$node]=$(recovered_lines "$node"); done
	for node in "${nodes[@]}"; do
		for p in 0 1; do
			c_pid_done "${wpid[$node$p]}" &&
				why+=("program $node$p had ended before the round: $(grep '^E ' "$t_dir/load-$node$p.log" | tail -1)")
		done
	done

	case $kind in
	plain)
		sleep_ms $d
		kill -9 "${t_pids[$(c_mnt "$v")]}"
		kns=$(now_ns)
		what="plain: n$v after $d ms;"
		killed "$v" "$kns"
		;;
	demote)
		sleep_ms $d
		out=$("$T_PY" "$WORK" killon 5 'kind == demote' "$v:$(c_mnt "$v"):${t_pids[$(c_mnt "$v")]}") || true
		if [ "$(echo "$out" | tail -1)" = timeout ]; then
			kill -9 "${t_pids[$(c_mnt "$v")]}"
			kns=$(now_ns)
			what="demote: n$v after $d ms, no demotion within 5 s;"
			why+=("n$v queued no demotion in 5 s under the shared load")
		else
			kns=$(echo "$out" | tail -1 | awk '{ print $2 }')
			what="demote: n$v after $d ms at '$(echo "$out" | tail -1 | cut -d' ' -f4-6)';"
		fi
		killed "$v" "$kns"
		;;
	recover)
		jid=$(journal_of "$v")
		specs=()
		for node in "${survivors[@]}"; do specs+=("$node:$(c_mnt "$node"):${t_pids[$(c_mnt "$node")]}"); done
		if [ $((RANDOM % 2)) = 0 ]; then ev=request; else ev=granted; fi
		filter="gltype == 9 && glnum == ${jid:-0} && kind == request"
		[ $ev = request ] || filter="gltype == 9 && glnum == ${jid:-0} && kind == state && new == EX"
		"$T_PY" "$WORK" killon $((LEASE + 15)) "$filter" "${specs[@]}" >"$t_dir/killon.out" 2>&1 &
		kpid=$!
		# A trace starts on a node's control socket; once in about 100
		# rounds it took more than 10 s under this load (not understood
		# yet): the bound is 30 s, and a start slower than 5 s is printed.
		for ((i = 0; i < 600; i++)); do
			grep -q '^ready' "$t_dir/killon.out" && break
			c_pid_done "$kpid" && break
			sleep 0.05
		done
		[ "$i" -lt 100 ] || echo "# round $round: the survivors' traces took $((i / 20)) s to start"
		grep -q '^ready' "$t_dir/killon.out" ||
			why+=("the traces of the survivors did not start in 30 s: $(tr '\n' ' ' <"$t_dir/killon.out")")
		sleep_ms $d
		kill -9 "${t_pids[$(c_mnt "$v")]}"
		kns=$(now_ns)
		what="recover: n$v (journal $jid) after $d ms;"
		killed "$v" "$kns"
		st=0
		c_wait_pid "$kpid" $((LEASE + 20)) || st=$?
		out=$(tail -1 "$t_dir/killon.out")
		if [ $st != 0 ] || [ "$out" = timeout ]; then
			why+=("no survivor asked for n$v's journal lock within $((LEASE + 15)) s ($out)")
			[ $st != 124 ] || kill "$kpid" 2>/dev/null
		else
			v2=$(echo "$out" | awk '{ print $1 }')
			kns=$(echo "$out" | awk '{ print $2 }')
			what+=" n$v2 at its journal-lock $ev ('$(echo "$out" | cut -d' ' -f3-5)');"
			victims+=("$v2")
			survivors=()
			for node in "${nodes[@]}"; do [ "$node" = "$v" ] || [ "$node" = "$v2" ] || survivors+=("$node"); done
			killed "$v2" "$kns"
		fi
		;;
	esac
	kinds[$kind]=$((${kinds[$kind]:-0} + 1))

	# a survivor recovers every victim, then the survivors work on
	for node in "${victims[@]}"; do recovered "$node" "${rc0[$node]}" || true; done
	survivors_progress "$kns" "${survivors[@]}"

	# the victims come back (now and then killed once more while mounting)
	for node in "${victims[@]}"; do
		[ $((RANDOM % 100)) -lt "$MOUNTKILL" ] && mount_killed "$node"
		if mount_retry "$node" $((LEASE + 20)); then
			start_load "$node" $((round * 1000000))
			[ "$tries" = 1 ] || what+=" n$node mounted again in $tries tries;"
		else
			why+=("n$node cannot mount again ($tries tries)")
		fi
	done

	if [ ${#why[@]} -eq 0 ]; then
		ok "round $round: $what"
	else
		not_ok "round $round: $what"
		printf '#   %s\n' "${why[@]}"
		c_logs
		rfailed=$((rfailed + 1))
		if [ $rfailed -ge 3 ]; then
			echo "# 3 rounds failed: stopping"
			break
		fi
		for node in "${nodes[@]}"; do # whatever is down comes back
			[ -n "${c_mounted[$node]:-}" ] && continue
			mount_retry "$node" $((LEASE + 20)) && start_load "$node" $((round * 1000000))
		done
	fi
done
echo "# rounds: ${kinds[plain]:-0} plain, ${kinds[demote]:-0} demote, ${kinds[recover]:-0} recover"

# --- the end: the load stops, every node unmounts, a fresh mount checks ----------

ended=
for id in "${!wpid[@]}"; do
	[ -n "${wpid[$id]}" ] || continue
	if c_pid_done "${wpid[$id]}"; then
		ended+=" $id ($(grep '^E ' "$t_dir/load-$id.log" | tail -1))"
	fi
	kill "${wpid[$id]}" 2>/dev/null || true
done
check_eq "every program of a live node was still running at the end" "" "$ended"
for id in "${!wpid[@]}"; do
	if [ -n "${wpid[$id]}" ] && ! c_wait_pid "${wpid[$id]}" 20 >/dev/null 2>&1; then
		kill -9 "${wpid[$id]}" 2>/dev/null || true
	fi
done
check "every node unmounts cleanly" c_umount_all
c_mount a
rc=0
"$T_PY" "$WORK" check "$(c_mnt a)" "$t_dir"/load-*.log >"$t_dir/check.out" 2>&1 || rc=$?
echo "# $(tail -1 "$t_dir/check.out")"
check_eq "a fresh mount finds every acknowledged write and removal" 0 "$rc"
[ $rc = 0 ] || head -20 "$t_dir/check.out" | sed 's/^/#   /'
check "node a unmounts cleanly" c_umount a
c_stop_lockd
c_fsck_check
echo "# $((SECONDS - start)) s (seed $SEED)"
t_done
