#!/usr/bin/env bash
# Stops what scripts/up.sh started: unmounts both nodes (waiting until each
# daemon has written its last checkpoint; a plain umount returns before
# that), then stops shoal-lockd.  A mount whose daemon died is unmounted
# too.  SHOAL_BUILD and SHOAL_RUN as for up.sh.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/scripts/deps.sh"
bin=$(cd "${SHOAL_BUILD:-$top/build}" 2>/dev/null && pwd) || bin=$top/build
top=$(cd "${SHOAL_RUN:-$top}" && pwd)
for m in a b shoal; do
	mp=$top/mnt/$m
	state=$(shoal_mount_state "$mp")
	if [ "$state" = dead ]; then
		shoal_umount_dead "$mp"
	elif [ "$state" = live ]; then
		if [ -x "$bin/shoal" ]; then
			"$bin/shoal" umount "$mp"
		else
			umount "$mp"
		fi
		echo "shoal: unmounted $mp"
	fi
done
pidf=$top/var/lockd.pid
if pid=$(shoal_lockd_pid "$pidf"); then
	kill "$pid"
	for _ in $(seq 50); do shoal_lockd_pid "$pidf" >/dev/null || break; sleep 0.1; done
	if shoal_lockd_pid "$pidf" >/dev/null; then
		echo "shoal: shoal-lockd (pid $pid) did not stop within 5 s" >&2
		exit 1
	fi
	echo "shoal: stopped shoal-lockd"
fi
