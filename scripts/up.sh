#!/usr/bin/env bash
# Installs what is missing, builds, formats the default image (var/shoal.img,
# 1 GiB, sparse, three journals) unless it exists, and brings up a two-node
# cluster on it: shoal-lockd on var/lockd.sock, node "a" mounted at mnt/a and
# node "b" at mnt/b.  Stop with scripts/down.sh.
set -euo pipefail
. "$(dirname "$0")/deps.sh"
shoal_install_deps
shoal_build build
cd "$shoal_top"
mkdir -p var mnt/a mnt/b
if [ ! -e var/shoal.img ]; then
	build/mkfs.shoal -j 3 -t shoal:default var/shoal.img 1G
fi
sock=$shoal_top/var/lockd.sock
if [ -e var/lockd.pid ] && kill -0 "$(cat var/lockd.pid)" 2>/dev/null; then
	echo "shoal: shoal-lockd already running (pid $(cat var/lockd.pid))"
else
	rm -f "$sock"
	build/shoal-lockd --listen "unix:$sock" --pid-file "$shoal_top/var/lockd.pid" \
		2>>var/lockd.log
fi
for node in a b; do
	if mountpoint -q "mnt/$node"; then
		echo "shoal: node $node already mounted at $shoal_top/mnt/$node"
	else
		build/shoal-mount -o "lock=shoal:unix:$sock,node=$node" var/shoal.img "mnt/$node"
	fi
done
echo
echo "shoal: a two-node cluster on var/shoal.img: node a at $shoal_top/mnt/a, node b at $shoal_top/mnt/b"
echo "Try:   echo hello > mnt/a/hello && cat mnt/b/hello"
echo "Stats: build/shoal stat mnt/a     Locks: build/shoal glocks mnt/b"
echo "Stop:  scripts/down.sh   (a clean unmount leaves every journal clean)"
