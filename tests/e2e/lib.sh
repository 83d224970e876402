# lib.sh - shared helpers of the end-to-end and crash tests.  Source it from
# a test script (`. "$(dirname "$0")/lib.sh"`); it sets `set -euo pipefail`.
#
# What it gives:
#   t_dir                  a private temporary directory (removed at exit)
#   t_mkfs IMG SIZE [MKFS ARGS...]     format an image file (sparse)
#   t_mount IMG MNT [OPTS]             mount (daemon mode), mkdir MNT if needed
#   t_mount_fg IMG MNT LOG [OPTS]      shoal-mount -f in the background,
#                                      stderr to LOG; pid in T_FG_PID
#   t_umount MNT           unmount and wait until the daemon has exited
#                          (returns the daemon's exit status in -f mode)
#   t_remount IMG MNT [OPTS]           t_umount then t_mount
#   t_fsck IMG             fsck.shoal -n IMG, or return 77 if it is not built
#   t_try 'PYTHON' ARGS... run Python code (args in a[0], a[1], ...; os,
#                          errno, ctypes, stat imported): prints OK or the
#                          errno name (ENOENT...) of the OSError it raised;
#                          as another user with `local T_RUNAS=(setpriv ...)`
#   ok DESC / not_ok DESC / skip DESC        one TAP-like line each
#   check DESC CMD...      ok if CMD succeeds
#   check_eq DESC WANT GOT ok if the strings are equal (prints both if not)
#   t_done                 summary line; exit 1 if any check failed
# Every mount made through t_mount/t_mount_fg is unmounted at exit, even on
# failure, and the daemons this script started are stopped (by pid).
#
# E2E_KEEP=1 keeps the temporary directory (images) for a post-mortem.
# E2E_FS=ext4 runs the same script against ext4 on a loop mount instead
# (to check what ext4 does); shoal-only checks test `t_is_shoal`.
set -euo pipefail

: "${SHOAL_BUILD:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build}"
: "${E2E_FS:=shoal}"
T_MKFS=$SHOAL_BUILD/mkfs.shoal
T_MOUNT=$SHOAL_BUILD/shoal-mount
T_FSCK=$SHOAL_BUILD/fsck.shoal
T_SHOAL=$SHOAL_BUILD/shoal
# The system Python: a non-root user must be able to run it too.
T_PY=/usr/bin/python3
[ -x "$T_PY" ] || T_PY=$(command -v python3)

t_n=0
t_failed=0
t_skipped=0
t_mounts=()        # mountpoints to unmount at exit
declare -A t_pids  # mountpoint -> daemon pid (what t_umount waits for)
declare -A t_fg    # mountpoint -> 1 if the daemon is our background child
T_FG_PID=
T_RUNAS=()         # command prefix of t_try (e.g. setpriv --reuid=...)

t_dir=$(mktemp -d /tmp/shoal-e2e.XXXXXX)

ok() { t_n=$((t_n + 1)); echo "ok $t_n - $*"; }
not_ok() { t_n=$((t_n + 1)); t_failed=$((t_failed + 1)); echo "not ok $t_n - $*"; }
skip() { t_n=$((t_n + 1)); t_skipped=$((t_skipped + 1)); echo "ok $t_n - SKIP $*"; }
check() {
	local desc=$1
	shift
	if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}
check_eq() {
	if [ "$2" == "$3" ]; then
		ok "$1"
	else
		not_ok "$1"
		printf '#   want: %s\n#   got:  %s\n' "$2" "$3"
	fi
}
t_is_shoal() { [ "$E2E_FS" = shoal ]; }

# py 'CODE' ARGS: run Python code with a = ARGS (output compared by the caller).
py() {
	local code=$1
	shift
	"$T_PY" -c "import os, sys, errno, stat, ctypes, hashlib
a = sys.argv[1:]
$code" "$@"
}

# t_umount_fsck MNT IMG: unmount, then fsck.shoal -n must find it clean.
t_umount_fsck() {
	t_is_shoal || return 0
	local rc=0
	t_umount "$1"
	t_fsck "$2" >"$t_dir/fsck.out" 2>&1 || rc=$?
	if [ $rc -eq 77 ]; then
		skip "fsck.shoal -n after the test: build/fsck.shoal not built"
	else
		check_eq "fsck.shoal -n is clean after the test" 0 "$rc"
		[ $rc -eq 0 ] || head -20 "$t_dir/fsck.out" | sed 's/^/#   /'
	fi
}
t_done() {
	echo "# $t_n checks, $t_failed failed, $t_skipped skipped"
	[ "$t_failed" -eq 0 ]
}

t_try() {
	"${T_RUNAS[@]}" "$T_PY" -c '
import os, sys, errno, ctypes, stat, textwrap
a = sys.argv[2:]
try:
    exec(compile(textwrap.dedent(sys.argv[1]).strip(), "t_try", "exec"))
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))' "$@"
}

t_mkfs() {
	local img=$1 size=$2
	shift 2
	rm -f "$img"
	if t_is_shoal; then
		"$T_MKFS" -q "$@" "$img" "$size"
	else
		truncate -s "$size" "$img" && mkfs.ext4 -q -F "$img" >/dev/null
	fi
}

# The daemon pid of a mounted shoal filesystem, from its control socket.
t_daemon_pid() { "$T_SHOAL" status "$1" 2>/dev/null | awk '$1 == "pid" { print $2 }'; }

t_wait_mounted() { # MNT PID: until MNT is a mount or PID died (max 30 s)
	local i
	for ((i = 0; i < 300; i++)); do
		mountpoint -q "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

t_ext4_opts() { # shoal options -> ext4 options
	local o out=loop IFS=,
	for o in $1; do
		case $o in lock=* | allow_other | node=* | cache=* | max_threads=*) ;; *) out+=,$o ;; esac
	done
	echo "$out"
}

t_mount() {
	local img=$1 mnt=$2 opts=${3:-lock=nolock}
	mkdir -p "$mnt"
	if ! t_is_shoal; then
		mount -o "$(t_ext4_opts "$opts")" "$img" "$mnt" || return
		t_mounts+=("$mnt")
		return 0
	fi
	"$T_MOUNT" -o "$opts" "$img" "$mnt" || return
	t_mounts+=("$mnt")
	t_pids[$mnt]=$(t_daemon_pid "$mnt")
	t_fg[$mnt]=
}

t_mount_fg() {
	local img=$1 mnt=$2 log=$3 opts=${4:-lock=nolock}
	mkdir -p "$mnt"
	"$T_MOUNT" -f -o "$opts" "$img" "$mnt" 2>"$log" &
	T_FG_PID=$!
	t_pids[$mnt]=$T_FG_PID
	t_fg[$mnt]=1
	t_mounts+=("$mnt")
	t_wait_mounted "$mnt" "$T_FG_PID"
}

t_pid_alive() { # a zombie counts as gone
	local st
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

t_umount() {
	local mnt=$1 pid i rc=0
	pid=${t_pids[$mnt]:-}
	if mountpoint -q "$mnt"; then
		umount "$mnt" || return
	fi
	if [ -n "$pid" ]; then
		if [ -n "${t_fg[$mnt]:-}" ]; then
			wait "$pid" || rc=$?
		else
			for ((i = 0; i < 1200; i++)); do
				t_pid_alive "$pid" || break
				sleep 0.1
			done
			t_pid_alive "$pid" && return 1
		fi
	fi
	t_pids[$mnt]=
	t_fg[$mnt]=
	return $rc
}

t_remount() {
	t_umount "$2" && t_mount "$@"
}

t_fsck() {
	[ -x "$T_FSCK" ] || return 77
	"$T_FSCK" -n "$1"
}

t_cleanup() {
	local rc=$? mnt pid
	set +e
	for mnt in "${t_mounts[@]}"; do
		pid=${t_pids[$mnt]:-}
		if mountpoint -q "$mnt"; then
			umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null ||
				umount -l "$mnt" 2>/dev/null
		fi
		if [ -n "$pid" ]; then
			for _ in $(seq 100); do t_pid_alive "$pid" || break; sleep 0.1; done
			t_pid_alive "$pid" && kill "$pid" 2>/dev/null
		fi
	done
	if [ -n "${E2E_KEEP:-}" ]; then echo "# kept $t_dir"; else rm -rf "$t_dir"; fi
	exit $rc
}
trap t_cleanup EXIT
