#!/usr/bin/env bash
# t_scripts.sh - scripts/up.sh and scripts/down.sh, the way a new user starts
# and stops the two-node cluster, after a node crashed (issue 23, defect
# 14): a mount whose daemon died ("Transport endpoint is not connected")
# must not stop either script.  down.sh unmounts it with the live ones and
# stops lockd; up.sh replaces it with a live mount, also after every shoal
# process of the machine was killed; the files survive and fsck is clean.
# The scripts run with SHOAL_BUILD (this build, nothing installed or built)
# and SHOAL_RUN (var/ and mnt/ in this test's directory).
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_scripts.sh tests shoal's own scripts: nothing to compare with ext4"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	skip "needs root to mount"
	t_done
	exit 0
fi

scripts=${SHOAL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}/scripts
run=$t_dir/run
mkdir -p "$run"
export SHOAL_BUILD SHOAL_RUN=$run

sc_cleanup() {
	local rc=$? mp
	set +e
	for mp in "$run/mnt/a" "$run/mnt/b"; do
		if sc_mounted "$mp"; then umount "$mp" 2>/dev/null || umount -l "$mp"; fi
	done
	[ -e "$run/var/lockd.pid" ] && kill "$(cat "$run/var/lockd.pid")" 2>/dev/null
	(exit $rc)
	t_cleanup
}
trap sc_cleanup EXIT

# sc_mounted MP: MP is in the mount table, alive or not (mountpoint(1)
# stats it, which fails on a dead FUSE mount).
sc_mounted() { awk -v mp="$1" '$2 == mp { f = 1 } END { exit !f }' /proc/self/mounts; }

# sc_alive MP: a mount whose daemon answers (mountpoint -q also says yes
# of a dead one).
sc_alive() { sc_mounted "$1" && stat -f "$1" >/dev/null 2>&1; }

# sc_dead MP: in the mount table, and statfs (which always asks the
# daemon) fails with ENOTCONN.
sc_dead() {
	sc_mounted "$1" && ! stat -f "$1" >"$t_dir/statfs.out" 2>&1 &&
		grep -q 'Transport endpoint is not connected' "$t_dir/statfs.out"
}

# sc_script NAME DESC: run scripts/NAME.sh; ok if it exits 0.
sc_script() {
	local rc=0
	"$scripts/$1.sh" >"$t_dir/$1.out" 2>&1 || rc=$?
	if [ $rc -eq 0 ]; then
		ok "$2: $1.sh exits 0"
	else
		not_ok "$2: $1.sh exits 0 (exit $rc)"
		sed 's/^/#   /' "$t_dir/$1.out" | tail -10
	fi
}

# sc_guard_pid PID: the guardian of daemon PID (fuse/guard.c): the
# shoal-guard process that holds the other end of one of PID's pipes.
sc_guard_pid() {
	local f g pipes
	pipes=$(for f in /proc/"$1"/fd/*; do readlink "$f"; done 2>/dev/null | grep '^pipe:' | sort -u)
	[ -n "$pipes" ] || return 1
	for g in $(pgrep -x shoal-guard); do
		for f in /proc/"$g"/fd/*; do readlink "$f"; done 2>/dev/null | grep -qxF "$pipes" &&
			{ echo "$g"; return 0; }
	done
	return 1
}

# sc_kill_node N: kill -9 node N's daemon and its guardian (as the OOM
# killer or a careless pkill may): its mount is left dead.
sc_kill_node() {
	local mp=$run/mnt/$1 pid gpid
	pid=$(t_daemon_pid "$mp" || true)
	if [ -z "$pid" ]; then
		not_ok "node $1's daemon pid (shoal status $mp)"
		return
	fi
	gpid=$(sc_guard_pid "$pid" || true)
	check "node $1's guardian found" [ -n "$gpid" ]
	[ -z "$gpid" ] || kill -9 "$gpid"
	kill -9 "$pid"
	for _ in $(seq 100); do sc_dead "$mp" && break; sleep 0.05; done
	check "node $1's mount is dead (Transport endpoint is not connected)" sc_dead "$mp"
}

# sc_live: both nodes mounted and answering, the file of each on the other.
sc_live() {
	check "$1: node a is mounted and alive" sc_alive "$run/mnt/a"
	check "$1: node b is mounted and alive" sc_alive "$run/mnt/b"
	check_eq "$1: node b reads what node a wrote" hello "$(cat "$run/mnt/b/hello" 2>&1)"
	echo "$1" >"$run/mnt/b/from_b" 2>/dev/null || true
	check_eq "$1: node a reads what node b wrote" "$1" "$(cat "$run/mnt/a/from_b" 2>&1)"
}

sc_script up "fresh start"
echo hello >"$run/mnt/a/hello"
sync -f "$run/mnt/a"
sc_live "fresh start"

# a node crashed: down.sh stops the rest and clears the dead mount
sc_kill_node a
sc_script down "after node a crashed"
check "... node a's dead mount is gone" bash -c "! awk -v mp='$run/mnt/a' '\$2 == mp { f = 1 } END { exit !f }' /proc/self/mounts"
check "... node b is unmounted" bash -c "! grep -q ' $run/mnt/b ' /proc/self/mounts"
lockd_pid=$(cat "$run/var/lockd.pid" 2>/dev/null || echo none)
check "... shoal-lockd is stopped" bash -c "! kill -0 $lockd_pid 2>/dev/null"
sc_script up "restart after node a crashed"
sc_live "restart after node a crashed"

# a node crashed and up.sh runs again: it brings the dead node back
sc_kill_node b
lockd_pid=$(cat "$run/var/lockd.pid")
kill -9 "$lockd_pid" # and lockd: no lease to wait for
for _ in $(seq 100); do t_pid_alive "$lockd_pid" || break; sleep 0.05; done
sc_kill_node a
sc_script up "every shoal process killed"
sc_live "every shoal process killed"

sc_script down "clean stop"
check "... nothing mounted" bash -c "! grep -q ' $run/mnt/' /proc/self/mounts"
rc=0
t_fsck "$run/var/shoal.img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "fsck.shoal -n is clean after the crashes and down.sh" 0 "$rc"
[ $rc -eq 0 ] || sed 's/^/#   /' "$t_dir/fsck.out" | head -10
t_done
