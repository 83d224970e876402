#!/usr/bin/env bash
# Stops what scripts/up.sh started: unmounts both nodes (waiting until each
# daemon has written its last checkpoint; a plain umount returns before
# that), then stops shoal-lockd.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
for m in a b shoal; do
	mp=$top/mnt/$m
	if mountpoint -q "$mp" 2>/dev/null; then
		if [ -x "$top/build/shoal" ]; then
			"$top/build/shoal" umount "$mp"
		else
			umount "$mp"
		fi
		echo "shoal: unmounted $mp"
	fi
done
pidf=$top/var/lockd.pid
if [ -e "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
	kill "$(cat "$pidf")"
	for _ in $(seq 50); do kill -0 "$(cat "$pidf" 2>/dev/null)" 2>/dev/null || break; sleep 0.1; done
	echo "shoal: stopped shoal-lockd"
fi
