#!/usr/bin/env bash
# bench/run.sh - runs the issue #2 workloads on shoal and on ext4, on image
# files in one directory of the same host disk, in the same run, several
# rounds, and prints per-round values, medians, ratios shoal/ext4, the
# targets (PASS/MISS, information only) and the device counters that explain
# the numbers.  bench/README.md says what each workload does and how each
# counter is measured.
#
#   bench/run.sh [--rounds N] [--quick] [--dir DIR] [--shoal-on-file] [WORKLOAD...]
#
# WORKLOAD is meta, seq, fstest or lockd (default: all four; lockd is the
# lock manager's round trips against a bare Unix-socket echo, see the
# "lockd" section below).  Results go to stdout
# and to bench/results/DATE-WORKLOAD.txt.  Exit status: 0 when every run
# completed (whatever the timings), 1 when a run failed (mount, workload
# program, a shoal daemon that died or went read-only), 2 on bad usage.
#
# Invariants:
#  (1) every round of every workload formats and mounts both filesystems
#      afresh (4 GiB sparse image, losetup with direct I/O, mkfs), runs one
#      filesystem at a time, and unmounts and deletes it before the next;
#      ext4 goes first in odd rounds, shoal in even rounds;
#  (2) device counters are sampled from /sys/block/loopN/stat of the loop
#      device under each filesystem, before and after the measured step,
#      never across a format or a mount;
#  (3) everything this script set up (mounts, shoal daemons, loop devices,
#      images, temp dir) is torn down on exit, also after a failure or ^C.
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$bench/../scripts/deps.sh" # shoal_top, shoal_install_deps

usage() {
	cat <<EOF
usage: bench/run.sh [--rounds N] [--quick] [--dir DIR] [--shoal-on-file] [WORKLOAD...]

Runs each WORKLOAD (meta, seq, fstest; default all) on ext4 and on shoal,
N rounds (default 3; 1 with --quick), and prints medians and ratios.
WORKLOAD lockd (also run by default) times shoal-lockd lock+unlock round
trips against a bare Unix-socket echo, at least 3 rounds.
  --quick          smaller sizes, for a smoke run under a minute
  --dir DIR        where the images and mountpoints go (default
                   \$SHOAL_BENCH_DIR or /var/tmp/shoal-bench); must be on a disk
  --shoal-on-file  mount shoal on its image file instead of a loop device
                   (then only shoal's own counters are available for it)
Environment: SHOAL_BUILD (build dir, default build/), SHOAL_BENCH_TIMEOUT
(seconds one workload program may take, default 1800).
EOF
}

rounds=
quick=0
shoal_on_file=0
dir=${SHOAL_BENCH_DIR:-/var/tmp/shoal-bench}
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
	--shoal-on-file) shoal_on_file=1; shift ;;
	-h | --help) usage; exit 0 ;;
	meta | seq | fstest | lockd) workloads+=("$1"); shift ;;
	*) echo "bench/run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
done
[ ${#workloads[@]} -gt 0 ] || workloads=(meta seq fstest lockd)

if [ "$quick" = 1 ]; then
	rounds=${rounds:-1}
	meta_files=10000
	seq_mib=128
	fst_iters=1024
else
	rounds=${rounds:-3}
	meta_files=100000
	seq_mib=1024
	fst_iters=8192
fi
fst_kib=8192 # the 8 MiB file of seeds/001
fst_seed=1
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
if ! cmake --build "$build" -j"$(nproc)" --target mkfs.shoal shoal-mount shoal-cli >/dev/null; then
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
cp "$build/mkfs.shoal" "$build/shoal-mount" "$build/shoal" "$bin/"
if [ -x "$build/fsck.shoal" ]; then cp "$build/fsck.shoal" "$bin/"; fi
shoal_rev="$(git -C "$shoal_top" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
	git -C "$shoal_top" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes'), built $(
	date -r "$build/shoal-mount" '+%Y-%m-%d %H:%M:%S')$build_note"
for p in metabench seqio fstest; do
	cc -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$bin/$p" "$bench/$p.c"
done

# --- state and teardown -----------------------------------------------------

declare -A mnt=([ext4]=$dir/mnt-ext4 [shoal]=$dir/mnt-shoal)
declare -A img=([ext4]=$dir/ext4.img [shoal]=$dir/shoal.img)
declare -A loopdev=([ext4]= [shoal]=)
declare -A dev=([ext4]= [shoal]=) # what the filesystem is mounted from
shoal_pid=
shoal_log=
any_fail=0
cur_raw=   # raw results of the workload being run (report.py input)
cur_out=   # its results file
fail_note= # why the last step failed

is_mounted() { findmnt -rn -M "$1" >/dev/null 2>&1; }

fs_teardown() {
	local fs=$1
	if is_mounted "${mnt[$fs]}"; then
		if [ "$fs" = shoal ]; then
			timeout 120 "$bin/shoal" umount "${mnt[$fs]}" >/dev/null 2>&1 ||
				umount -l "${mnt[$fs]}" 2>/dev/null || true
		else
			umount "${mnt[$fs]}" 2>/dev/null || umount -l "${mnt[$fs]}" 2>/dev/null || true
		fi
	fi
	if [ "$fs" = shoal ] && [ -n "$shoal_pid" ]; then
		local i
		for i in $(seq 50); do
			shoal_alive || break
			sleep 0.2
		done
		! shoal_alive || kill -9 "$shoal_pid" 2>/dev/null || true
		shoal_pid=
	fi
	if [ -n "${loopdev[$fs]}" ]; then
		losetup -d "${loopdev[$fs]}" 2>/dev/null || true
		loopdev[$fs]=
	fi
	rm -f "${img[$fs]}"
}

cleanup() {
	lockd_teardown
	fs_teardown shoal
	fs_teardown ext4
	rmdir "${mnt[ext4]}" "${mnt[shoal]}" "$dir" 2>/dev/null || true
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
		say "  FAIL $fs round $r: $line"
		printf 'fail\t%s\t%s\t%s\n' "$fs" "$r" "$line" >>"$cur_raw"
	done <<<"$*"
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# --- counters ----------------------------------------------------------------

# sample FS FILE: the counters now, "name value" per line.
sample() {
	local fs=$1 out=$2 f
	{
		if [ -n "${loopdev[$fs]}" ]; then
			read -r -a f <"/sys/block/${loopdev[$fs]#/dev/}/stat"
			echo "loop_rd_bytes $((f[2] * 512))"
			echo "loop_wr_ios ${f[4]}"
			echo "loop_wr_bytes $((f[6] * 512))"
			# Field 16 (index 15), "flush I/Os", exists since Linux 5.5.
			if [ ${#f[@]} -ge 17 ]; then echo "loop_flushes ${f[15]}"; fi
		fi
		if [ "$fs" = shoal ] && is_mounted "${mnt[shoal]}"; then
			timeout 30 "$bin/shoal" stat "${mnt[shoal]}" 2>/dev/null |
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

# --- filesystems ---------------------------------------------------------------

# fs_make FS: fresh image, loop device, mkfs, mount.  Sets fail_note on error.
fs_make() {
	local fs=$1 out=$work/make.out
	fs_teardown "$fs"
	mkdir -p "${mnt[$fs]}"
	truncate -s "$img_size" "${img[$fs]}"
	dev[$fs]=${img[$fs]}
	if [ "$fs" = ext4 ] || [ "$shoal_on_file" = 0 ]; then
		if ! loopdev[$fs]=$(losetup --find --show --direct-io=on "${img[$fs]}" 2>"$out"); then
			fail_note="losetup ${img[$fs]}: $(cat "$out")"
			return 1
		fi
		dev[$fs]=${loopdev[$fs]}
	fi
	if [ "$fs" = ext4 ]; then
		# Default features (journal included).  The inode tables and the
		# journal are zeroed now, not by ext4lazyinit during the run.
		mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "${dev[ext4]}" >"$out" 2>&1 &&
			mount "${dev[ext4]}" "${mnt[ext4]}" >>"$out" 2>&1 || {
			fail_note="mkfs.ext4/mount ${dev[ext4]}: $(tail -n 5 "$out")"
			return 1
		}
	else
		"$bin/mkfs.shoal" -f "${dev[shoal]}" >"$out" 2>&1 &&
			"$bin/shoal-mount" -o lock=nolock "${dev[shoal]}" "${mnt[shoal]}" >>"$out" 2>&1 || {
			fail_note="mkfs.shoal/shoal-mount ${dev[shoal]}: $(tail -n 5 "$out")"
			return 1
		}
		"$bin/shoal" status "${mnt[shoal]}" >"$out" 2>&1 || true
		shoal_pid=$(field "$out" pid)
		shoal_log=$(field "$out" log)
	fi
	sync
}

# fs_describe FS: how the filesystem was made and mounted, for the header.
fs_describe() {
	local fs=$1 l
	if [ -n "${loopdev[$fs]}" ]; then
		l=${loopdev[$fs]#/dev/}
		meta "$fs device" "${loopdev[$fs]} on ${img[$fs]} ($img_size sparse), loop direct I/O $(cat "/sys/block/$l/loop/dio"), write cache '$(cat "/sys/block/$l/queue/write_cache")', FUA $(cat "/sys/block/$l/queue/fua")"
	else
		meta "$fs device" "${img[$fs]} ($img_size sparse image file, no loop device)"
	fi
	if [ "$fs" = ext4 ]; then
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
	else
		meta "shoal mkfs" "build/mkfs.shoal -f (defaults)"
		meta "shoal mount" "build/shoal-mount -o lock=nolock; $("$bin/shoal" status "${mnt[shoal]}" 2>/dev/null | sed -n 's/^options //p')"
	fi
}

# shoal_alive: the shoal-mount daemon this round started still runs.
shoal_alive() {
	[ -n "$shoal_pid" ] && [ "$(cat "/proc/$shoal_pid/comm" 2>/dev/null)" = shoal-mount ] &&
		[ "$(awk '{ print $3 }' "/proc/$shoal_pid/stat" 2>/dev/null)" != Z ]
}

# shoal_health ROUND: fail unless the shoal daemon is alive and writable.
shoal_health() {
	local r=$1 st=$work/health.out
	if ! shoal_alive; then
		fail shoal "$r" "shoal-mount daemon (pid $shoal_pid) has died$(shoal_log_tail)"
		return 1
	fi
	if ! timeout 30 "$bin/shoal" stat "${mnt[shoal]}" >"$st" 2>&1; then
		fail shoal "$r" "shoal stat failed: $(tail -n 3 "$st")$(shoal_log_tail)"
		return 1
	fi
	if [ "$(field "$st" readonly)" = 1 ] || grep -q '^error ' "$st"; then
		fail shoal "$r" "shoal went read-only: $(grep '^error ' "$st" || true)$(shoal_log_tail)"
		return 1
	fi
}

# shoal_log_tail: what the daemon of this round logged, and what the kernel
# said about it, as extra lines.
shoal_log_tail() {
	[ -n "$shoal_pid" ] || return 0
	if [ -n "$shoal_log" ] && grep -qF "[$shoal_pid]" "$shoal_log" 2>/dev/null; then
		printf '\nlast lines of %s from pid %s:\n' "$shoal_log" "$shoal_pid"
		grep -F "[$shoal_pid]" "$shoal_log" | tail -n 15 | sed 's/^/    /'
	fi
	if dmesg 2>/dev/null | grep -qF "[$shoal_pid]"; then
		printf '\nkernel log about pid %s:\n' "$shoal_pid"
		dmesg | grep -F "[$shoal_pid]" | tail -n 5 | sed 's/^/    /'
	fi
}

# runprog FS ROUND OUT CMD...: a workload program under the timeout.
runprog() {
	local fs=$1 r=$2 out=$3 rc=0
	shift 3
	timeout -k 10 "$prog_timeout" "$@" >"$out" 2>"$out.err" || rc=$?
	[ "$rc" = 0 ] && return 0
	local why="exit status $rc"
	[ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after ${prog_timeout}s"
	fail "$fs" "$r" "$(basename "$1") ${*:2}: $why
$(tail -n 10 "$out.err")"
	[ "$fs" != shoal ] || shoal_health "$r" || true
	return 1
}

# --- workloads -------------------------------------------------------------------
# wl_NAME FS ROUND: run the workload on the mounted FS, emit its metrics.
# Leaves the sample the "until unmounted" counters start from in $work/base.

wl_meta_describe() {
	meta workload "meta - $meta_files empty files created (open O_CREAT|O_EXCL + close) in one new directory, then each stat'ed, then each unlinked; then syncfs (bench/metabench.c)"
	meta "cache" "sync + drop_caches before the run"
	meta "target" "total time shoal/ext4 <= 3x"
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
	say "  round $r $fs: create $(field "$o" create_s)s stat $(field "$o" stat_s)s unlink $(field "$o" unlink_s)s total $(field "$o" total_s)s; device $(dv "$work/base" "$work/after" loop_wr_bytes) bytes written, $(dv "$work/base" "$work/after" loop_flushes) flushes"
}

wl_seq_describe() {
	meta workload "seq - $seq_mib MiB written sequentially in 1 MiB writes then fsync'ed, caches dropped, read back sequentially in 1 MiB reads (bench/seqio.c; every 4 KiB block's stamp is checked on read)"
	meta "cache" "sync + drop_caches before the write and again before the read"
	meta "target" "write and read MiB/s shoal/ext4 >= 0.7 each"
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
	say "  round $r $fs: write $(field "$w" mib_s) MiB/s (fsync $(field "$w" fsync_s)s), read $(field "$rd" mib_s) MiB/s; device $(dv "$work/base" "$work/s1" loop_wr_bytes) bytes written, $(dv "$work/base" "$work/s1" loop_flushes) flushes, $(dv "$work/s2" "$work/s3" loop_rd_bytes) bytes read"
}

wl_fstest_describe() {
	meta workload "fstest - seeds/001: an 8 MiB file written and fsync'ed (not measured), then $fst_iters x (1 KiB pwrite at a random 1 KiB-aligned offset, fdatasync, fsync), seed $fst_seed, timed from after open to after close (bench/fstest.c; the file is verified afterwards)"
	meta "cache" "warm (the file was just written, as in the seed); sync before the loop; counters cover the loop only"
	meta "target" "bandwidth shoal/ext4 >= 1.0; device bytes written per application byte shoal/ext4 <= 2x"
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
	say "  round $r $fs: $(field "$o" kib_s) KiB/s, latency avg $(field "$o" lat_avg_us)us p99 $(field "$o" lat_p99_us)us; device $(dv "$work/base" "$work/after" loop_wr_bytes) bytes written, $(dv "$work/base" "$work/after" loop_flushes) flushes for $app application bytes"
}

# --- driver --------------------------------------------------------------------------

# run_one WORKLOAD FS ROUND: make, run, unmount, count, destroy.
run_one() {
	local w=$1 fs=$2 r=$3 ok=0
	fail_note=
	if ! fs_make "$fs"; then
		fail "$fs" "$r" "setup failed: $fail_note"
		fs_teardown "$fs"
		return 1
	fi
	[ "$r" != 1 ] || fs_describe "$fs"
	"wl_$w" "$fs" "$r" || ok=1
	if [ "$ok" = 0 ] && [ "$fs" = shoal ]; then
		shoal_health "$r" || ok=1
	fi
	if [ "$ok" = 0 ]; then
		# Everything the workload caused, written back by the unmount.
		local out=$work/umount.out
		if [ "$fs" = shoal ]; then
			timeout 300 "$bin/shoal" umount "${mnt[shoal]}" >"$out" 2>&1 || {
				fail shoal "$r" "shoal umount: $(tail -n 5 "$out")$(shoal_log_tail)"
				ok=1
			}
		else
			umount "${mnt[ext4]}" >"$out" 2>&1 || {
				fail ext4 "$r" "umount: $(tail -n 5 "$out")"
				ok=1
			}
		fi
		if [ "$ok" = 0 ]; then
			sync
			sample "$fs" "$work/unmounted"
			if [ "$w" = fstest ]; then
				emit_delta "$fs" "$r" umount_dev_per_app "$work/base" "$work/unmounted" loop_wr_bytes $((fst_iters * 1024))
			else
				emit_delta "$fs" "$r" umount_wr_bytes "$work/base" "$work/unmounted" loop_wr_bytes
			fi
			if [ "$fs" = shoal ] && [ -x "$bin/fsck.shoal" ]; then
				local frc=0
				timeout 300 "$bin/fsck.shoal" -n "${dev[shoal]}" >"$out" 2>&1 || frc=$?
				say "  round $r shoal: fsck.shoal -n after unmount: exit $frc$([ "$frc" = 0 ] || echo " ($(tail -n 3 "$out" | tr '\n' ' '))")"
			fi
		fi
	fi
	fs_teardown "$fs"
	return "$ok"
}

run_workload() {
	local w=$1 r fs
	cur_raw=$work/$w.raw
	cur_out=$results/$stamp-$w.txt
	: >"$cur_raw"
	: >"$cur_out"
	printf 'rounds\t%s\n' "$rounds" >>"$cur_raw"
	"wl_${w}_describe"
	meta "rounds" "$rounds ($([ "$quick" = 1 ] && echo "quick sizes" || echo "full sizes")); one filesystem at a time, ext4 first in odd rounds, shoal first in even rounds; each round formats and mounts afresh"
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
	for r in $(seq "$rounds"); do
		local order=(ext4 shoal)
		[ $((r % 2)) = 1 ] || order=(shoal ext4)
		for fs in "${order[@]}"; do
			run_one "$w" "$fs" "$r" || true
		done
	done
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
lockd_rounds=$((rounds < 3 ? 3 : rounds))
if [ "$quick" = 1 ]; then lockd_iters=20000; else lockd_iters=100000; fi

lockd_teardown() {
	if [ -n "$lockd_pid" ]; then
		kill "$lockd_pid" 2>/dev/null || true
		wait "$lockd_pid" 2>/dev/null || true
		lockd_pid=
	fi
}

# lockd_bench ROUND VARIANT: one lockbench run; its numbers as VARIANT.
lockd_bench() {
	local r=$1 v=$2 o=$work/lockbench.out sock=$work/lockd.sock
	local -a cmd
	case $v in
	echo) cmd=("$bin/lockbench" echo "$lockd_iters") ;;
	echo_poll) cmd=("$bin/lockbench" echo-poll "$lockd_iters") ;;
	lockd) cmd=("$bin/lockbench" lock "unix:$sock" "$lockd_iters") ;;
	lockd_nospin) cmd=(env SHOAL_LKC_SPIN_US=0 "$bin/lockbench" lock "unix:$sock" "$lockd_iters") ;;
	contend) cmd=("$bin/lockbench" contend "unix:$sock" $((lockd_iters / 10))) ;;
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
	local r v sock=$work/lockd.sock
	cur_raw=$work/lockd.raw
	cur_out=$results/$stamp-lockd.txt
	: >"$cur_raw"
	: >"$cur_out"
	printf 'rounds\t%s\n' "$lockd_rounds" >>"$cur_raw"
	meta workload "lockd - one node (bench/lockbench.c) takes EX on one resource and releases it, $lockd_iters times per round after a warm-up; one lock+unlock = lkc_lock (a round trip to shoal-lockd over a Unix socket) + lkc_unlock (sent, not answered)"
	meta "baseline" "echo = a bare Unix-socket echo with the same message sizes (64-byte write, 52-byte blocking read, forked echo server), same run; echo_poll = the same with the client polling recv(MSG_DONTWAIT) for the reply"
	meta "variants" "lockd = the client as shipped (polls for its reply up to 50 us, then sleeps); lockd_nospin = SHOAL_LKC_SPIN_US=0 (always sleeps on a condition variable); contend = two nodes alternating EX on one resource through BASTs (handoffs/s)"
	meta "target" "lock+unlock median latency lockd/echo <= 1.5x"
	meta "rounds" "$lockd_rounds; one shoal-lockd per round; the order of the variants rotates per round"
	meta "host" "$(uname -r), $(nproc) CPUs; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
	meta "shoal" "$shoal_rev"
	say "== lockd ($stamp, $lockd_rounds rounds, $lockd_iters iterations) =="
	if ! cmake --build "$build" -j"$(nproc)" --target shoal-lockd lockbench >"$work/lockd-build.out" 2>&1; then
		fail lockd 1 "build of shoal-lockd/lockbench failed: $(tail -n 5 "$work/lockd-build.out")"
	else
		cp "$build/shoal-lockd" "$build/lockbench" "$bin/"
		local variants=(echo echo_poll lockd lockd_nospin)
		for r in $(seq "$lockd_rounds"); do
			rm -f "$sock"
			"$bin/shoal-lockd" -f --listen "unix:$sock" 2>"$work/lockd.log" &
			lockd_pid=$!
			for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
			if [ ! -S "$sock" ]; then
				fail lockd "$r" "shoal-lockd did not start: $(tail -n 5 "$work/lockd.log")"
				lockd_teardown
				continue
			fi
			local k=$(((r - 1) % ${#variants[@]})) i
			for i in $(seq 0 $((${#variants[@]} - 1))); do
				v=${variants[$(((k + i) % ${#variants[@]}))]}
				lockd_bench "$r" "$v" || true
			done
			lockd_bench "$r" contend || true
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
