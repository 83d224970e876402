#!/usr/bin/env bash
# Unmounts what scripts/up.sh mounted, and waits until the daemon has
# finished its last checkpoint (a plain umount returns before that).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
if mountpoint -q "$top/mnt/shoal"; then
	if [ -x "$top/build/shoal" ]; then
		"$top/build/shoal" umount "$top/mnt/shoal"
	else
		umount "$top/mnt/shoal"
	fi
	echo "shoal: unmounted $top/mnt/shoal"
else
	echo "shoal: nothing mounted at $top/mnt/shoal"
fi
