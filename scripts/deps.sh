#!/usr/bin/env bash
# Installs the Debian 12 packages shoal builds, runs and tests with, if any is
# missing.  Sourced by up.sh and test.sh; run it alone to install only.
shoal_packages=(
	gcc make cmake pkg-config
	libfuse3-dev fuse3 libblkid-dev libcmocka-dev
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

shoal_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	shoal_install_deps
fi
