#!/usr/bin/env bash
# t_mount.sh - mounting and unmounting: refusals with a one-line reason
# (not shoal, missing device, bad options, already mounted), read-only mounts
# (EROFS), clean unmount (umount and fusermount3 -u) leaving fsck.shoal -n
# clean, mkfs.shoal refusing to overwrite a filesystem without -f, and the
# counters of `shoal stat`.
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_mount.sh tests shoal's own tools: nothing to compare with ext4"
	exit 0
fi

img=$t_dir/img
m=$t_dir/mnt
rm=$t_dir/refused
mkdir -p "$m" "$rm"

# refused NAME DEVICE [OPTS]: shoal-mount DEVICE $rm must exit non-zero with
# one line on stderr and leave nothing mounted.
refused() {
	local what=$1 dev=$2 opts=${3:-lock=nolock} rc=0
	"$T_MOUNT" -o "$opts" "$dev" "$rm" 2>"$t_dir/err" || rc=$?
	if [ $rc -ne 0 ] && [ "$(wc -l <"$t_dir/err")" -eq 1 ] && grep -q . "$t_dir/err" && ! mountpoint -q "$rm"; then
		ok "mount refuses $what (exit $rc): $(cat "$t_dir/err")"
	else
		not_ok "mount refuses $what with one line and a non-zero exit (exit $rc)"
		sed 's/^/#   /' "$t_dir/err"
		if mountpoint -q "$rm"; then umount "$rm"; fi
	fi
}

truncate -s 64M "$t_dir/zero.img"
refused "a zeroed file" "$t_dir/zero.img"
truncate -s 64M "$t_dir/ext4.img"
mkfs.ext4 -q -F "$t_dir/ext4.img" >/dev/null
refused "an ext4 image" "$t_dir/ext4.img"
refused "a missing device" "$t_dir/missing.img"
truncate -s 10K "$t_dir/tiny.img"
refused "a 10 KiB file" "$t_dir/tiny.img"
t_mkfs "$img" 128M -J 4M
rc=0
"$T_MOUNT" -o lock=nolock "$img" "$t_dir/no-such-dir" 2>"$t_dir/err" || rc=$?
check "mount on a missing mountpoint fails (exit $rc: $(head -1 "$t_dir/err"))" test $rc -ne 0
rc=0
"$T_MOUNT" -o lock=nolock,bogus_option "$img" "$m" 2>"$t_dir/err" || rc=$?
check_eq "an unknown option is bad usage (exit 2)" 2 "$rc"
check "... and not mounted" bash -c "! mountpoint -q '$m'"

# --- mount, write, stat counters, clean unmount ---------------------------------------
check "mount a fresh filesystem" t_mount "$img" "$m"
check "shoal status names the device" bash -c "'$T_SHOAL' status '$m' | grep -qx 'device $img'"
w0=$("$T_SHOAL" stat "$m" | awk '$1 == "dev_writes" { print $2 }')
c0=$("$T_SHOAL" stat "$m" | awk '$1 == "commits" { print $2 }')
head -c $((4 << 20)) /dev/urandom >"$t_dir/data"
cp "$t_dir/data" "$m/data"
mkdir "$m/dir"
echo hello >"$m/dir/hello"
"$T_PY" -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$m/dir/hello"
sync
w1=$("$T_SHOAL" stat "$m" | awk '$1 == "dev_writes" { print $2 }')
c1=$("$T_SHOAL" stat "$m" | awk '$1 == "commits" { print $2 }')
check "shoal stat: dev_writes grows after writing + sync ($w0 -> $w1)" test "$w1" -gt "$w0"
check "shoal stat: commits grow after metadata changes + fsync ($c0 -> $c1)" test "$c1" -gt "$c0"
check_eq "shoal stat: readonly 0" 0 "$("$T_SHOAL" stat "$m" | awk '$1 == "readonly" { print $2 }')"
check "shoal stat on a path that is not a shoal mount fails" bash -c "! '$T_SHOAL' stat '$t_dir' 2>/dev/null"
refused "an image that is already mounted" "$img"
pid=${t_pids[$m]}
check "umount" t_umount "$m"
check "the daemon exited after umount" bash -c "! kill -0 $pid 2>/dev/null || grep -q '^State:.*Z' /proc/$pid/status"
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
if [ $rc -eq 77 ]; then
	skip "fsck.shoal -n after a clean unmount: build/fsck.shoal not built"
else
	check_eq "fsck.shoal -n after a clean unmount returns 0" 0 $rc
	[ $rc -eq 0 ] || sed 's/^/#   /' "$t_dir/fsck.out" | head -20
fi

# --- read-only ----------------------------------------------------------------------------
check "mount -o ro" t_mount "$img" "$m" lock=nolock,ro
check "ro: reading works" cmp -s "$t_dir/data" "$m/data"
check_eq "ro: shoal stat says readonly 1" 1 "$("$T_SHOAL" stat "$m" | awk '$1 == "readonly" { print $2 }')"
check_eq "ro: create: EROFS" EROFS "$(t_try 'open(a[0], "w")' "$m/new")"
check_eq "ro: open for writing: EROFS" EROFS "$(t_try 'os.open(a[0], os.O_WRONLY)' "$m/data")"
check_eq "ro: mkdir: EROFS" EROFS "$(t_try 'os.mkdir(a[0])' "$m/newdir")"
check_eq "ro: unlink: EROFS" EROFS "$(t_try 'os.unlink(a[0])' "$m/dir/hello")"
check_eq "ro: rename: EROFS" EROFS "$(t_try 'os.rename(a[0], a[1])' "$m/data" "$m/data2")"
check_eq "ro: chmod: EROFS" EROFS "$(t_try 'os.chmod(a[0], 0o600)' "$m/data")"
check_eq "ro: truncate: EROFS" EROFS "$(t_try 'os.truncate(a[0], 0)' "$m/data")"
check_eq "ro: setxattr: EROFS" EROFS "$(t_try 'os.setxattr(a[0], "user.x", b"1")' "$m/data")"
check_eq "ro: symlink: EROFS" EROFS "$(t_try 'os.symlink("x", a[0])' "$m/sl")"
check_eq "ro: utime: EROFS" EROFS "$(t_try 'os.utime(a[0])' "$m/data")"
sum_ro=$(sha256sum <"$img")
check "umount of the ro mount" t_umount "$m"
check "a read-only mount and unmount did not change the image" test "$(sha256sum <"$img")" = "$sum_ro"

# --- fusermount3 -u --------------------------------------------------------------------------
check "mount again" t_mount "$img" "$m"
pid=${t_pids[$m]}
echo after >"$m/dir/after"
check "fusermount3 -u" fusermount3 -u "$m"
for ((i = 0; i < 300; i++)); do t_pid_alive "$pid" || break; sleep 0.1; done
check "the daemon exited after fusermount3 -u" bash -c "! kill -0 $pid 2>/dev/null || grep -q '^State:.*Z' /proc/$pid/status"
t_pids[$m]=
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
if [ $rc -eq 77 ]; then
	skip "fsck.shoal -n after fusermount3 -u: build/fsck.shoal not built"
else
	check_eq "fsck.shoal -n after fusermount3 -u returns 0" 0 $rc
	[ $rc -eq 0 ] || sed 's/^/#   /' "$t_dir/fsck.out" | head -20
fi
check "mount after fusermount3 -u" t_mount "$img" "$m"
check_eq "data written before fusermount3 -u is there" "after hello" "$(cat "$m/dir/after" "$m/dir/hello" | xargs)"
check "the 4 MiB file is intact" cmp -s "$t_dir/data" "$m/data"
sock=
if t_is_shoal; then
	sock=/run/shoal/mnt-$(mountpoint -d "$m").sock
	check "the mount's control socket is there ($sock)" test -S "$sock"
	sock_id=$(stat -c '%d:%i' "$sock")
fi
check "shoal umount" "$T_SHOAL" umount "$m"
t_pids[$m]=
if [ -n "$sock" ]; then
	# a test running beside this one may mount at once, get the device
	# number just freed and bind a new socket of the same name: only this
	# daemon's own socket file must be gone
	check "the daemon removed its control socket at exit" \
		bash -c "[ ! -e '$sock' ] || [ \"\$(stat -c '%d:%i' '$sock')\" != '$sock_id' ]"
fi

# --- a daemon that stops late leaves a new mount's control socket alone ----------------------
# A lazy unmount frees the mount's device number at once; the next mount gets it
# and binds the same /run/shoal/mnt-DEV.sock.  The old daemon, stopped until now,
# must not remove that socket as it exits (fuse/ctl.c (3)); CI once lost one so.
if t_is_shoal; then
	img2=$t_dir/second.img
	m2=$t_dir/m2
	t_mkfs "$img2" 64M
	check "mount for the device-number reuse check" t_mount "$img" "$m"
	old_pid=${t_pids[$m]}
	old_dev=$(stat -c %d "$m")
	kill -STOP "$old_pid"
	check "lazy unmount while its daemon is stopped" umount -l "$m"
	t_pids[$m]=
	check "a second mount while the first daemon is stopped" t_mount "$img2" "$m2"
	new_dev=$(stat -c %d "$m2")
	kill -CONT "$old_pid"
	for _ in $(seq 200); do t_pid_alive "$old_pid" || break; sleep 0.1; done
	check "the first daemon exits once continued" bash -c "! kill -0 $old_pid 2>/dev/null || grep -q '^State:.*Z' /proc/$old_pid/status"
	# the kernel gives the lowest free number, so new_dev == old_dev unless
	# another test mounted in between (then the check is weaker, not wrong)
	check "shoal status of the second mount works after the first daemon exited (device numbers $old_dev, $new_dev)" "$T_SHOAL" status "$m2"
	check "shoal umount of the second mount" "$T_SHOAL" umount "$m2"
	t_pids[$m2]=
	check "fsck.shoal -n of the lazily unmounted filesystem" t_fsck "$img"
fi

# --- a daemon killed with SIGKILL frees its users -----------------------------------------------
# Its guardian (fuse/guard.c) aborts the dead daemon's FUSE connection and
# detaches the mount: a program with a file open there gets an error instead
# of waiting for ever, and no dead mount (ENOTCONN) stays for the next mount
# to stack on.
in_table() { awk -v m="$1" '$2 == m' /proc/mounts | grep -q .; }
if t_is_shoal; then
	check "mount for the SIGKILL check" t_mount "$img" "$m"
	kill_pid=${t_pids[$m]}
	kill_dev=$(mountpoint -d "$m")
	exec 3<"$m/dir/hello"
	kill -KILL "$kill_pid"
	t_pids[$m]=
	for ((i = 0; i < 100; i++)); do in_table "$m" || break; sleep 0.1; done
	check "the dead mount left the mount table (within $((i * 100)) ms)" bash -c "! awk -v m='$m' '\$2 == m' /proc/mounts | grep -q ."
	rc=0
	cat <&3 >/dev/null 2>"$t_dir/err" || rc=$?
	exec 3<&-
	check "a read on a descriptor opened before the death fails ($(cat "$t_dir/err"))" \
		bash -c "[ $rc -ne 0 ] && grep -Eq 'not connected|Input/output error|No such device' '$t_dir/err'"
	check "the guardian said so in the mount's log" \
		grep -q "shoal-mount\[$kill_pid\] died without unmounting $m: FUSE connection aborted, mount detached" \
		"/run/shoal/mnt-$kill_dev.log"
	check "mount again on the same mountpoint" t_mount "$img" "$m"
	check_eq "one mount there, not one on top of a dead one" 1 "$(awk -v m="$m" '$2 == m' /proc/mounts | wc -l)"
	check_eq "the data is there" "hello" "$(cat "$m/dir/hello")"
	t_umount_fsck "$m" "$img"
fi

# --- mkfs.shoal refuses to overwrite ----------------------------------------------------------
sum=$(sha256sum <"$t_dir/ext4.img")
rc=0
"$T_MKFS" -q "$t_dir/ext4.img" 2>"$t_dir/err" || rc=$?
check_eq "mkfs.shoal refuses an ext4 image without -f (exit 1)" 1 "$rc"
check "... with a reason on stderr ($(head -1 "$t_dir/err"))" grep -q . "$t_dir/err"
check "... and leaves it untouched" test "$(sha256sum <"$t_dir/ext4.img")" = "$sum"
check_eq "... the ext4 image still mounts as ext4" OK "$(mkdir -p "$t_dir/e" &&
	mount -o loop,ro "$t_dir/ext4.img" "$t_dir/e" && umount "$t_dir/e" && echo OK)"
sum=$(sha256sum <"$img")
rc=0
"$T_MKFS" -q "$img" 2>"$t_dir/err" || rc=$?
check_eq "mkfs.shoal refuses an existing shoal filesystem without -f (exit 1)" 1 "$rc"
check "... and leaves it untouched" test "$(sha256sum <"$img")" = "$sum"
check "mkfs.shoal -f formats the ext4 image" "$T_MKFS" -q -f -J 4M "$t_dir/ext4.img"
check "which then mounts as shoal, empty" t_mount "$t_dir/ext4.img" "$m"
check_eq "... with an empty root" "" "$(ls "$m")"
check "umount" t_umount "$m"
rc=0
t_fsck "$t_dir/ext4.img" >"$t_dir/fsck.out" 2>&1 || rc=$?
if [ $rc -eq 77 ]; then
	skip "fsck.shoal -n of a fresh filesystem: build/fsck.shoal not built"
else
	check_eq "fsck.shoal -n of a freshly formatted filesystem returns 0" 0 $rc
fi
t_done
