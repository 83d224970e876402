#!/usr/bin/env bash
# Unmounts what scripts/up.sh mounted.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
if mountpoint -q "$top/mnt/shoal"; then
	umount "$top/mnt/shoal"
	echo "shoal: unmounted $top/mnt/shoal"
else
	echo "shoal: nothing mounted at $top/mnt/shoal"
fi
