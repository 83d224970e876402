#!/usr/bin/env bash
# Installs what is missing, builds, formats the default image (var/shoal.img,
# 1 GiB, sparse) unless it exists, and mounts it at mnt/shoal.
# Stop with scripts/down.sh (or: umount mnt/shoal).
set -euo pipefail
. "$(dirname "$0")/deps.sh"
shoal_install_deps
shoal_build build
cd "$shoal_top"
mkdir -p var mnt/shoal
if [ ! -e var/shoal.img ]; then
	build/mkfs.shoal -j 2 -t shoal:default var/shoal.img 1G
fi
if mountpoint -q mnt/shoal; then
	echo "shoal: already mounted at $shoal_top/mnt/shoal"
else
	build/shoal-mount -o lock=nolock var/shoal.img mnt/shoal
fi
echo
echo "shoal is mounted at $shoal_top/mnt/shoal (image var/shoal.img)."
echo "Try:   echo hello > mnt/shoal/hello && cat mnt/shoal/hello"
echo "Stats: build/shoal stat mnt/shoal"
echo "Stop:  scripts/down.sh   (a clean unmount leaves the journal clean)"
