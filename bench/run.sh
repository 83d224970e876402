#!/usr/bin/env bash
# bench/run.sh - runs the issue #2/#3 workloads on ext4, on shoal (single
# node, lock=nolock) and on shoal-cl (single node, lock=shoal against its own
# shoal-lockd), on image files in one directory of the same host disk, in the
# same run, several rounds, and prints per-round values, medians, ratios
# (shoal/ext4, shoal-cl/ext4, shoal-cl/shoal), the targets (PASS/MISS,
# information only) and the counters that explain the numbers.
# bench/README.md says what each workload does and how each counter is
# measured.
#
#   bench/run.sh [--rounds N] [--quick] [--dir DIR] [--fs LIST] [--appends N]
#                [--mmread-cache warm|cold] [--shoal-on-file] [WORKLOAD...]
#
# WORKLOAD is meta, seq, fstest, cache, pingpong, mmread, lockd or plock (default: all eight;
# lockd is the lock manager's round trips against a bare Unix-socket echo,
# see the "lockd" section below), or mmext, wbcost or cluster (only when
# named; cluster is issue 22's scaling measurement: N nodes of one image,
# N from $CLUSTER_NODES).  Results go to stdout and to
# bench/results/DATE-WORKLOAD.txt.  Exit status: 0 when every run completed
# (whatever the timings), 1 when a run failed (mount, workload program, a
# shoal daemon or shoal-lockd that died, a mount that went read-only), 2 on
# bad usage.
#
# Invariants:
#  (1) every round of every workload formats and mounts each variant afresh
#      (4 GiB sparse image, losetup with direct I/O, mkfs, for shoal-cl a new
#      shoal-lockd), runs one variant at a time, and unmounts and deletes it
#      (and stops its shoal-lockd) before the next; the order of the
#      variants rotates by one per round;
#  (2) device counters are sampled from /sys/block/loopN/stat of the loop
#      device under each filesystem, before and after the measured step,
#      never across a format or a mount;
#  (3) everything this script set up (mounts, shoal daemons, shoal-lockd
#      daemons, loop devices, images, temp dir) is torn down on exit, also
#      after a failure or ^C; a shoal-lockd is stopped only after every
#      mount using it is unmounted.
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$bench/../scripts/deps.sh" # shoal_top, shoal_install_deps

usage() {
	cat <<EOF
usage: bench/run.sh [--rounds N] [--quick] [--dir DIR] [--fs LIST] [--appends N]
                    [--mmread-cache warm|cold] [--shoal-on-file] [WORKLOAD...]

Runs each WORKLOAD (default: all of meta seq fstest cache pingpong mmread lockd plock;
mmext and wbcost run only when named)
N rounds (default 3; 1 with --quick) and prints medians and ratios.
  meta, fstest       on each variant of --fs
  seq, mmext, wbcost on each variant of --fs but fuse-null
  cache              shoal and shoal-cl: lock requests of a re-read (must be 0)
  pingpong           two nodes appending to one file in turn (shoal-cl with
                     the default hold time and with hold=0; ext4 reference)
  mmread             seeds/000: N = 1, 2, 4 processes (ext4 and fuse-null, one
                     mount) or nodes (shoal-cl, each its own mount) mmap one file and
                     copy random 10 KiB ranges, a new mmap per iteration or
                     one per process; EX requests and callbacks for the file
  lockd              shoal-lockd lock+unlock round trips against a bare
                     Unix-socket echo, at least 3 rounds
  plock              fcntl lock ping-pong between two nodes (ctdb ping_pong:
                     locks only, and read+increment under each lock; ext4:
                     two processes), and uncontended lock+unlock on one node
                     against one FUSE round trip (fuse-null fsync)
  mmext              seeds/003: a file grown by ftruncate + mmap hunks, then
                     by one mapping grown with mremap
  wbcost             fsync of one dirty 4 KiB block of a big file
  cluster            issue 22: N = \$CLUSTER_NODES (default 1 2 4 8) nodes of one
                     image and one shoal-lockd, each node's process doing small-file
                     churn in its own directory (private), or that plus appends
                     to two shared big files, files made in one shared directory
                     and records appended to one shared log (mixed), for
                     \$CLUSTER_SECONDS (default 10; 3 with --quick) per run;
                     total and per-node ops/s, lockd's RSS; ext4: N = 1
  --quick          smaller sizes, for a smoke run of everything in about 2 minutes
  --fs LIST        comma-separated variants among ext4, shoal (lock=nolock),
                   shoal-cl (lock=shoal, one node, own shoal-lockd),
                   shoal-cl2 (shoal-cl with a second, idle node mounted),
                   fuse-null (meta, fstest, mmread: bench/nullfs.c, the FUSE floor); default
                   \$SHOAL_BENCH_FS or ext4,fuse-null,shoal,shoal-cl.  pingpong runs its
                   two cluster variants if shoal-cl is in LIST, ext4 if ext4 is
  --appends N      pingpong appends per run (default 2000; 300 with --quick)
  --mmread-cache warm|cold
                   mmread: read the file through every mount before each
                   run (warm, the default) or start with empty caches
  --dir DIR        where the images and mountpoints go (default
                   \$SHOAL_BENCH_DIR or /var/tmp/shoal-bench); must be on a disk
  --shoal-on-file  mount shoal on its image file instead of a loop device
                   (then only shoal's own counters are available for it)
Environment: SHOAL_BUILD (build dir, default build/), SHOAL_BENCH_TIMEOUT
(seconds one workload program may take, default 1800), SHOAL_BENCH_FS;
cluster: CLUSTER_NODES, CLUSTER_SECONDS, CLUSTER_GRACE (seconds a node may
take past the end of a run, default 120).
EOF
}

rounds=
quick=0
shoal_on_file=0
dir=${SHOAL_BENCH_DIR:-/var/tmp/shoal-bench}
fs_list=${SHOAL_BENCH_FS:-ext4,fuse-null,shoal,shoal-cl}
pp_appends=
mm_cache=warm
workloads=()
while [ $# -gt 0 ]; do
	case $1 in
	--rounds)
		[ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }
		rounds=$2
		shift 2
		;;
	--quick) quick=1; shift ;;
	--dir)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		dir=$2
		shift 2
		;;
	--fs)
		[ $# -ge 2 ] || { usage >&2; exit 2; }
		fs_list=$2
		shift 2
		;;
	--appends)
		[ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }
		pp_appends=$2
		shift 2
		;;
	--mmread-cache)
		[ $# -ge 2 ] && [[ $2 == warm || $2 == cold ]] || { usage >&2; exit 2; }
		mm_cache=$2
		shift 2
		;;
	--shoal-on-file) shoal_on_file=1; shift ;;
	-h | --help) usage; exit 0 ;;
	meta | seq | fstest | cache | pingpong | mmread | lockd | plock | mmext | wbcost | cluster) workloads+=("$1"); shift ;;
	*) echo "bench/run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
done
[ ${#workloads[@]} -gt 0 ] || workloads=(meta seq fstest cache pingpong mmread lockd plock)

# The selected variants, in the canonical order (the rounds rotate it).
for v in ${fs_list//,/ }; do
	case $v in
	ext4 | shoal | shoal-cl | shoal-cl2 | fuse-null) ;;
	*) echo "bench/run.sh: --fs: unknown variant '$v' (ext4, shoal, shoal-cl, shoal-cl2, fuse-null)" >&2; exit 2 ;;
	esac
done
sel_fses=()
for v in ext4 fuse-null shoal shoal-cl shoal-cl2; do
	[[ ",$fs_list," != *",$v,"* ]] || sel_fses+=("$v")
done
[ ${#sel_fses[@]} -gt 0 ] || { echo "bench/run.sh: --fs selects nothing" >&2; exit 2; }

if [ "$quick" = 1 ]; then
	rounds=${rounds:-1}
	meta_files=10000
	seq_mib=128
	fst_iters=1024
	pp_appends=${pp_appends:-300}
	mm_mib=64
	mm_iters=1000
	pl_secs=2
	pl_iters=2000
else
	rounds=${rounds:-3}
	meta_files=100000
	seq_mib=1024
	fst_iters=8192
	pp_appends=${pp_appends:-2000}
	mm_mib=500  # the seed's 500 MiB file
	mm_iters=5000
	pl_secs=5
	pl_iters=20000
fi
fst_kib=8192 # the 8 MiB file of seeds/001
if [ "$quick" = 1 ]; then mmx_mib=256; wbc_mib=256; else mmx_mib=1024; wbc_mib=1024; fi
# cluster: the node counts (each 1-64, duplicates dropped), the seconds of
# one run, and how long a node may take past them before the run fails.
cl_ns=()
for n in ${CLUSTER_NODES:-1 2 4 8}; do
	[[ $n =~ ^[1-9][0-9]*$ ]] && [ "$n" -le 64 ] || {
		echo "bench/run.sh: CLUSTER_NODES: '$n' is not a node count from 1 to 64" >&2
		exit 2
	}
	[[ " ${cl_ns[*]} " == *" $n "* ]] || cl_ns+=("$n")
done
[ ${#cl_ns[@]} -gt 0 ] || { echo "bench/run.sh: CLUSTER_NODES is empty" >&2; exit 2; }
cl_secs=${CLUSTER_SECONDS:-$([ "$quick" = 1 ] && echo 3 || echo 10)}
cl_grace=${CLUSTER_GRACE:-120}
for v in "$cl_secs" "$cl_grace"; do
	[[ $v =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v v="$v" 'BEGIN { exit !(v > 0) }' || {
		echo "bench/run.sh: CLUSTER_SECONDS and CLUSTER_GRACE must be seconds > 0, not '$v'" >&2
		exit 2
	}
done
cl_jmax=$(printf '%s\n' "${cl_ns[@]}" | sort -n | tail -n 1) # journals of every cluster image
fst_seed=1
fst_floor_iters=2000
cache_mib=64 # the file the cache workload reads twice
img_size=4G
prog_timeout=${SHOAL_BENCH_TIMEOUT:-1800}
build=${SHOAL_BUILD:-$shoal_top/build}
results=$shoal_top/bench/results
stamp=$(date +%Y%m%d-%H%M%S)

if [ "$(id -u)" != 0 ]; then
	echo "bench/run.sh: must run as root (loop devices, mounts, drop_caches)" >&2
	exit 2
fi

# --- build ----------------------------------------------------------------

shoal_install_deps
if [ ! -f "$build/CMakeCache.txt" ]; then
	cmake -S "$shoal_top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
build_note=
if ! cmake --build "$build" -j"$(nproc)" --target mkfs.shoal shoal-mount shoal-cli shoal-lockd >/dev/null; then
	# Others edit the tree too; a half-done change elsewhere should not
	# stop a benchmark of the binaries that are there, but it must show.
	echo "bench/run.sh: build failed; using the binaries already in $build" >&2
	build_note=" (BUILD FAILED: older binaries already in the build dir)"
fi
# fsck.shoal only adds a note after each shoal round; run without it if it
# does not build.
cmake --build "$build" -j"$(nproc)" --target fsck.shoal >/dev/null 2>&1 || true

# The run uses copies, so a rebuild of $build while it runs (other people
# work in the same tree) cannot change shoal between rounds.
work=$(mktemp -d /tmp/shoal-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=$work/bin
mkdir "$bin"
cp "$build/mkfs.shoal" "$build/shoal-mount" "$build/shoal" "$build/shoal-lockd" "$bin/"
if [ -x "$build/fsck.shoal" ]; then cp "$build/fsck.shoal" "$bin/"; fi
shoal_rev="$(git -C "$shoal_top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
	git -C "$shoal_top" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes'), built $(
	date -r "$build/shoal-mount" '+%Y-%m-%d %H:%M:%S')$build_note"
for p in metabench seqio fstest pingpong mmread mmext plockpp clusterbench; do
	cc -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$bin/$p" "$bench/$p.c"
done
# shellcheck disable=SC2046
cc -O2 -Wall -Wextra -Wno-unused-parameter -Werror -D_GNU_SOURCE -o "$bin/nullfs" "$bench/nullfs.c" \
	$(pkg-config --cflags --libs fuse3) -lpthread

# --- state and teardown -----------------------------------------------------
# A variant (FS) is ext4, shoal or shoal-cl; pingpong adds shoal-cl-hold0 and
# mounts its cluster variants twice (node a, node b).  One variant is set up
# at a time.

declare -A mnt=([ext4]=$dir/mnt-ext4 [shoal]=$dir/mnt-shoal [shoal-cl]=$dir/mnt-shoal-cl
	[fuse-null]=$dir/mnt-fuse-null [shoal-cl2]=$dir/mnt-shoal-cl2
	[shoal-cl-hold0]=$dir/mnt-shoal-cl)
cl2_idle=$dir/mnt-shoal-cl2-idle # shoal-cl2: the second node, mounted and idle
declare -A img=([ext4]=$dir/ext4.img [shoal]=$dir/shoal.img [shoal-cl]=$dir/shoal-cl.img
	[shoal-cl2]=$dir/shoal-cl2.img
	[shoal-cl-hold0]=$dir/shoal-cl.img)
# cluster: variant shoal-cl-nN is N nodes (n0, n1, ...) of one image, node i
# at DIR/mnt-cl-I; ext4 is its one-node reference
cl_flavour= # the flavour being run: private or mixed
for n in "${cl_ns[@]}"; do
	mnt[shoal-cl-n$n]=$dir/mnt-cl-0
	img[shoal-cl-n$n]=$dir/shoal-cl.img
done
cl_mnt() { echo "$dir/mnt-cl-$1"; }
declare -A loopdev=() # FS -> its loop device, while set up
declare -A dev=()     # FS -> what it is mounted from
pp_mnt_a=$dir/mnt-a   # pingpong: node a and node b of the cluster variants
pp_mnt_b=$dir/mnt-b
mm_mnt_c=$dir/mnt-c   # mmread: nodes c and d too
mm_mnt_d=$dir/mnt-d
declare -A daemon_pid=() # mountpoint -> pid of the shoal-mount daemon serving it
declare -A daemon_log=() # mountpoint -> that daemon's log file
cl_lockd_pid=            # the shoal-lockd of the current cluster variant
cl_sock=$work/cl-lockd.sock
cl_log=$work/cl-lockd.log
any_fail=0
cur_w=     # the workload being run
cur_raw=   # its raw results (report.py input)
cur_out=   # its results file
fail_note= # why the last step failed

is_mounted() { findmnt -rn -M "$1" >/dev/null 2>&1; }
is_cluster() { [[ $1 == shoal-cl* ]]; }
is_shoal() { [[ $1 == shoal* ]]; }
nullfs_pid= # the bench/nullfs.c daemon of the fuse-null variant
floor_img=$dir/floor.img # fstest: scratch image of the device-floor probe
floor_loop=              # ... and its loop device, while set up

# pid_alive PID COMM: process PID runs COMM and is not a zombie.
pid_alive() {
	[ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] &&
		[ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# shoal_stop MNT: unmount MNT and wait until its daemon has exited.
shoal_stop() {
	local m=$1 pid=${daemon_pid[$1]:-} i
	if is_mounted "$m"; then
		timeout 120 "$bin/shoal" umount "$m" >/dev/null 2>&1 ||
			umount -l "$m" 2>/dev/null || true
	fi
	for i in $(seq 50); do
		pid_alive "$pid" shoal-mount || break
		sleep 0.2
	done
	! pid_alive "$pid" shoal-mount || kill -9 "$pid" 2>/dev/null || true
	unset "daemon_pid[$m]" "daemon_log[$m]"
}

cl_lockd_start() {
	rm -f "$cl_sock"
	"$bin/shoal-lockd" -f --listen "unix:$cl_sock" 2>"$cl_log" &
	cl_lockd_pid=$!
	local i
	for i in $(seq 100); do
		[ -S "$cl_sock" ] && return 0
		# Not pid_alive: until its exec the child is still "bash".
		[ "$(awk '{ print $3 }' "/proc/$cl_lockd_pid/stat" 2>/dev/null || echo Z)" != Z ] || break
		sleep 0.05
	done
	fail_note="shoal-lockd did not start: $(tail -n 5 "$cl_log")"
	return 1
}

cl_lockd_stop() {
	if [ -n "$cl_lockd_pid" ]; then
		kill "$cl_lockd_pid" 2>/dev/null || true
		wait "$cl_lockd_pid" 2>/dev/null || true
		cl_lockd_pid=
	fi
	rm -f "$cl_sock"
}

fs_teardown() {
	local fs=$1 m
	if [ "$fs" = fuse-null ]; then
		if is_mounted "${mnt[fuse-null]}"; then
			fusermount3 -u "${mnt[fuse-null]}" 2>/dev/null || umount -l "${mnt[fuse-null]}" 2>/dev/null || true
		fi
		if [ -n "$nullfs_pid" ]; then
			kill "$nullfs_pid" 2>/dev/null || true
			wait "$nullfs_pid" 2>/dev/null || true
			nullfs_pid=
		fi
		return 0
	fi
	if [ "$fs" = ext4 ]; then
		if is_mounted "${mnt[ext4]}"; then
			umount "${mnt[ext4]}" 2>/dev/null || umount -l "${mnt[ext4]}" 2>/dev/null || true
		fi
	else
		# Node b first: a's unmount then finds no other node holding locks.
		for m in $(printf '%s\n' "${!daemon_pid[@]}" | sort -r); do
			shoal_stop "$m"
		done
		cl_lockd_stop # after every mount that used it
	fi
	if [ -n "${loopdev[$fs]:-}" ]; then
		losetup -d "${loopdev[$fs]}" 2>/dev/null || true
		loopdev[$fs]=
	fi
	rm -f "${img[$fs]}"
}

cleanup() {
	local n
	for n in "${cl_ns[@]}"; do fs_teardown "shoal-cl-n$n"; done
	fs_teardown shoal-cl-hold0
	fs_teardown shoal-cl2
	fs_teardown shoal-cl
	fs_teardown shoal
	fs_teardown ext4
	fs_teardown fuse-null
	[ -z "$floor_loop" ] || losetup -d "$floor_loop" 2>/dev/null || true
	rm -f "$floor_img"
	lockd_teardown
	rmdir "${mnt[ext4]}" "${mnt[shoal]}" "${mnt[shoal-cl]}" "${mnt[fuse-null]}" "${mnt[shoal-cl2]}" \
		"$cl2_idle" "$pp_mnt_a" "$pp_mnt_b" "$mm_mnt_c" "$mm_mnt_d" 2>/dev/null || true
	for ((n = 0; n < cl_jmax; n++)); do rmdir "$(cl_mnt "$n")" 2>/dev/null || true; done
	rmdir "$dir" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# say TEXT...: print a line and keep it in the workload's results file.
say() {
	printf '%s\n' "$*"
	[ -z "$cur_out" ] || printf '%s\n' "$*" >>"$cur_out"
}

# emit FS ROUND METRIC VALUE: one measured number for report.py.
emit() {
	[ -z "$4" ] || printf 'val\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$cur_raw"
}
meta() { printf 'meta\t%s\t%s\n' "$1" "$2" >>"$cur_raw"; }

# fail FS ROUND TEXT: a failed run, told on stdout and in the report.
fail() {
	local fs=$1 r=$2 line
	shift 2
	any_fail=1
	while IFS= read -r line; do
		say "  FAIL $fs round $r${cl_flavour:+ ($cl_flavour)}: $line"
		printf 'fail\t%s\t%s\t%s\n' "$fs" "$r" "${cl_flavour:+$cl_flavour: }$line" >>"$cur_raw"
	done <<<"$*"
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# --- counters ----------------------------------------------------------------

# sample FS FILE [MNT]: the counters now, "name value" per line: FS's loop
# device, and `shoal stat` of MNT (default FS's mountpoint) if a shoal daemon
# of this run serves it.
sample() {
	local fs=$1 out=$2 m=${3:-${mnt[$1]}} f
	{
		if [ -n "${loopdev[$fs]:-}" ]; then
			read -r -a f <"/sys/block/${loopdev[$fs]#/dev/}/stat"
			echo "loop_rd_bytes $((f[2] * 512))"
			echo "loop_wr_ios ${f[4]}"
			echo "loop_wr_bytes $((f[6] * 512))"
			# Field 16 (index 15), "flush I/Os", exists since Linux 5.5.
			if [ ${#f[@]} -ge 17 ]; then echo "loop_flushes ${f[15]}"; fi
		fi
		if [ -n "${daemon_pid[$m]+set}" ] && is_mounted "$m"; then
			timeout 30 "$bin/shoal" stat "$m" 2>/dev/null |
				awk '$2 ~ /^[0-9]+$/ { print "shoal_" $1, $2 }'
		fi
	} >"$out"
}

# delta A B NAME: counter NAME in sample B minus sample A (empty if missing).
delta() {
	awk -v n="$3" 'FNR == NR { if ($1 == n) a = $2; next }
		$1 == n && a != "" { print $2 - a }' "$1" "$2"
}

# dv A B NAME: delta, or n/a when the counter is missing (for progress lines).
dv() {
	local v
	v=$(delta "$@")
	echo "${v:-n/a}"
}

# field FILE NAME: the value of NAME in a program's "name value" output.
field() { awk -v n="$2" '$1 == n { print $2; exit }' "$1"; }

# emit_delta FS ROUND METRIC A B NAME [DIVISOR]
emit_delta() {
	local v
	v=$(delta "$4" "$5" "$6")
	[ -n "$v" ] || return 0
	if [ -n "${7:-}" ]; then
		v=$(awk -v a="$v" -v b="$7" 'BEGIN { printf "%.6f", a / b }')
	fi
	emit "$1" "$2" "$3" "$v"
}

# emit_gl FS ROUND PREFIX A B: the lock counters of a step, as PREFIXgl_*.
emit_gl() {
	local m
	for m in gl_requests gl_callbacks gl_demotions gl_restarts gl_rtt_us; do
		emit_delta "$1" "$2" "$3$m" "$4" "$5" "shoal_$m"
	done
}

# --- filesystems ---------------------------------------------------------------

# shoal_mount FS MNT OPTIONS: shoal-mount FS's device at MNT, remember the daemon.
shoal_mount() {
	local fs=$1 m=$2 o=$work/make.out st=$work/status.out
	mkdir -p "$m"
	"$bin/shoal-mount" -o "$3" "${dev[$fs]}" "$m" >>"$o" 2>&1 || return 1
	"$bin/shoal" status "$m" >"$st" 2>&1 || true
	daemon_pid[$m]=$(field "$st" pid)
	daemon_log[$m]=$(field "$st" log)
}

# cl_opts FS NODE: the mount options of cluster variant FS as node NODE.
cl_opts() {
	local o="lock=shoal:unix:$cl_sock,node=$2"
	[ "$1" != shoal-cl-hold0 ] || o+=",hold=0"
	echo "$o"
}

# fs_make FS: fresh image, loop device, mkfs, (shoal-lockd,) mount.  In the
# pingpong workload a cluster variant is mounted twice, as node a and b.
# Sets fail_note on error.
fs_make() {
	local fs=$1 out=$work/make.out
	fs_teardown "$fs"
	: >"$out"
	mkdir -p "${mnt[$fs]}"
	if [ "$fs" = fuse-null ]; then
		"$bin/nullfs" "${mnt[fuse-null]}" 2>"$out" &
		nullfs_pid=$!
		local i
		for i in $(seq 100); do
			is_mounted "${mnt[fuse-null]}" && return 0
			sleep 0.05
		done
		fail_note="nullfs did not mount: $(tail -n 5 "$out")"
		return 1
	fi
	truncate -s "$img_size" "${img[$fs]}"
	dev[$fs]=${img[$fs]}
	if [ "$fs" = ext4 ] || [ "$shoal_on_file" = 0 ]; then
		if ! loopdev[$fs]=$(losetup --find --show --direct-io=on "${img[$fs]}" 2>"$out"); then
			fail_note="losetup ${img[$fs]}: $(cat "$out")"
			return 1
		fi
		dev[$fs]=${loopdev[$fs]}
	fi
	case $fs in
	ext4)
		# Default features (journal included).  The inode tables and the
		# journal are zeroed now, not by ext4lazyinit during the run.
		mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "${dev[ext4]}" >"$out" 2>&1 &&
			mount "${dev[ext4]}" "${mnt[ext4]}" >>"$out" 2>&1 || {
			fail_note="mkfs.ext4/mount ${dev[ext4]}: $(tail -n 5 "$out")"
			return 1
		}
		;;
	shoal)
		"$bin/mkfs.shoal" -f "${dev[shoal]}" >"$out" 2>&1 &&
			shoal_mount shoal "${mnt[shoal]}" lock=nolock || {
			fail_note="mkfs.shoal/shoal-mount ${dev[shoal]}: $(tail -n 5 "$out")"
			return 1
		}
		;;
	*)
		# The same mkfs as shoal (its default is 2 journals), so lock=
		# is the only difference; pingpong's two nodes need the 2,
		# mmread's four nodes 4.
		"$bin/mkfs.shoal" -f -j "$(cl_journals)" "${dev[$fs]}" >"$out" 2>&1 || {
			fail_note="mkfs.shoal ${dev[$fs]}: $(tail -n 5 "$out")"
			return 1
		}
		cl_lockd_start || return 1
		if [ "$cur_w" = pingpong ] || [ "$cur_w" = plock ]; then
			shoal_mount "$fs" "$pp_mnt_a" "$(cl_opts "$fs" a)" &&
				shoal_mount "$fs" "$pp_mnt_b" "$(cl_opts "$fs" b)"
		elif [ "$cur_w" = mmread ]; then
			mm_mount_all "$fs"
		elif [ "$cur_w" = cluster ]; then
			cl_mount_all "$fs"
		elif [ "$fs" = shoal-cl2 ]; then
			mkdir -p "$cl2_idle"
			shoal_mount "$fs" "${mnt[$fs]}" "$(cl_opts "$fs" bench)" &&
				shoal_mount "$fs" "$cl2_idle" "$(cl_opts "$fs" idle)"
		else
			shoal_mount "$fs" "${mnt[$fs]}" "$(cl_opts "$fs" bench)"
		fi || {
			fail_note="shoal-mount ${dev[$fs]}: $(tail -n 5 "$out")$(tail -n 5 "$cl_log" | sed 's/^/shoal-lockd: /')"
			return 1
		}
		;;
	esac
	sync
}

# fs_describe FS: how the filesystem was made and mounted, for the header.
fs_describe() {
	local fs=$1 l m
	if [ -n "${loopdev[$fs]:-}" ]; then
		l=${loopdev[$fs]#/dev/}
		meta "$fs device" "${loopdev[$fs]} on ${img[$fs]} ($img_size sparse), loop direct I/O $(cat "/sys/block/$l/loop/dio"), write cache '$(cat "/sys/block/$l/queue/write_cache")', FUA $(cat "/sys/block/$l/queue/fua")"
	elif [ "$fs" != fuse-null ]; then
		meta "$fs device" "${img[$fs]} ($img_size sparse image file, no loop device)"
	fi
	case $fs in
	fuse-null)
		meta "fuse-null" "bench/nullfs.c: a FUSE daemon that keeps names in memory and does nothing else, with shoal-mount's FUSE settings (low-level API, multithreaded loop, entry/attr timeouts 86400 s, keep_cache, noflush): the cost of the kernel's FUSE round trips alone, no device"
		;;
	ext4)
		local feat jsz
		feat=$(dumpe2fs -h "${dev[ext4]}" 2>/dev/null | sed -n 's/^Filesystem features: *//p')
		jsz=$(dumpe2fs -h "${dev[ext4]}" 2>/dev/null | sed -n 's/^Total journal size: *//p')
		if [[ " $feat " == *" has_journal "* ]]; then
			meta "ext4 journal" "YES (default mkfs.ext4 features; journal $jsz)"
		else
			meta "ext4 journal" "NO"
		fi
		meta "ext4 mkfs" "mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0; features: $feat"
		meta "ext4 mount" "$(findmnt -no OPTIONS -M "${mnt[ext4]}")"
		;;
	shoal)
		meta "shoal mkfs" "build/mkfs.shoal -f (defaults: 2 journals)"
		meta "shoal mount" "build/shoal-mount -o lock=nolock; $("$bin/shoal" status "${mnt[shoal]}" 2>/dev/null | sed -n 's/^options //p')"
		;;
	*)
		meta "$fs mkfs" "build/mkfs.shoal -f -j $(cl_journals) (as shoal$(case $cur_w in mmread) echo ", but 4 journals for 4 nodes" ;; cluster) echo ", but $cl_jmax journals for up to $cl_jmax nodes, whatever N" ;; esac))"
		meta "$fs lockd" "build/shoal-lockd -f --listen unix:WORK/cl-lockd.sock, started for each round before the mount, stopped (SIGTERM) after the unmount"
		if [ "$cur_w" = cluster ]; then
			meta "$fs mount" "${fs#shoal-cl-n} node(s) n0 ... at DIR/mnt-cl-0 ..., each build/shoal-mount -o $(cl_opts "$fs" n0 | sed "s|$work|WORK|") (node n0's; the others differ only in node=); $("$bin/shoal" status "$(cl_mnt 0)" 2>/dev/null | sed -n 's/^options //p' | sed "s|$work|WORK|")"
			return 0
		fi
		for m in $(printf '%s\n' "${!daemon_pid[@]}" | sort); do
			meta "$fs mount" "build/shoal-mount -o $(cl_opts "$fs" "$("$bin/shoal" status "$m" 2>/dev/null | sed -n 's/^node //p')" | sed "s|$work|WORK|"); $("$bin/shoal" status "$m" 2>/dev/null | sed -n 's/^options //p' | sed "s|$work|WORK|")"
		done
		;;
	esac
}

# shoal_health FS ROUND: fail unless every shoal daemon of this run (and the
# variant's shoal-lockd) is alive and every mount writable.
shoal_health() {
	local fs=$1 r=$2 st=$work/health.out m
	if is_cluster "$fs" && ! pid_alive "$cl_lockd_pid" shoal-lockd; then
		fail "$fs" "$r" "shoal-lockd (pid $cl_lockd_pid) has died: $(tail -n 10 "$cl_log")"
		return 1
	fi
	for m in "${!daemon_pid[@]}"; do
		if ! pid_alive "${daemon_pid[$m]}" shoal-mount; then
			fail "$fs" "$r" "shoal-mount daemon of $m (pid ${daemon_pid[$m]}) has died$(shoal_log_tail "$m")"
			return 1
		fi
		if ! timeout 30 "$bin/shoal" stat "$m" >"$st" 2>&1; then
			fail "$fs" "$r" "shoal stat $m failed: $(tail -n 3 "$st")$(shoal_log_tail "$m")"
			return 1
		fi
		if [ "$(field "$st" readonly)" = 1 ] || grep -q '^error ' "$st"; then
			fail "$fs" "$r" "$m went read-only: $(grep '^error ' "$st" || true)$(shoal_log_tail "$m")"
			return 1
		fi
	done
}

# shoal_log_tail MNT: what the daemon serving MNT logged, and what the kernel
# said about it, as extra lines.
shoal_log_tail() {
	local pid=${daemon_pid[$1]:-} log=${daemon_log[$1]:-}
	[ -n "$pid" ] || return 0
	if [ -n "$log" ] && grep -qF "[$pid]" "$log" 2>/dev/null; then
		printf '\nlast lines of %s from pid %s:\n' "$log" "$pid"
		grep -F "[$pid]" "$log" | tail -n 15 | sed 's/^/    /'
	fi
	if dmesg 2>/dev/null | grep -qF "[$pid]"; then
		printf '\nkernel log about pid %s:\n' "$pid"
		dmesg | grep -F "[$pid]" | tail -n 5 | sed 's/^/    /'
	fi
}

# runprog FS ROUND OUT CMD...: a workload program under the timeout.
runprog() {
	local fs=$1 r=$2 out=$3 rc=0
	shift 3
	# --foreground: a ^C reaches the program too (timeout would otherwise
	# put it in a process group of its own), so the run stops at once.
	timeout --foreground -k 10 "$prog_timeout" "$@" >"$out" 2>"$out.err" || rc=$?
	[ "$rc" = 0 ] && return 0
	# Killed by the ^C (SIGINT) or SIGTERM that also reached this shell:
	# stop here (the EXIT trap tears everything down).  The shell itself
	# would carry on, as the program exited instead of dying of the signal.
	[ "$rc" != 130 ] && [ "$rc" != 143 ] || exit "$rc"
	local why="exit status $rc"
	[ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after ${prog_timeout}s"
	fail "$fs" "$r" "$(basename "$1") ${*:2}: $why
$(tail -n 10 "$out.err")"
	! is_shoal "$fs" || shoal_health "$fs" "$r" || true
	return 1
}

# --- workloads -------------------------------------------------------------------
# wl_NAME FS ROUND: run the workload on the mounted FS, emit its metrics.
# Leaves the sample the "until unmounted" counters start from in $work/base.

wl_meta_describe() {
	meta workload "meta - $meta_files empty files created (open O_CREAT|O_EXCL + close) in one new directory, then each stat'ed, then each unlinked; then syncfs (bench/metabench.c)"
	meta "cache" "sync + drop_caches before the run"
	meta "target" "total time shoal/ext4 <= 3x; shoal-cl/shoal <= 1.1x (lock=shoal costs a single node at most 10%)"
}

wl_meta() {
	local fs=$1 r=$2 o=$work/meta.out
	drop_caches
	sample "$fs" "$work/base"
	runprog "$fs" "$r" "$o" "$bin/metabench" "${mnt[$fs]}" "$meta_files" || return 1
	sample "$fs" "$work/after"
	local m
	for m in create_s stat_s unlink_s total_s syncfs_s; do
		emit "$fs" "$r" "$m" "$(field "$o" "$m")"
	done
	emit_delta "$fs" "$r" dev_wr_bytes "$work/base" "$work/after" loop_wr_bytes
	emit_delta "$fs" "$r" dev_wr_ios "$work/base" "$work/after" loop_wr_ios
	emit_delta "$fs" "$r" dev_flushes "$work/base" "$work/after" loop_flushes
	for m in dev_write_bytes dev_flushes commits commit_blocks; do
		emit_delta "$fs" "$r" "shoal_$m" "$work/base" "$work/after" "shoal_$m"
	done
	emit_gl "$fs" "$r" shoal_ "$work/base" "$work/after"
	say "  round $r $fs: create $(field "$o" create_s)s stat $(field "$o" stat_s)s unlink $(field "$o" unlink_s)s total $(field "$o" total_s)s; device $(dv "$work/base" "$work/after" loop_wr_bytes) bytes written, $(dv "$work/base" "$work/after" loop_flushes) flushes"
}

wl_seq_describe() {
	meta workload "seq - $seq_mib MiB written sequentially in 1 MiB writes then fsync'ed, caches dropped, read back sequentially in 1 MiB reads (bench/seqio.c; every 4 KiB block's stamp is checked on read)"
	meta "cache" "sync + drop_caches before the write and again before the read"
	meta "target" "write and read MiB/s shoal/ext4 >= 0.7 each; shoal-cl/shoal >= 0.9 each"
}

wl_seq() {
	local fs=$1 r=$2 w=$work/seqw.out rd=$work/seqr.out f=${mnt[$1]}/seq.dat
	local app=$((seq_mib * 1048576))
	drop_caches
	sample "$fs" "$work/base"
	runprog "$fs" "$r" "$w" "$bin/seqio" write "$f" "$seq_mib" || return 1
	sample "$fs" "$work/s1"
	drop_caches
	sample "$fs" "$work/s2"
	runprog "$fs" "$r" "$rd" "$bin/seqio" read "$f" "$seq_mib" || return 1
	sample "$fs" "$work/s3"
	emit "$fs" "$r" w_mib_s "$(field "$w" mib_s)"
	emit "$fs" "$r" w_fsync_s "$(field "$w" fsync_s)"
	emit "$fs" "$r" r_mib_s "$(field "$rd" mib_s)"
	emit_delta "$fs" "$r" w_dev_bytes "$work/base" "$work/s1" loop_wr_bytes
	emit_delta "$fs" "$r" w_dev_per_app "$work/base" "$work/s1" loop_wr_bytes "$app"
	emit_delta "$fs" "$r" w_dev_flushes "$work/base" "$work/s1" loop_flushes
	emit_delta "$fs" "$r" r_dev_bytes "$work/s2" "$work/s3" loop_rd_bytes
	emit_delta "$fs" "$r" shoal_w_dev_write_bytes "$work/base" "$work/s1" shoal_dev_write_bytes
	emit_delta "$fs" "$r" shoal_w_dev_flushes "$work/base" "$work/s1" shoal_dev_flushes
	emit_delta "$fs" "$r" shoal_w_wb_written "$work/base" "$work/s1" shoal_wb_written
	emit_delta "$fs" "$r" shoal_r_dev_read_bytes "$work/s2" "$work/s3" shoal_dev_read_bytes
	emit_gl "$fs" "$r" shoal_w_ "$work/base" "$work/s1"
	emit_gl "$fs" "$r" shoal_r_ "$work/s2" "$work/s3"
	say "  round $r $fs: write $(field "$w" mib_s) MiB/s (fsync $(field "$w" fsync_s)s), read $(field "$rd" mib_s) MiB/s; device $(dv "$work/base" "$work/s1" loop_wr_bytes) bytes written, $(dv "$work/base" "$work/s1" loop_flushes) flushes, $(dv "$work/s2" "$work/s3" loop_rd_bytes) bytes read"
}

wl_fstest_describe() {
	meta workload "fstest - seeds/001: an 8 MiB file written and fsync'ed (not measured), then $fst_iters x (1 KiB pwrite at a random 1 KiB-aligned offset, fdatasync, fsync), seed $fst_seed, timed from after open to after close (bench/fstest.c; the file is verified afterwards)"
	meta "cache" "warm (the file was just written, as in the seed); sync before the loop; counters cover the loop only"
	meta "target" "bandwidth shoal/ext4 >= 1.0, shoal-cl2/ext4 >= 1.5; device bytes written per application byte shoal/ext4 <= 2x, shoal-cl2/ext4 <= 1x; flushes per iteration shoal-cl2 <= 1.1; bandwidth shoal-cl/shoal >= 0.9"
	meta "device floor" "after each run, bench/fstest.c floor: $fst_floor_iters x (one 1.5 KiB O_DIRECT write + fdatasync) on a scratch loop device (direct I/O, as the variants') over a sparse image in the same directory: what the device alone takes for the work shoal does per iteration (one fast-commit block, one flush), measured in the same round; the rest of shoal's latency is FUSE (three requests per iteration: compare fuse-null) and shoal itself"
}

# floor_probe FS ROUND: the device floor row (wl_fstest_describe).
floor_probe() {
	local o=$work/floor.out
	if [ -z "$floor_loop" ]; then
		truncate -s 64M "$floor_img" &&
			floor_loop=$(losetup --find --show --direct-io=on "$floor_img" 2>/dev/null) || {
			say "  round $2 $1: device floor not measured (losetup failed)"
			floor_loop=
			return 0
		}
	fi
	runprog "$1" "$2" "$o" "$bin/fstest" floor "$floor_loop" "$fst_floor_iters" || return 0
	emit "$1" "$2" floor_us "$(field "$o" floor_us)"
	emit "$1" "$2" floor_write_us "$(field "$o" floor_write_us)"
	emit "$1" "$2" floor_flush_us "$(field "$o" floor_flush_us)"
	emit "$1" "$2" above_floor_us "$(awk -v a="$(field "$work/fstest.out" lat_avg_us)" -v b="$(field "$o" floor_us)" 'BEGIN { printf "%.1f", a - b }')"
}

wl_fstest() {
	local fs=$1 r=$2 o=$work/fstest.out f=${mnt[$1]}/fstest.dat
	local app=$((fst_iters * 1024))
	runprog "$fs" "$r" "$o" "$bin/fstest" prep "$f" "$fst_kib" || return 1
	sync
	sample "$fs" "$work/base"
	runprog "$fs" "$r" "$o" "$bin/fstest" run "$f" "$fst_iters" "$fst_seed" || return 1
	sample "$fs" "$work/after"
	local m
	for m in kib_s lat_avg_us lat_p99_us; do
		emit "$fs" "$r" "$m" "$(field "$o" "$m")"
	done
	emit_delta "$fs" "$r" dev_per_app "$work/base" "$work/after" loop_wr_bytes "$app"
	emit_delta "$fs" "$r" flushes_per_iter "$work/base" "$work/after" loop_flushes "$fst_iters"
	emit_delta "$fs" "$r" wr_ios_per_iter "$work/base" "$work/after" loop_wr_ios "$fst_iters"
	emit_delta "$fs" "$r" shoal_dev_per_app "$work/base" "$work/after" shoal_dev_write_bytes "$app"
	emit_delta "$fs" "$r" shoal_flushes_per_iter "$work/base" "$work/after" shoal_dev_flushes "$fst_iters"
	emit_delta "$fs" "$r" shoal_commits_per_iter "$work/base" "$work/after" shoal_commits "$fst_iters"
	emit_delta "$fs" "$r" shoal_fsyncs "$work/base" "$work/after" shoal_fsyncs
	emit_delta "$fs" "$r" shoal_fsync_noop "$work/base" "$work/after" shoal_fsync_noop
	emit_delta "$fs" "$r" shoal_fast_commits "$work/base" "$work/after" shoal_fast_commits
	emit_delta "$fs" "$r" shoal_fc_visited_per_fc "$work/base" "$work/after" shoal_fc_visited "$fst_iters"
	emit_gl "$fs" "$r" shoal_ "$work/base" "$work/after"
	say "  round $r $fs: $(field "$o" kib_s) KiB/s, latency avg $(field "$o" lat_avg_us)us p99 $(field "$o" lat_p99_us)us; device $(dv "$work/base" "$work/after" loop_wr_bytes) bytes written, $(dv "$work/base" "$work/after" loop_flushes) flushes for $app application bytes"
	[ "$fs" = fuse-null ] || floor_probe "$fs" "$r"
}

wl_mmext_describe() {
	meta workload "mmext - seeds/003: a file grown to $mmx_mib MiB in 2 MiB hunks (ftruncate by 2 MiB, map the new hunk shared and writable, fill it, unmap), then fsync; then the same on a new file with one mapping of the whole file grown by mremap (bench/mmext.c; the files are read back and checked)"
	meta "cache" "warm; sync before each pass; counters cover each pass"
	meta "target" "unmap: last 64 MiB segment >= 0.9x the first (flat), throughput shoal-cl2/ext4 >= 0.9; mremap: throughput shoal-cl2/ext4 >= 0.5"
}

wl_mmext() {
	local fs=$1 r=$2 o=$work/mmext.out p m
	for p in unmap mremap; do
		sync
		sample "$fs" "$work/base"
		runprog "$fs" "$r" "$o" "$bin/mmext" "${mnt[$fs]}/mmext-$p.dat" "$mmx_mib" 2 "$p" || return 1
		sample "$fs" "$work/after"
		local x=${p:0:1}
		for m in mib_s first_mib_s last_mib_s flat fill_s fsync_s; do
			emit "$fs" "$r" "${x}_$m" "$(field "$o" "$m")"
		done
		emit_delta "$fs" "$r" "${x}_dev_per_app" "$work/base" "$work/after" loop_wr_bytes $((mmx_mib << 20))
		emit_delta "$fs" "$r" "${x}_wr_ios" "$work/base" "$work/after" loop_wr_ios
		emit_delta "$fs" "$r" "${x}_rd_bytes" "$work/base" "$work/after" loop_rd_bytes
		emit_delta "$fs" "$r" "shoal_${x}_dev_read_bytes" "$work/base" "$work/after" shoal_dev_read_bytes
		emit_delta "$fs" "$r" "shoal_${x}_queue_read_bytes" "$work/base" "$work/after" shoal_dev_queue_read_bytes
		emit_delta "$fs" "$r" "shoal_${x}_dev_per_app" "$work/base" "$work/after" shoal_dev_write_bytes $((mmx_mib << 20))
		emit_delta "$fs" "$r" "shoal_${x}_dev_writes" "$work/base" "$work/after" shoal_dev_writes
		emit_delta "$fs" "$r" "shoal_${x}_commits" "$work/base" "$work/after" shoal_commits
		emit_delta "$fs" "$r" "shoal_${x}_dev_flushes" "$work/base" "$work/after" shoal_dev_flushes
		emit_delta "$fs" "$r" "shoal_${x}_wb_visited" "$work/base" "$work/after" shoal_wb_visited
		emit_delta "$fs" "$r" "shoal_${x}_page_writes" "$work/base" "$work/after" shoal_page_writes
		emit_delta "$fs" "$r" "shoal_${x}_wb_kicks" "$work/base" "$work/after" shoal_wb_kicks
		say "  round $r $fs $p: $(field "$o" mib_s) MiB/s (segments: first $(field "$o" first_mib_s), last $(field "$o" last_mib_s) MiB/s, flat $(field "$o" flat); fsync $(field "$o" fsync_s)s); device $(dv "$work/base" "$work/after" loop_wr_bytes) bytes in $(dv "$work/base" "$work/after" loop_wr_ios) writes"
		rm -f "${mnt[$fs]}/mmext-$p.dat"
	done
}

wl_wbcost_describe() {
	meta workload "wbcost - a $wbc_mib MiB file written and fsync'ed (not measured), then one 4 KiB pwrite in its middle and an fsync (bench/fstest.c one): what writing back one dirty block of a big file costs"
	meta "target" "shoal: the fsync writes the one data block and at most one journal commit (device writes <= 2: the block and one log write; commits + fast_commits <= 1)"
}

wl_wbcost() {
	local fs=$1 r=$2 o=$work/wbcost.out f=${mnt[$1]}/wbcost.dat
	runprog "$fs" "$r" "$o" "$bin/fstest" prep "$f" $((wbc_mib * 1024)) || return 1
	sync
	sample "$fs" "$work/base"
	runprog "$fs" "$r" "$o" "$bin/fstest" one "$f" $((wbc_mib << 19)) || return 1
	sample "$fs" "$work/after"
	emit_delta "$fs" "$r" wr_bytes "$work/base" "$work/after" loop_wr_bytes
	emit_delta "$fs" "$r" wr_ios "$work/base" "$work/after" loop_wr_ios
	emit_delta "$fs" "$r" flushes "$work/base" "$work/after" loop_flushes
	local m
	for m in dev_writes dev_write_bytes dev_flushes commits fast_commits wb_visited wb_written; do
		emit_delta "$fs" "$r" "shoal_$m" "$work/base" "$work/after" "shoal_$m"
	done
	say "  round $r $fs: one 4 KiB block of a $wbc_mib MiB file fsync'ed: device $(dv "$work/base" "$work/after" loop_wr_bytes) bytes in $(dv "$work/base" "$work/after" loop_wr_ios) writes, $(dv "$work/base" "$work/after" loop_flushes) flushes; shoal: $(dv "$work/base" "$work/after" shoal_dev_writes) writes, $(dv "$work/base" "$work/after" shoal_commits) commits, $(dv "$work/base" "$work/after" shoal_fast_commits) fast commits"
}

wl_cache_describe() {
	meta workload "cache - a $cache_mib MiB file written and fsync'ed, all caches dropped, read once (warm-up: the glocks are acquired and stay cached); pass 2: page cache dropped (sync; echo 1 > drop_caches; the kernel keeps its dentries and inodes) and the file read again; pass 3: all caches dropped (sync; echo 3, so the kernel also forgets its inodes) and read again (bench/seqio.c, 1 MiB reads, every block checked)"
	meta "check" "shoal-cl: lock requests (gl_requests) of pass 2 == 0 (cached glocks cost nothing), valid only if pass 2 reached shoal (device bytes read by it >= the file), else n/a; pass 3 and shoal (lock=nolock, whose module is asked too) are information"
}

wl_cache() {
	local fs=$1 r=$2 f=${mnt[$1]}/cache.dat o=$work/cache.out p
	local -a rate
	runprog "$fs" "$r" "$o" "$bin/seqio" write "$f" "$cache_mib" || return 1
	drop_caches
	for p in 1 2 3; do
		case $p in
		2) sync; echo 1 >/proc/sys/vm/drop_caches ;;
		3) drop_caches ;;
		esac
		sample "$fs" "$work/c${p}a"
		runprog "$fs" "$r" "$o" "$bin/seqio" read "$f" "$cache_mib" || return 1
		sample "$fs" "$work/c${p}b"
		rate[p]=$(field "$o" mib_s)
		emit "$fs" "$r" "p${p}_mib_s" "${rate[p]}"
		emit_delta "$fs" "$r" "p${p}_dev_rd_bytes" "$work/c${p}a" "$work/c${p}b" loop_rd_bytes
		emit_delta "$fs" "$r" "shoal_p${p}_dev_read_bytes" "$work/c${p}a" "$work/c${p}b" shoal_dev_read_bytes
		emit_gl "$fs" "$r" "shoal_p${p}_" "$work/c${p}a" "$work/c${p}b"
	done
	emit "$fs" "$r" file_bytes $((cache_mib * 1048576))
	cp "$work/c1a" "$work/base"
	say "  round $r $fs: lock requests pass 1 (warm-up) $(dv "$work/c1a" "$work/c1b" shoal_gl_requests), pass 2 (echo 1) $(dv "$work/c2a" "$work/c2b" shoal_gl_requests), pass 3 (echo 3) $(dv "$work/c3a" "$work/c3b" shoal_gl_requests); device bytes read by pass 2 $(dv "$work/c2a" "$work/c2b" loop_rd_bytes); read MiB/s ${rate[1]} / ${rate[2]} / ${rate[3]}"
}

wl_pingpong_describe() {
	meta workload "pingpong - two nodes (node a and node b: two shoal-mount processes on one loop device, one shoal-lockd) append to one file strictly in turn: append i goes through node a for even i, node b for odd i, and is open(O_WRONLY|O_APPEND) + one 4 KiB write + fsync + close; $pp_appends appends timed as a whole (bench/pingpong.c); then the file is read back through each node and must hold exactly the $pp_appends blocks in order"
	meta "variants" "shoal-cl = the default adaptive minimum glock hold time (hold=100 ms max); shoal-cl-hold0 = the same with hold=0; ext4 = reference, not a target: one process appending to one ext4 file with the same loop (a new fd for every append, alternately as 'a' and as 'b')"
	meta "counters" "shoal stat of both nodes over the loop, summed (demotions also per node); loop device of the image"
}

# sum2 A B A2 B2 NAME: delta of NAME on node a (A..B) plus node b (A2..B2).
sum2() {
	local x y
	x=$(delta "$1" "$2" "$5")
	y=$(delta "$3" "$4" "$5")
	[ -n "$x" ] && [ -n "$y" ] && echo $((x + y))
}

wl_pingpong() {
	local fs=$1 r=$2 o=$work/pp.out a b n=$pp_appends
	if [ "$fs" = ext4 ]; then
		a=${mnt[ext4]}/pp.dat
		b=$a
	else
		a=$pp_mnt_a/pp.dat
		b=$pp_mnt_b/pp.dat
	fi
	sample "$fs" "$work/base" "$pp_mnt_a"
	sample "$fs" "$work/base_b" "$pp_mnt_b"
	runprog "$fs" "$r" "$o" "$bin/pingpong" run "$a" "$b" "$n" || return 1
	sample "$fs" "$work/after" "$pp_mnt_a"
	sample "$fs" "$work/after_b" "$pp_mnt_b"
	runprog "$fs" "$r" "$work/ppv.out" "$bin/pingpong" verify "$a" "$n" || return 1
	if [ "$b" != "$a" ]; then
		runprog "$fs" "$r" "$work/ppv.out" "$bin/pingpong" verify "$b" "$n" || return 1
	fi
	local m v
	for m in ops_s seconds lat_avg_us lat_p50_us lat_p99_us lat_max_us lat_a_p50_us lat_b_p50_us; do
		emit "$fs" "$r" "$m" "$(field "$o" "$m")"
	done
	emit_delta "$fs" "$r" flushes_per_append "$work/base" "$work/after" loop_flushes "$n"
	emit_delta "$fs" "$r" wr_bytes_per_append "$work/base" "$work/after" loop_wr_bytes "$n"
	local gl="; verified" s
	if [ "$fs" != ext4 ]; then
		for m in gl_demotions gl_callbacks gl_requests gl_restarts gl_rtt_us dev_flushes commits; do
			v=$(sum2 "$work/base" "$work/after" "$work/base_b" "$work/after_b" "shoal_$m")
			[ -n "$v" ] || continue
			emit "$fs" "$r" "shoal_$m" "$v"
			emit "$fs" "$r" "shoal_${m}_per_append" "$(awk -v a="$v" -v b="$n" 'BEGIN { printf "%.4f", a / b }')"
		done
		emit_delta "$fs" "$r" shoal_a_gl_demotions "$work/base" "$work/after" shoal_gl_demotions
		emit_delta "$fs" "$r" shoal_b_gl_demotions "$work/base_b" "$work/after_b" shoal_gl_demotions
		s=$(sum2 "$work/base" "$work/after" "$work/base_b" "$work/after_b" shoal_gl_demotions)
		gl="; demotions $s (a $(dv "$work/base" "$work/after" shoal_gl_demotions), b $(dv "$work/base_b" "$work/after_b" shoal_gl_demotions)), callbacks $(sum2 "$work/base" "$work/after" "$work/base_b" "$work/after_b" shoal_gl_callbacks), lock requests $(sum2 "$work/base" "$work/after" "$work/base_b" "$work/after_b" shoal_gl_requests); verified through both nodes"
	fi
	say "  round $r $fs: $n appends in $(field "$o" seconds)s = $(field "$o" ops_s)/s, latency p50 $(field "$o" lat_p50_us)us p99 $(field "$o" lat_p99_us)us$gl"
}

wl_plock_describe() {
	meta workload "plock - the lock ping-pong of cluster filesystems (bench/plockpp.c, ctdb's ping_pong): two processes take turns holding fcntl write locks on consecutive 8-byte slots of one file (3 slots; each holds slot i and waits with F_SETLKW for slot i+1, then unlocks slot i), for $pl_secs s: (a) locks only; (b) under each lock read the slot's counter, check it is one more than this process last wrote there (the other's increment seen; the run fails otherwise) and write it + 1.  Handoffs = locks taken by both per second.  Uncontended: $pl_iters x (F_SETLK write lock of byte 0 + unlock) by one process on one node, average per pair"
	meta "variants" "shoal-cl = the two processes on two nodes (node a and node b: two shoal-mount processes on one loop device, one shoal-lockd), uncontended on node a; shoal-cl-hold0 = the same with hold=0 (no minimum glock hold time: (b) moves the inode's glock between the nodes at every turn); ext4 = reference: two processes on one ext4 mount; fuse-null = the FUSE floor for the uncontended row: $pl_iters x fsync of an unchanged file on bench/nullfs.c, which answers at once (one FUSE round trip each)"
}

wl_plock() {
	local fs=$1 r=$2 o=$work/pl.out a b rw
	case $fs in
	fuse-null)
		runprog "$fs" "$r" "$o" "$bin/plockpp" rt "${mnt[fuse-null]}/pl.dat" "$pl_iters" || return 1
		emit "$fs" "$r" uncontended_us "$(field "$o" uncontended_us)"
		emit "$fs" "$r" uncontended_best_us "$(field "$o" uncontended_best_us)"
		say "  round $r $fs: one FUSE round trip (fsync) $(field "$o" uncontended_us)us (best batch of 100: $(field "$o" uncontended_best_us)us)"
		return 0
		;;
	ext4) a=${mnt[ext4]}/pl.dat b=$a ;;
	*) a=$pp_mnt_a/pl.dat b=$pp_mnt_b/pl.dat ;;
	esac
	runprog "$fs" "$r" "$o" "$bin/plockpp" lat "$a" "$pl_iters" || return 1
	emit "$fs" "$r" uncontended_us "$(field "$o" uncontended_us)"
	emit "$fs" "$r" uncontended_best_us "$(field "$o" uncontended_best_us)"
	local line="uncontended lock+unlock $(field "$o" uncontended_us)us (best batch of 100: $(field "$o" uncontended_best_us)us)"
	for rw in 0 1; do
		runprog "$fs" "$r" "$o" "$bin/plockpp" pp "$a" "$b" "$pl_secs" "$rw" || return 1
		emit "$fs" "$r" "pp${rw}_handoffs_s" "$(field "$o" handoffs_s)"
		emit "$fs" "$r" "pp${rw}_lost" "$(field "$o" lost)"
		line+="; ping-pong $([ $rw = 0 ] && echo "(a) locks" || echo "(b) read+increment") $(field "$o" handoffs_s)/s, lost $(field "$o" lost)"
	done
	say "  round $r $fs: $line"
}

wl_mmread_describe() {
	meta workload "mmread - seeds/000 (d_iogen mmread): a $mm_mib MiB file of pseudo-random bytes written through one mount; then N = 1, 2, 4 at once, $mm_iters iterations in total: mode iter = open, mmap the whole file read-only, copy a random 10 KiB range, munmap, close; mode once = one open+mmap per process, then $mm_iters random 10 KiB copies in total (bench/mmread.c; every copy spot-checked against the pattern)"
	meta "variants" "ext4 = N processes on one ext4 mount; fuse-null (if listed) = N processes on one bench/nullfs.c mount, which keeps the file in memory: the kernel's FUSE alone (its OPEN round trip, its page cache of 4 KiB pages), no device, no locks; shoal-cl = N nodes, each its own shoal-mount (nodes a, b, c, d of one image, one shoal-lockd, lock=shoal), one process per node; after the file is written every node is unmounted and mounted again, so every glock starts UN (seed step 2)"
	meta "cache" "$mm_cache: $([ "$mm_cache" = warm ] && echo "sync + drop_caches once after the file is written, then before each run the file read through every mount the run uses (not timed; only the first run on a mount reads the device)" || echo "sync + drop_caches before each run")"
	meta "counters" "shoal-cl: the file's inode glock on all four nodes (shoal glstats), summed: lock requests for EX (ex), callbacks (cb), all lock requests (req), per run"
	meta "target" "iter: wall time shoal-cl/ext4 <= 2x at N = 4; once: <= 1.2x; shoal-cl: 0 EX requests and 0 callbacks for the file in every run"
}

# mm_mnts FS: the mountpoints of FS's nodes, in order (ext4, fuse-null: the one mount).
mm_mnts() {
	if [ "$1" = ext4 ] || [ "$1" = fuse-null ]; then
		echo "${mnt[$1]}"
	else
		echo "$pp_mnt_a $pp_mnt_b $mm_mnt_c $mm_mnt_d"
	fi
}

mm_mount_all() {
	local fs=$1 m node
	for node in a b c d; do
		case $node in a) m=$pp_mnt_a ;; b) m=$pp_mnt_b ;; c) m=$mm_mnt_c ;; d) m=$mm_mnt_d ;; esac
		shoal_mount "$fs" "$m" "$(cl_opts "$fs" "$node")" || return 1
	done
}

# mm_glfile INO OUT: the file's glock counters on every node, summed.
mm_glfile() {
	local m ex=0 cb=0 req=0 g
	for m in $pp_mnt_a $pp_mnt_b $mm_mnt_c $mm_mnt_d; do
		g=$(timeout 30 "$bin/shoal" glstats "$m" "gltype == 2 && glnum == $1" 2>/dev/null | grep '^G: ' || true)
		ex=$((ex + $(sed -n 's/.* ex:\([0-9]*\).*/\1/p' <<<"$g" | grep . || echo 0)))
		cb=$((cb + $(sed -n 's/.* cb:\([0-9]*\).*/\1/p' <<<"$g" | grep . || echo 0)))
		req=$((req + $(sed -n 's/.* req:\([0-9]*\).*/\1/p' <<<"$g" | grep . || echo 0)))
	done
	printf 'file_ex %s\nfile_cb %s\nfile_req %s\n' "$ex" "$cb" "$req" >"$2"
}

wl_mmread() {
	local fs=$1 r=$2 o=$work/mm.out mode n i ino m p cl=0 line=""
	local -a mnts paths
	read -r -a mnts <<<"$(mm_mnts "$fs")"
	! is_cluster "$fs" || cl=1
	runprog "$fs" "$r" "$o" "$bin/mmread" prep "${mnts[0]}/mm.dat" "$mm_mib" || return 1
	if is_cluster "$fs"; then
		# seed step 2: every glock starts UN (the writer gives its EX back)
		for m in $mm_mnt_d $mm_mnt_c $pp_mnt_b $pp_mnt_a; do shoal_stop "$m"; done
		mm_mount_all "$fs" || {
			fail "$fs" "$r" "mounting the nodes again: $(tail -n 5 "$work/make.out")"
			return 1
		}
	fi
	ino=$(stat -c %i "${mnts[0]}/mm.dat")
	[ "$mm_cache" = cold ] || drop_caches # once: the runs start from one state
	sample "$fs" "$work/base" "${mnts[0]}"
	for mode in iter once; do
		for n in 1 2 4; do
			paths=()
			for ((i = 0; i < n; i++)); do
				paths+=("${mnts[$((cl ? i : 0))]}/mm.dat") # ext4, fuse-null: one path, N times
			done
			if [ "$mm_cache" = cold ]; then
				drop_caches
			else
				# a no-op for a mount the earlier runs warmed already
				for p in $(printf '%s\n' "${paths[@]}" | sort -u); do cat "$p" >/dev/null; done
			fi
			sample "$fs" "$work/mm0" "${mnts[0]}"
			! is_cluster "$fs" || mm_glfile "$ino" "$work/gl0"
			runprog "$fs" "$r" "$o" "$bin/mmread" run "$mode" "$mm_iters" "$r" "${paths[@]}" || return 1
			sample "$fs" "$work/mm1" "${mnts[0]}"
			emit "$fs" "$r" "${mode}_n${n}_wall_s" "$(field "$o" wall_s)"
			emit "$fs" "$r" "${mode}_n${n}_ops_s" "$(field "$o" ops_s)"
			emit "$fs" "$r" "${mode}_n${n}_faults" "$(field "$o" faults)"
			emit_delta "$fs" "$r" "${mode}_n${n}_rd_bytes" "$work/mm0" "$work/mm1" loop_rd_bytes
			line+=" $mode/N=$n $(field "$o" wall_s)s"
			if is_cluster "$fs"; then
				mm_glfile "$ino" "$work/gl1"
				local x
				for x in file_ex file_cb file_req; do
					emit_delta "$fs" "$r" "shoal_${mode}_n${n}_$x" "$work/gl0" "$work/gl1" "$x"
				done
				line+=" (ex $(dv "$work/gl0" "$work/gl1" file_ex) cb $(dv "$work/gl0" "$work/gl1" file_cb))"
			fi
		done
	done
	say "  round $r $fs:$line"
}

# --- cluster (begin) -------------------------------------------------------------
# Issue 22's scaling measurement (bench/README.md "cluster"): variant
# shoal-cl-nN is N nodes n0 ... of one image (mkfs -j of the largest N in
# CLUSTER_NODES, whatever N), one shoal-lockd, mounted at DIR/mnt-cl-0 ...;
# ext4 the one-node reference.  Each round runs both flavours, private then
# mixed, each on a cluster made afresh (run_workload's pass loop).
#  (1) the counters of a run are sampled right before the release of the
#      workers and right after the last one reported, before the check, so
#      the check's reads (through the first and the last node) are not in
#      them; lockd's RSS is read at the same moments;
#  (2) a run fails on a worker's error, a worker stuck for CLUSTER_GRACE
#      seconds past the end, a check that finds a file or record wrong, or a
#      node's daemon or shoal-lockd that died (shoal_health, run_one).

# cl_journals: the journals of a cluster variant's image in this workload.
cl_journals() {
	case $cur_w in
	mmread) echo 4 ;;
	cluster) echo "$cl_jmax" ;;
	*) echo 2 ;;
	esac
}

# cl_mount_all FS: FS's N nodes, n0 first.
cl_mount_all() {
	local fs=$1 i
	for ((i = 0; i < ${fs#shoal-cl-n}; i++)); do
		shoal_mount "$fs" "$(cl_mnt "$i")" "$(cl_opts "$fs" "n$i")" || return 1
	done
}

# cl_rss_kib: shoal-lockd's resident set now (VmRSS, KiB).
cl_rss_kib() {
	awk '$1 == "VmRSS:" { print $2 }' "/proc/$cl_lockd_pid/status" 2>/dev/null
}

# cl_glstats OUT MNT...: every glock of every node, one line each:
# "NODE TYPE/NUM req cb dem tryfail rtt_us".
cl_glstats() {
	local out=$1 i=0 m
	shift
	: >"$out"
	for m in "$@"; do
		timeout 60 "$bin/shoal" glstats "$m" 2>/dev/null | awk -v node="$i" '$1 == "G:" {
			for (k = 2; k <= NF; k++) { split($k, kv, ":"); f[kv[1]] = kv[2] }
			sub(/^n:/, "", $2); sub(/us$/, "", f["rtt"])
			print node, $2, f["req"], f["cb"], f["dem"], f["tryfail"], f["rtt"]
		}' >>"$out" || true
		i=$((i + 1))
	done
}

# cl_glsum BEFORE AFTER: the glock counters of the run, summed over the
# nodes: "type T req cb dem tryfail rtt_us" per glock type, and "glock
# TYPE/NUM req cb dem tryfail rtt_us nodes_with_cb" per glock, the most
# callbacks first.
cl_glsum() {
	awk 'FNR == NR { for (k = 3; k <= 7; k++) b[$1 " " $2, k] = $k; next }
		{
			split($2, tn, "/")
			for (k = 3; k <= 7; k++) {
				d = $k - b[$1 " " $2, k]
				t[tn[1], k] += d
				g[$2, k] += d
			}
			seen_t[tn[1]] = 1
			seen_g[$2] = 1
			if ($4 - b[$1 " " $2, 4] > 0) ncb[$2]++
		}
		END {
			for (x in seen_t)
				print "type", x, t[x, 3], t[x, 4], t[x, 5], t[x, 6], t[x, 7]
			for (x in seen_g)
				print "glock", x, g[x, 3], g[x, 4], g[x, 5], g[x, 6], g[x, 7], ncb[x] + 0
		}' "$1" "$2" | sort -k1,1r -k4,4nr
}

# cl_glname TYPE/HEX: what a glock of the run is, for the top list.
declare -A cl_inames=() # inode number (hex) -> its name in the workload
cl_glname() {
	local t=${1%%/*} num=${1#*/}
	case $t in
	1) case $((16#$num)) in 1) echo "mount lock" ;; 2) echo "rename lock" ;; *) echo "non-disk $num" ;; esac ;;
	2 | 5)
		local what=inode
		[ "$t" = 2 ] || what=iopen
		if [ -n "${cl_inames[$num]:-}" ]; then echo "$what ${cl_inames[$num]}"; else echo "$what of a file"; fi
		;;
	3) echo "rgrp at block $((16#$num))" ;;
	9) echo "journal $((16#$num))" ;;
	*) echo "type $t" ;;
	esac
}

wl_cluster_describe() {
	meta workload "cluster - issue 22's scaling measurement: N nodes (N = ${cl_ns[*]}) of one image, one shoal-lockd, one process per node (bench/clusterbench.c), all released at once, each for $cl_secs s. private: create own-I/fK (O_EXCL, 0.5-4 KiB written, fsync, close), rename it to rK, unlink the oldest rJ once 16 are there, in the node's own directory, in turn; mixed: create, a 64 KiB O_APPEND write to big0/big1 (alternately), rename, shared/nI-K created with 128 bytes, unlink, a 64-byte O_APPEND record to log, in turn (all nodes share big0, big1, shared/ and log). One op = one of these steps"
	meta "check" "after each run (not timed, not in the counters), through node 0 and node N-1: each own directory holds exactly what its node left, shared/ every file every node made, big0/big1 each node's 64 KiB chunks intact and in order, log each node's records intact, in order, every acknowledged one exactly once; a failed op, a node $cl_grace s late, a wrong byte or a dead daemon or lockd fails the run"
	meta "variants" "ext4 = the reference: N = 1, the same program on one ext4 mount (journaled, default features); shoal-cl-nN = N shoal-mount nodes (lock=shoal, default options) of one image made with $cl_jmax journals; each flavour of each round on a cluster formatted and mounted afresh"
	meta "figures" "ops/s = all nodes' ops / wall time (release to the last node's report); per node = its ops / its own time; slowest/fastest = the slowest node's ops/s over the fastest's; lockd RSS = VmRSS of shoal-lockd right after the run (and right before it); counters: shoal stat of every node, summed, and shoal glstats of every node, summed per glock type, over the run"
	meta "target" "issue 22: private total at 8 nodes >= 1.5x one node's (shoal-cl-n8/shoal-cl-n1); mixed total at 8 nodes >= 0.5x one node's; slowest node >= 0.5x the fastest at 8 nodes, both flavours (medians of the rounds)"
}

wl_cluster() {
	local fs=$1 r=$2 fl=$cl_flavour o=$work/cl.out n=1 i m rss0 rss1 x v
	local -a mnts
	if [ "$fs" = ext4 ]; then
		mnts=("${mnt[ext4]}")
	else
		n=${fs#shoal-cl-n}
		for ((i = 0; i < n; i++)); do mnts+=("$(cl_mnt "$i")"); done
	fi
	runprog "$fs" "$r" "$o" "$bin/clusterbench" prep "${mnts[0]}" || return 1
	sync
	sample "$fs" "$work/base" "${mnts[0]}"
	for ((i = 0; i < n; i++)); do sample "$fs" "$work/clb$i" "${mnts[i]}"; done
	is_cluster "$fs" && cl_glstats "$work/glb" "${mnts[@]}"
	rss0=$(is_cluster "$fs" && cl_rss_kib || true)
	runprog "$fs" "$r" "$o" "$bin/clusterbench" run "$fl" "$cl_secs" "$cl_grace" "$work/cl.state" "${mnts[@]}" || return 1
	rss1=$(is_cluster "$fs" && cl_rss_kib || true)
	sample "$fs" "$work/after" "${mnts[0]}"
	for ((i = 0; i < n; i++)); do sample "$fs" "$work/cla$i" "${mnts[i]}"; done
	is_cluster "$fs" && cl_glstats "$work/gla" "${mnts[@]}"
	runprog "$fs" "$r" "$work/clcheck.out" "$bin/clusterbench" check "$fl" "$work/cl.state" "${mnts[0]}" "${mnts[-1]}" || return 1

	local ops
	ops=$(field "$o" ops)
	for x in ops_s node_min_ops_s node_max_ops_s node_ratio; do
		emit "$fs" "$r" "${fl}_$x" "$(field "$o" "$x")"
	done
	emit "$fs" "$r" "${fl}_max_ms" "$(awk '$1 ~ /_max_ms$/ && $2 > m { m = $2 } END { print m + 0 }' "$o")"
	emit_delta "$fs" "$r" "${fl}_flushes_per_op" "$work/base" "$work/after" loop_flushes "$ops"
	emit_delta "$fs" "$r" "${fl}_wr_bytes_per_op" "$work/base" "$work/after" loop_wr_bytes "$ops"
	local line
	line="$(field "$o" ops_s) ops/s in all ($ops ops in $(field "$o" wall_s)s), per node$(
		for ((i = 0; i < n; i++)); do printf ' %s' "$(field "$o" "node${i}_ops_s")"; done
	) (slowest/fastest $(field "$o" node_ratio)); slowest op$(
		awk '$1 ~ /_max_ms$/ { sub(/_max_ms$/, "", $1); printf " %s %sms", $1, $2 }' "$o"
	); checked $(field "$work/clcheck.out" checked_files) files, $(field "$work/clcheck.out" checked_chunks) chunks, $(field "$work/clcheck.out" checked_records) records"
	if is_cluster "$fs"; then
		emit "$fs" "$r" "shoal_${fl}_lockd_rss0_kib" "$rss0"
		emit "$fs" "$r" "shoal_${fl}_lockd_rss_kib" "$rss1"
		local -A sum=()
		for m in gl_requests gl_callbacks gl_demotions gl_restarts gl_rtt_us commits dev_flushes; do
			v=0
			for ((i = 0; i < n; i++)); do
				x=$(delta "$work/clb$i" "$work/cla$i" "shoal_$m")
				v=$((v + ${x:-0}))
			done
			sum[$m]=$v
			emit "$fs" "$r" "shoal_${fl}_${m}_per_op" "$(awk -v a="$v" -v b="$ops" 'BEGIN { printf "%.4f", a / b }')"
		done
		line+="; lock requests $(awk -v a="${sum[gl_requests]}" -v b="$ops" 'BEGIN { printf "%.2f", a / b }')/op, callbacks ${sum[gl_callbacks]}, lock wait $((sum[gl_rtt_us] / 1000)) ms in all; lockd RSS $((rss0 / 1024)) -> $((rss1 / 1024)) MiB"
		# which glocks moved: per type, and the ones most called back
		cl_inames=()
		cl_inames[$(printf '%x' "$(stat -c %i "${mnts[0]}")")]="/ (root)"
		for x in shared big0 big1 log; do
			[ -e "${mnts[0]}/$x" ] && cl_inames[$(printf '%x' "$(stat -c %i "${mnts[0]}/$x")")]=$x
		done
		for ((i = 0; i < n; i++)); do
			cl_inames[$(printf '%x' "$(stat -c %i "${mnts[0]}/own-$i")")]="own-$i/"
		done
		cl_glsum "$work/glb" "$work/gla" >"$work/glsum"
		local g req cb dem tf rtt nodes top=""
		# per glock type that had any request or callback
		while read -r _ x req cb _ tf _; do
			[ "$req" != 0 ] || [ "$cb" != 0 ] || continue
			emit "$fs" "$r" "shoal_${fl}_t${x}_req_per_op" "$(awk -v a="$req" -v b="$ops" 'BEGIN { printf "%.4f", a / b }')"
			emit "$fs" "$r" "shoal_${fl}_t${x}_cb_per_op" "$(awk -v a="$cb" -v b="$ops" 'BEGIN { printf "%.4f", a / b }')"
			emit "$fs" "$r" "shoal_${fl}_t${x}_tryfail_per_op" "$(awk -v a="$tf" -v b="$ops" 'BEGIN { printf "%.4f", a / b }')"
		done < <(grep '^type ' "$work/glsum")
		while read -r _ g req cb dem tf rtt nodes; do
			[ "$cb" -gt 0 ] || break
			top+=$'\n'"      $g $(cl_glname "$g"): callbacks $cb (on $nodes of $n nodes), demotions $dem, requests $req, refused tries $tf, lock wait $((rtt / 1000)) ms"
		done < <(grep '^glock ' "$work/glsum" | head -n 6)
		[ -z "$top" ] || line+=$'\n'"    glocks most called back (all nodes):$top"
		top=""
		while read -r _ g req cb dem tf rtt nodes; do
			[ "$rtt" -gt 0 ] || break
			top+=$'\n'"      $g $(cl_glname "$g"): lock wait $((rtt / 1000)) ms, requests $req, callbacks $cb, refused tries $tf"
		done < <(grep '^glock ' "$work/glsum" | sort -k7,7nr | head -n 3)
		[ -z "$top" ] || line+=$'\n'"    glocks waited for longest (all nodes):$top"
	fi
	say "  round $r $fs $fl: $line"
}
# --- cluster (end) ---------------------------------------------------------------

# --- driver --------------------------------------------------------------------------

# run_one WORKLOAD FS ROUND: make, run, unmount, count, destroy.
run_one() {
	local w=$1 fs=$2 r=$3 ok=0 m
	fail_note=
	if ! fs_make "$fs"; then
		fail "$fs" "$r" "setup failed: $fail_note"
		fs_teardown "$fs"
		return 1
	fi
	[ "$r" != 1 ] || [ "$cl_flavour" = mixed ] || fs_describe "$fs"
	"wl_$w" "$fs" "$r" || ok=1
	if [ "$ok" = 0 ] && is_shoal "$fs"; then
		shoal_health "$fs" "$r" || ok=1
	fi
	if [ "$ok" = 0 ]; then
		# Everything the workload caused, written back by the unmount.
		local out=$work/umount.out
		if [ "$fs" = fuse-null ]; then
			fusermount3 -u "${mnt[fuse-null]}" >"$out" 2>&1 || {
				fail fuse-null "$r" "fusermount3 -u: $(tail -n 5 "$out")"
				ok=1
			}
		elif is_shoal "$fs"; then
			# Node b first; a cluster's shoal-lockd stays up until after.
			for m in $(printf '%s\n' "${!daemon_pid[@]}" | sort -r); do
				timeout 300 "$bin/shoal" umount "$m" >"$out" 2>&1 || {
					fail "$fs" "$r" "shoal umount $m: $(tail -n 5 "$out")$(shoal_log_tail "$m")"
					ok=1
					break
				}
			done
		else
			umount "${mnt[ext4]}" >"$out" 2>&1 || {
				fail ext4 "$r" "umount: $(tail -n 5 "$out")"
				ok=1
			}
		fi
		if [ "$ok" = 0 ]; then
			sync
			sample "$fs" "$work/unmounted"
			case $w in
			fstest) emit_delta "$fs" "$r" umount_dev_per_app "$work/base" "$work/unmounted" loop_wr_bytes $((fst_iters * 1024)) ;;
			meta | seq | mmext) emit_delta "$fs" "$r" umount_wr_bytes "$work/base" "$work/unmounted" loop_wr_bytes ;;
			esac
			if is_shoal "$fs" && [ -x "$bin/fsck.shoal" ]; then
				local frc=0
				timeout 300 "$bin/fsck.shoal" -n "${dev[$fs]}" >"$out" 2>&1 || frc=$?
				say "  round $r $fs${cl_flavour:+ $cl_flavour}: fsck.shoal -n after unmount: exit $frc$([ "$frc" = 0 ] || echo " ($(tail -n 3 "$out" | tr '\n' ' '))")"
			fi
		fi
	fi
	fs_teardown "$fs"
	return "$ok"
}

run_workload() {
	local w=$1 r fs i n pass
	local -a fses=() passes=("")
	cur_w=$w
	case $w in
	cache)
		for fs in "${sel_fses[@]}"; do ! is_shoal "$fs" || fses+=("$fs"); done
		;;
	meta | fstest) fses=("${sel_fses[@]}") ;;
	pingpong)
		for fs in "${sel_fses[@]}"; do
			case $fs in
			ext4) fses+=(ext4) ;;
			shoal-cl) fses+=(shoal-cl shoal-cl-hold0) ;;
			esac
		done
		;;
	plock)
		for fs in "${sel_fses[@]}"; do
			case $fs in
			ext4 | fuse-null) fses+=("$fs") ;;
			shoal-cl) fses+=(shoal-cl shoal-cl-hold0) ;;
			esac
		done
		;;
	cluster) # N nodes of one image per variant; ext4 the one-node reference
		for fs in "${sel_fses[@]}"; do
			case $fs in
			ext4) fses+=(ext4) ;;
			shoal-cl) for n in "${cl_ns[@]}"; do fses+=("shoal-cl-n$n"); done ;;
			esac
		done
		;;
	mmread) # N nodes, each its own mount: lock=shoal only; fuse-null for the FUSE floor
		for fs in "${sel_fses[@]}"; do
			case $fs in shoal | shoal-cl2) ;; *) fses+=("$fs") ;; esac
		done
		;;
	# shoal-cl2 (a second, idle node) is for the issue-5 workloads; it runs
	# wherever it is asked for
	*) for fs in "${sel_fses[@]}"; do [ "$fs" = fuse-null ] || fses+=("$fs"); done ;;
	esac
	if [ ${#fses[@]} = 0 ]; then
		echo "== $w: skipped, none of its variants is selected (--fs $fs_list) =="
		echo
		return 0
	fi
	cur_raw=$work/$w.raw
	cur_out=$results/$stamp-$w.txt
	: >"$cur_raw"
	: >"$cur_out"
	printf 'rounds\t%s\n' "$rounds" >>"$cur_raw"
	printf 'fses\t%s\n' "${fses[*]}" >>"$cur_raw"
	"wl_${w}_describe"
	meta "rounds" "$rounds ($([ "$quick" = 1 ] && echo "quick sizes" || echo "full sizes")); variants ${fses[*]}, one at a time, their order rotating by one per round; each round formats and mounts afresh"
	meta "images" "$dir on $(findmnt -no SOURCE,FSTYPE -T "$dir" | head -n1 | tr -s ' ')"
	meta "host" "$(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
	meta "shoal" "$shoal_rev"
	meta "counters" "device = /sys/block/loopN/stat of the loop device under each fs: sectors written (field 7) x 512, write requests (field 5), flush requests (field 16); FUA is not counted separately (the loop device has no FUA, the block layer turns FUA writes into flushes); shoal stat = the mount's own counters"
	local load
	load=$(cut -d' ' -f1 /proc/loadavg)
	if awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l >= n / 2) }'; then
		meta "WARNING" "host busy at start (load average $load on $(nproc) CPUs): other work shares the CPUs and the disk, timings are unreliable; counters are not affected"
	fi
	say "== $w ($stamp, $rounds rounds$([ "$quick" = 1 ] && echo ", quick sizes")) =="
	[ "$w" != cluster ] || passes=(private mixed) # cl_flavour: a fresh cluster each
	for r in $(seq "$rounds"); do
		for pass in "${passes[@]}"; do
			cl_flavour=$pass
			for i in $(seq 0 $((${#fses[@]} - 1))); do
				fs=${fses[$(((r - 1 + i) % ${#fses[@]}))]}
				run_one "$w" "$fs" "$r" || true
			done
		done
	done
	cl_flavour=
	meta "load" "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
	say ""
	python3 "$bench/report.py" "$cur_raw" | tee -a "$cur_out"
	say ""
	{
		echo "raw results (report.py input):"
		sed 's/^/  /' "$cur_raw"
	} >>"$cur_out"
	echo "(saved in ${cur_out#$shoal_top/})"
	echo
	cur_out=
}

# --- lockd (begin) -------------------------------------------------------------
# The lock manager's section (bench/README.md "lockd"): shoal-lockd -f on a
# Unix socket in the temp dir, one lockbench client, against a bare
# Unix-socket echo with the same message sizes (64-byte request, 52-byte
# reply), in the same run; at least 3 rounds, the order of the variants
# rotating per round.  No filesystem, image or loop device is involved.
#  (1) one shoal-lockd per round, started here and stopped (SIGTERM) at the
#      end of the round, or by cleanup after a failure or ^C;
#  (2) every variant of a round talks to that round's lockd or echo only.

lockd_pid=
lockd_spid=              # the round's second shoal-lockd, with --secret-file
lockd_rounds=$((rounds < 3 ? 3 : rounds))
if [ "$quick" = 1 ]; then lockd_iters=20000; else lockd_iters=100000; fi

lockd_teardown() {
	local p
	for p in $lockd_pid $lockd_spid; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	lockd_pid=
	lockd_spid=
}

# lockd_bench ROUND VARIANT: one lockbench run; its numbers as VARIANT.
lockd_bench() {
	local r=$1 v=$2 o=$work/lockbench.out sock=$work/lockd.sock ssock=$work/lockd-s.sock
	local -a cmd
	case $v in
	echo) cmd=("$bin/lockbench" echo "$lockd_iters") ;;
	echo_poll) cmd=("$bin/lockbench" echo-poll "$lockd_iters") ;;
	lockd) cmd=("$bin/lockbench" lock "unix:$sock" "$lockd_iters") ;;
	lockd_nospin) cmd=(env SHOAL_LKC_SPIN_US=0 "$bin/lockbench" lock "unix:$sock" "$lockd_iters") ;;
	lockd_secret) cmd=(env SHOAL_LOCKBENCH_SECRET="$work/lockd.secret" "$bin/lockbench" lock "unix:$ssock" "$lockd_iters") ;;
	contend) cmd=("$bin/lockbench" contend "unix:$sock" $((lockd_iters / 10))) ;;
	contend_secret) cmd=(env SHOAL_LOCKBENCH_SECRET="$work/lockd.secret" "$bin/lockbench" contend "unix:$ssock" $((lockd_iters / 10))) ;;
	esac
	if ! timeout -k 10 "$prog_timeout" "${cmd[@]}" >"$o" 2>"$o.err"; then
		fail "$v" "$r" "lockbench ${cmd[*]##*/}: $(tail -n 5 "$o.err")"
		return 1
	fi
	local m
	for m in lat_p50_us lat_p99_us lat_avg_us ops_s handoffs_s; do
		emit "$v" "$r" "$m" "$(field "$o" "$m")"
	done
}

run_lockd() {
	local r v sock=$work/lockd.sock ssock=$work/lockd-s.sock
	cur_raw=$work/lockd.raw
	cur_out=$results/$stamp-lockd.txt
	: >"$cur_raw"
	: >"$cur_out"
	printf 'rounds\t%s\n' "$lockd_rounds" >>"$cur_raw"
	meta workload "lockd - one node (bench/lockbench.c) takes EX on one resource and releases it, $lockd_iters times per round after a warm-up; one lock+unlock = lkc_lock (a round trip to shoal-lockd over a Unix socket) + lkc_unlock (sent, not answered)"
	meta "baseline" "echo = a bare Unix-socket echo with the same message sizes (64-byte write, 52-byte blocking read, forked echo server), same run; echo_poll = the same with the client polling recv(MSG_DONTWAIT) for the reply"
	meta "variants" "lockd = the client as shipped (polls for its reply up to 50 us, then sleeps); lockd_nospin = SHOAL_LKC_SPIN_US=0 (always sleeps on a condition variable); lockd_secret = lockd against a second shoal-lockd started with --secret-file, the client with the same secret: every frame after JOIN sealed (ChaCha20-Poly1305); contend = two nodes alternating EX on one resource through BASTs (handoffs/s); contend_secret = the same with the secret"
	meta "target" "lock+unlock median latency lockd/echo <= 1.5x; lockd_secret/lockd <= 1.2x"
	meta "rounds" "$lockd_rounds; one shoal-lockd per round; the order of the variants rotates per round"
	meta "host" "$(uname -r), $(nproc) CPUs; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
	meta "shoal" "$shoal_rev"
	say "== lockd ($stamp, $lockd_rounds rounds, $lockd_iters iterations) =="
	if ! cmake --build "$build" -j"$(nproc)" --target shoal-lockd lockbench >"$work/lockd-build.out" 2>&1; then
		fail lockd 1 "build of shoal-lockd/lockbench failed: $(tail -n 5 "$work/lockd-build.out")"
	else
		cp "$build/shoal-lockd" "$build/lockbench" "$bin/"
		(umask 077 && echo "lockbench secret $stamp" >"$work/lockd.secret")
		local variants=(echo echo_poll lockd lockd_nospin lockd_secret)
		for r in $(seq "$lockd_rounds"); do
			rm -f "$sock" "$ssock"
			"$bin/shoal-lockd" -f --listen "unix:$sock" 2>"$work/lockd.log" &
			lockd_pid=$!
			"$bin/shoal-lockd" -f --listen "unix:$ssock" --secret-file "$work/lockd.secret" \
				2>"$work/lockd-s.log" &
			lockd_spid=$!
			for _ in $(seq 100); do [ -S "$sock" ] && [ -S "$ssock" ] && break; sleep 0.05; done
			if [ ! -S "$sock" ] || [ ! -S "$ssock" ]; then
				fail lockd "$r" "shoal-lockd did not start: $(tail -n 5 "$work/lockd.log" "$work/lockd-s.log")"
				lockd_teardown
				continue
			fi
			local k=$(((r - 1) % ${#variants[@]})) i
			for i in $(seq 0 $((${#variants[@]} - 1))); do
				v=${variants[$(((k + i) % ${#variants[@]}))]}
				lockd_bench "$r" "$v" || true
			done
			lockd_bench "$r" contend || true
			lockd_bench "$r" contend_secret || true
			lockd_teardown
			say "  round $r: $(for v in "${variants[@]}"; do
				printf '%s p50 %sus  ' "$v" "$(awk -v f=lat_p50_us -v v="$v" -v r="$r" -F'\t' '$1 == "val" && $2 == v && $3 == r && $4 == f { print $5 }' "$cur_raw")"
			done)"
		done
	fi
	meta "load" "load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
	say ""
	python3 "$bench/report.py" "$cur_raw" | tee -a "$cur_out"
	say ""
	{
		echo "raw results (report.py input):"
		sed 's/^/  /' "$cur_raw"
	} >>"$cur_out"
	echo "(saved in ${cur_out#$shoal_top/})"
	echo
	cur_out=
}
# --- lockd (end) ---------------------------------------------------------------

mkdir -p "$dir" "$results"
if [ "$(findmnt -no FSTYPE -T "$dir" | head -n1)" = tmpfs ]; then
	echo "bench/run.sh: $dir is on tmpfs, not a disk; use --dir" >&2
	exit 2
fi
for w in "${workloads[@]}"; do
	if [ "$w" = lockd ]; then
		run_lockd
	else
		run_workload "$w"
	fi
done
if [ "$any_fail" = 1 ]; then
	echo "bench/run.sh: some runs FAILED (see FAIL lines above)" >&2
	exit 1
fi
