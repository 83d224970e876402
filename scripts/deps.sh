#!/usr/bin/env bash
# Installs the Debian 12 packages shoal builds, runs and tests with, if any is
# missing.  Sourced by up.sh and test.sh; run it alone to install only.
shoal_packages=(
	gcc make cmake pkg-config
	libfuse3-dev fuse3 libblkid-dev libcmocka-dev
	libssl-dev # libcrypto: lockd's HMAC-SHA256
	e2fsprogs util-linux mount attr procps python3 psmisc
	gdb # lib_cluster.sh prints the threads of a hung node (c_diag)
)

shoal_install_deps() {
	local missing=() p
	for p in "${shoal_packages[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "shoal: installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	if [ ! -e /dev/fuse ]; then
		modprobe fuse 2>/dev/null || true
	fi
}

# Configure and build into $1 (default build), extra cmake args after it.
shoal_build() {
	local dir=${1:-build}
	shift || true
	cmake -S "$shoal_top" -B "$shoal_top/$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
	cmake --build "$shoal_top/$dir" -j"$(nproc)"
}

# shoal_mount_state MP: "live", "dead" (in the mount table but its daemon is
# gone: every access fails with "Transport endpoint is not connected") or
# "none".  The mount table is read, not MP, which a dead mount cannot stat;
# statfs asks the daemon each time (a stat may be answered from the
# kernel's attribute cache, even of a dead mount).
shoal_mount_state() {
	if ! awk -v mp="$1" '$2 == mp { f = 1 } END { exit !f }' /proc/self/mounts; then
		echo none
	elif stat -f "$1" >/dev/null 2>&1; then
		echo live
	else
		echo dead
	fi
}

# shoal_umount_dead MP: unmount a dead mount (nothing is left to write: the
# daemon is gone; its node's journal is replayed by the next mount of that
# node or by a live node).  Lazily if something still has it open.
shoal_umount_dead() {
	umount "$1" 2>/dev/null || umount -l "$1"
	echo "shoal: $1: its shoal-mount had died (Transport endpoint is not connected): unmounted; its journal is replayed when the node mounts again or by a live node"
}

# shoal_lockd_pid PIDFILE: the pid in PIDFILE if that process is a running
# shoal-lockd (not a zombie, which kill -0 still finds, nor a process that
# got the pid later); nothing and status 1 otherwise.
shoal_lockd_pid() {
	local pid st
	pid=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = shoal-lockd ] || return 1
	st=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ] || return 1
	echo "$pid"
}

shoal_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	shoal_install_deps
fi
