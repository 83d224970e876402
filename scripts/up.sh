#!/usr/bin/env bash
# Installs what is missing, builds, formats the default image (var/shoal.img,
# 1 GiB, sparse, three journals) unless it exists, and brings up a two-node
# cluster on it: shoal-lockd on var/lockd.sock, node "a" mounted at mnt/a and
# node "b" at mnt/b.  A node whose shoal-mount died is unmounted and
# mounted again; a lockd that died is started again.  Stop with
# scripts/down.sh.
#
# Environment (for tests): SHOAL_BUILD=DIR uses the programs in DIR and
# neither installs nor builds; SHOAL_RUN=DIR keeps var/ and mnt/ in DIR
# instead of the source tree (down.sh takes the same).
set -euo pipefail
. "$(dirname "$0")/deps.sh"
if [ -n "${SHOAL_BUILD:-}" ]; then
	bin=$(cd "$SHOAL_BUILD" && pwd)
else
	shoal_install_deps
	shoal_build build
	bin=$shoal_top/build
fi
cd "${SHOAL_RUN:-$shoal_top}"
run=$(pwd)
mkdir -p var mnt/a mnt/b
if [ ! -e var/shoal.img ]; then
	"$bin/mkfs.shoal" -j 3 -t shoal:default var/shoal.img 1G
fi
sock=$run/var/lockd.sock
if pid=$(shoal_lockd_pid var/lockd.pid); then
	echo "shoal: shoal-lockd already running (pid $pid)"
else
	rm -f "$sock"
	"$bin/shoal-lockd" --listen "unix:$sock" --pid-file "$run/var/lockd.pid" \
		2>>var/lockd.log
fi
for node in a b; do
	state=$(shoal_mount_state "$run/mnt/$node")
	if [ "$state" = live ]; then
		echo "shoal: node $node already mounted at $run/mnt/$node"
	else
		[ "$state" = dead ] && shoal_umount_dead "$run/mnt/$node"
		"$bin/shoal-mount" -o "lock=shoal:unix:$sock,node=$node" var/shoal.img "mnt/$node"
	fi
done
echo
echo "shoal: a two-node cluster on var/shoal.img: node a at $run/mnt/a, node b at $run/mnt/b"
echo "Try:   echo hello > mnt/a/hello && cat mnt/b/hello"
echo "Stats: build/shoal stat mnt/a     Locks: build/shoal glocks mnt/b"
echo "Stop:  scripts/down.sh   (a clean unmount leaves every journal clean)"
