#!/bin/bash
# t_cluster_fence.sh - what a node does when it loses its lock manager, and
# whom shoal-lockd lets in.
#
# Self-fencing (docs/PROTOCOL.md, "Leases, heartbeats and fencing"): two
# nodes a and b on one image under a lockd with a 2 s lease, both with work
# done (b reads a's fsync'ed file) and a with changes not yet committed
# (commit=60) and a file held open for writing; then lockd is stopped with
# SIGSTOP.  Within lease/2 (+ slack) each node logs that it self-fenced;
# from then on
#   - a write through the file a held open, a create, a mkdir, an append
#     with fsync, and an fsync of a file changed before the fence but not
#     yet committed fail with EIO or EROFS on both nodes (syncfs is not
#     tried: the kernel does not pass it to a FUSE daemon);
#   - not one byte of the image changes (checksums right after the fence,
#     after the write attempts and after the unmounts);
#   - `shoal umount` unmounts each node and its daemon exits, within 20 s.
# After that, under a new lockd, a third node mounts the image (replaying
# the fenced nodes' journals): what a and b had fsync'ed before the fence
# is there; unmount; fsck.shoal -n is clean.
#
# Withdraw: `shoal withdraw` stops node w as a write error would; node v
# replays w's journal after w's lease and sees what w had committed (in w's
# journal only), not what it had not; w writes nothing more and unmounts.
#
# Partition: only node p loses lockd (it reaches lockd through a proxy,
# sockproxy.py, which is killed),
# node q goes on, recovers p's journal and changes a directory and a file
# both had cached: p, fenced, answers EIO or the current state, never the
# old one.
#
# Admission: under one lockd, a node of another filesystem (mkfs -t
# other:fs) and a second node with a name already in use are refused: the
# mount exits non-zero with one line that says why (lockd's reason), and the
# node already in is not disturbed.  Under a lockd with --secret-file, a
# mount without secret= and one with a wrong secret are refused the same
# way (the line names the secret); one with the right secret works.
. "$(dirname "$0")/lib.sh"

LOCKD=$SHOAL_BUILD/shoal-lockd
LEASE=2
LEASE_MS=2000
SLACK_MS=1000
lockd_pid=
lockd_stopped=

# lockd_start SOCK LOG [ARGS...]: shoal-lockd -f in the background.
lockd_start() {
	local sock=$1 log=$2
	shift 2
	"$LOCKD" -f --listen "unix:$sock" "$@" 2>"$log" &
	lockd_pid=$!
	for _ in $(seq 100); do
		[ -S "$sock" ] && return 0
		kill -0 "$lockd_pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}
lockd_stop() {
	[ -n "$lockd_pid" ] || return 0
	kill -CONT "$lockd_pid" 2>/dev/null || true
	kill "$lockd_pid" 2>/dev/null || true
	wait "$lockd_pid" 2>/dev/null || true
	lockd_pid=
}
my_cleanup() {
	local rc=$?
	set +e
	[ -n "${holder_pid:-}" ] && kill -9 "$holder_pid" 2>/dev/null
	[ -n "${proxy_pid:-}" ] && kill -9 "$proxy_pid" 2>/dev/null
	lockd_stop
	(exit $rc)
	t_cleanup
}
trap my_cleanup EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# umount_stopped MNT WHAT: `shoal umount` of a fenced or withdrawn node works
# and its daemon exits, within 20 s each (else unmounted and killed).
umount_stopped() {
	local m=$1 what=$2 pid=${t_pids[$1]} rc=0 out
	out=$(timeout 20 "$T_SHOAL" umount "$m" 2>&1) || rc=$?
	if [ $rc -eq 0 ] && ! mountpoint -q "$m"; then
		ok "shoal umount of $what works"
	else
		not_ok "shoal umount of $what works (exit $rc: $out)"
		timeout 20 fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	fi
	for _ in $(seq 200); do t_pid_alive "$pid" || break; sleep 0.1; done
	if t_pid_alive "$pid"; then
		not_ok "the daemon of $what exits after the unmount (still running after 20 s)"
		kill -9 "$pid" 2>/dev/null || true
	else
		ok "the daemon of $what exits after the unmount"
	fi
	wait "$pid" 2>/dev/null || true
	t_pids[$m]=
	t_fg[$m]=
}
img_sum() { md5sum "$1" | cut -d' ' -f1; }
in_list() { # WORD WORDS...: is WORD one of WORDS?
	local w=$1
	shift
	for x in "$@"; do [ "$w" = "$x" ] && return 0; done
	return 1
}

# --- self-fencing ----------------------------------------------------------------

img=$t_dir/img
sock=$t_dir/lockd.sock
t_mkfs "$img" 256M -j 3 -t fence:fs
lockd_start "$sock" "$t_dir/lockd.log" --lease "$LEASE" || {
	not_ok "shoal-lockd starts"
	t_done
	exit 1
}
ma=$t_dir/a
mb=$t_dir/b
for nd in a b; do
	if t_mount_fg "$img" "$t_dir/$nd" "$t_dir/$nd.log" "lock=shoal:unix:$sock,node=$nd,commit=60"; then
		ok "node $nd mounts"
	else
		not_ok "node $nd mounts"
		tail -3 "$t_dir/$nd.log" | sed 's/^/#   /'
		t_done
		exit 1
	fi
done

# durable work on both nodes, seen across
py 'import os
for p, data in ((a[0], b"from a\n" * 1000), (a[1], b"from b\n" * 700)):
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
for d in a[2:]:
    fd = os.open(d, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)' "$ma/durable_a" "$mb/durable_b" "$ma" "$mb"
check_eq "b reads what a wrote and fsync'ed" "$(printf 'from a\n%.0s' $(seq 1000) | md5sum)" \
	"$(md5sum <"$mb/durable_a")"
# a: changes not yet committed, and a file held open for writing
py 'import os
fd = os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"pending" * 5000)
os.close(fd)
os.mkdir(a[1])' "$ma/pending_a" "$ma/pending_dir"
"$T_PY" -c '
import os, sys, time, errno
fd = os.open(sys.argv[1], os.O_WRONLY)
open(sys.argv[3], "w").write("open\n")
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
try:
    os.pwrite(fd, b"after the fence" * 100, 0)
    os.fsync(fd)
    r = "OK"
except OSError as e:
    r = errno.errorcode.get(e.errno, str(e.errno))
open(sys.argv[3], "w").write(r + "\n")' "$ma/durable_a" "$t_dir/go" "$t_dir/holder.out" &
holder_pid=$!
for _ in $(seq 100); do [ -s "$t_dir/holder.out" ] && break; sleep 0.05; done
check_eq "a file is held open for writing on a" open "$(cat "$t_dir/holder.out" 2>/dev/null)"
check_eq "before the fence b can write" OK "$(t_try 'open(a[0], "w").write("x")' "$mb/before_fence")"

# stop lockd: each node fences itself within lease/2
kill -STOP "$lockd_pid"
lockd_stopped=$(now_ms)
declare -A fenced_at
for _ in $(seq 200); do
	for nd in a b; do
		if [ -z "${fenced_at[$nd]:-}" ] && grep -q 'self-fenced' "$t_dir/$nd.log"; then
			fenced_at[$nd]=$(($(now_ms) - lockd_stopped))
		fi
	done
	[ -n "${fenced_at[a]:-}" ] && [ -n "${fenced_at[b]:-}" ] && break
	sleep 0.02
done
for nd in a b; do
	if [ -z "${fenced_at[$nd]:-}" ]; then
		not_ok "node $nd logs that it self-fenced (nothing after 4 s)"
		tail -3 "$t_dir/$nd.log" | sed 's/^/#   /'
	elif [ "${fenced_at[$nd]}" -le $((LEASE_MS / 2 + SLACK_MS)) ]; then
		ok "node $nd self-fenced ${fenced_at[$nd]} ms after lockd stopped (lease/2 = $((LEASE_MS / 2)) ms)"
	else
		not_ok "node $nd self-fenced ${fenced_at[$nd]} ms after lockd stopped (lease/2 = $((LEASE_MS / 2)) ms)"
	fi
done
sleep 0.1 # a write in flight when the fence came has landed
sum_fence=$(img_sum "$img")

# writes after the fence fail, and change nothing on the device
touch "$t_dir/go"
wait "$holder_pid" || true
holder_pid=
r=$(cat "$t_dir/holder.out")
if in_list "$r" EIO EROFS; then
	ok "a write + fsync through a file a held open fails after the fence ($r)"
else
	not_ok "a write + fsync through a file a held open fails after the fence (got $r, want EIO or EROFS)"
fi
for nd in a b; do
	m=$t_dir/$nd
	for what in create mkdir append fsync_pending; do
		case $what in
		create) r=$(t_try 'open(a[0], "w").write("x")' "$m/new_after_fence") ;;
		mkdir) r=$(t_try 'os.mkdir(a[0])' "$m/dir_after_fence") ;;
		append) r=$(t_try 'fd = os.open(a[0], os.O_WRONLY | os.O_APPEND)
try:
    os.write(fd, b"more")
    os.fsync(fd)
finally:
    os.close(fd)' "$m/durable_$nd") ;;
		fsync_pending) # changes made before the fence, not committed (commit=60)
			r=$(t_try 'fd = os.open(a[0], os.O_RDONLY)
try:
    os.fsync(fd)
finally:
    os.close(fd)' "$m/$([ $nd = a ] && echo pending_a || echo before_fence)")
			;;
		esac
		if in_list "$r" EIO EROFS; then
			ok "node $nd after the fence: $what fails ($r)"
		else
			not_ok "node $nd after the fence: $what fails (got $r, want EIO or EROFS)"
		fi
	done
done
check_eq "the image did not change after the fence (write attempts)" "$sum_fence" "$(img_sum "$img")"

# the user can unmount both nodes, without a hang
for nd in a b; do
	umount_stopped "$t_dir/$nd" "fenced node $nd"
done
check_eq "the image did not change after the fence (unmounts)" "$sum_fence" "$(img_sum "$img")"
lockd_stop

# a fresh cluster recovers what the fenced nodes had made durable
lockd_start "$t_dir/lockd2.sock" "$t_dir/lockd2.log" --lease "$LEASE" ||
	not_ok "a second shoal-lockd starts"
mc=$t_dir/c
if t_mount_fg "$img" "$mc" "$t_dir/c.log" "lock=shoal:unix:$t_dir/lockd2.sock,node=c"; then
	ok "node c mounts the image the fenced nodes left"
	check_eq "node c reads what a fsync'ed before the fence" \
		"$(printf 'from a\n%.0s' $(seq 1000) | md5sum)" "$(md5sum <"$mc/durable_a")"
	check_eq "node c reads what b fsync'ed before the fence" \
		"$(printf 'from b\n%.0s' $(seq 700) | md5sum)" "$(md5sum <"$mc/durable_b")"
	t_umount_fsck "$mc" "$img"
else
	not_ok "node c mounts the image the fenced nodes left"
	tail -3 "$t_dir/c.log" | sed 's/^/#   /'
fi
lockd_stop

# --- withdraw: a node stopped as an I/O error would stop it --------------------------

# Node w has work committed by an fsync that is in its journal only
# (commit=60, and no other node has asked for those glocks since), and
# changes it never committed; `shoal withdraw` stops it (docs/CONTROL.md,
# the path every write error takes).  w then answers EROFS or EIO and writes
# nothing more (its own device counters); node v, asking for w's directory,
# waits until lockd has declared w dead and v has replayed w's journal,
# then reads the committed work and not the rest, and works on; w unmounts;
# fsck is clean.
stat_of() { "$T_SHOAL" stat "$1" 2>/dev/null | awk -v k="$2" '$1 == k { print $2 }'; }
withdraw_test() {
	local sock=$t_dir/lockd6.sock wimg=$t_dir/wimg mw=$t_dir/w mv=$t_dir/v
	local r rc out w1 w2 t0 waited
	t_mkfs "$wimg" 256M -j 2 -t wd:fs
	lockd_start "$sock" "$t_dir/lockd6.log" --lease "$LEASE" || {
		not_ok "a sixth shoal-lockd starts"
		return
	}
	t_mount_fg "$wimg" "$mw" "$t_dir/w.log" "lock=shoal:unix:$sock,node=w,commit=60" || {
		not_ok "node w mounts"
		return
	}
	t_mount_fg "$wimg" "$mv" "$t_dir/v.log" "lock=shoal:unix:$sock,node=v,commit=60" || {
		not_ok "node v mounts"
		return
	}
	ls "$mv" >/dev/null
	py 'import os
os.mkdir(a[0])
fd = os.open(a[0] + "/kept", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"committed on w\n" * 3000)
os.fsync(fd)
os.close(fd)
fd = os.open(a[0], os.O_RDONLY)
os.fsync(fd)
os.close(fd)
fd = os.open(a[0] + "/lost", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"never committed\n")
os.close(fd)' "$mw/wd"

	rc=0
	out=$("$T_SHOAL" withdraw "$mw" 2>&1) || rc=$?
	t0=$(now_ms)
	if [ $rc -eq 0 ] && [ "${out#withdrawn}" != "$out" ]; then
		ok "shoal withdraw stops node w ($out)"
	else
		not_ok "shoal withdraw stops node w (exit $rc: $out)"
	fi
	check "w logs that it withdrew" grep -q 'withdrawn from the cluster' "$t_dir/w.log"
	check_eq "w: withdrawals 1, readonly 1" "1 1" "$(stat_of "$mw" withdrawals) $(stat_of "$mw" readonly)"
	w1=$(stat_of "$mw" dev_writes)
	for what in create write; do
		case $what in
		create) r=$(t_try 'open(a[0], "w").write("x")' "$mw/wd/after_withdraw") ;;
		write) r=$(t_try 'fd = os.open(a[0], os.O_WRONLY)
try:
    os.pwrite(fd, b"after the withdraw", 0)
    os.fsync(fd)
finally:
    os.close(fd)' "$mw/wd/kept") ;;
		esac
		if in_list "$r" EIO EROFS; then
			ok "withdrawn w: $what fails ($r)"
		else
			not_ok "withdrawn w: $what fails (got $r, want EIO or EROFS)"
		fi
	done
	w2=$(stat_of "$mw" dev_writes)
	check_eq "withdrawn w writes nothing to its device (dev_writes)" "$w1" "$w2"
	rc=0
	out=$("$T_SHOAL" withdraw "$mw" 2>&1) || rc=$?
	check_eq "a second withdraw is refused" "1 error Read-only file system" "$rc $out"

	# v: blocked on w's locks until w's journal is replayed
	check_eq "v reads what w committed" "$(printf 'committed on w\n%.0s' $(seq 3000) | md5sum)" \
		"$(timeout 30 md5sum <"$mv/wd/kept")"
	waited=$(($(now_ms) - t0))
	check "lockd: w's journal recovered by node v" grep -q 'recovered by node v' "$t_dir/lockd6.log"
	if [ "$waited" -ge $((LEASE_MS / 4)) ]; then
		ok "v waited for w's lease before it read w's directory ($waited ms, lease $LEASE_MS ms)"
	else
		not_ok "v waited for w's lease before it read w's directory ($waited ms, lease $LEASE_MS ms)"
	fi
	check_eq "v does not see what w never committed" "kept" "$(ls "$mv/wd" | tr '\n' ' ' | sed 's/ $//')"
	check_eq "v works on" OK "$(t_try 'open(a[0], "w").write("after w")' "$mv/wd/by_v")"

	umount_stopped "$mw" "withdrawn node w"
	check_eq "v still reads w's committed file after w left" \
		"$(printf 'committed on w\n%.0s' $(seq 3000) | md5sum)" "$(md5sum <"$mv/wd/kept")"
	t_umount_fsck "$mv" "$wimg"
}
withdraw_test
lockd_stop

# --- partition: one node loses lockd, the other goes on ------------------------------

# The fenced node must not answer from what it cached before the fence: once
# lockd has declared it dead and the other node has changed things, it
# answers EIO or the truth, never the old state.  Only p's connection to
# lockd is cut: p reaches lockd through sockproxy.py, which is killed (a
# debugger calling shutdown(2) inside the daemon broke the futex wait its
# main thread sleeps in, and glibc aborted); q keeps its lease.
partition_test() {
	local sock=$t_dir/lockd5.sock psock=$t_dir/proxy5.sock mp=$t_dir/p mq=$t_dir/q r
	lockd_start "$sock" "$t_dir/lockd5.log" --lease "$LEASE" || {
		not_ok "a fifth shoal-lockd starts"
		return
	}
	coproc PROXY { exec python3 "$(dirname "$0")/sockproxy.py" "$psock" "$sock"; }
	proxy_pid=$PROXY_PID
	read -r -t 10 r <&"${PROXY[0]}" || true
	if [ "$r" != ready ]; then
		not_ok "the proxy in front of lockd starts"
		return
	fi
	t_mount_fg "$img" "$mp" "$t_dir/p.log" "lock=shoal:unix:$psock,node=p" || {
		not_ok "node p mounts"
		return
	}
	t_mount_fg "$img" "$mq" "$t_dir/q.log" "lock=shoal:unix:$sock,node=q" || {
		not_ok "node q mounts"
		return
	}
	mkdir "$mp/part"
	echo old >"$mp/part/f1"
	# both nodes have the directory and the file cached
	check_eq "p and q list part/ alike" "$(ls "$mp/part")" "$(ls "$mq/part")"
	check_eq "q reads p's file" old "$(cat "$mq/part/f1")"
	check_eq "p reads its file" old "$(cat "$mp/part/f1")"
	kill -9 "$proxy_pid"
	wait "$proxy_pid" 2>/dev/null || true
	proxy_pid=
	for _ in $(seq 100); do grep -q 'self-fenced' "$t_dir/p.log" && break; sleep 0.05; done
	check "p logs that it self-fenced" grep -q 'self-fenced' "$t_dir/p.log"
	# lockd declares p dead after the lease; q replays p's journal
	for _ in $(seq 200); do grep -q 'recovered by node q' "$t_dir/lockd5.log" && break; sleep 0.05; done
	check "q recovered p's journal" grep -q 'recovered by node q' "$t_dir/lockd5.log"
	echo new >"$mq/part/f2"
	echo changed >"$mq/part/f1"
	check_eq "q sees its changes" "f1 f2 changed" "$(ls "$mq/part" | tr '\n' ' ')$(cat "$mq/part/f1")"
	r=$(t_try 'l = os.listdir(a[0])
if "f2" not in l: raise OSError(errno.ESTALE, "stale")' "$mp/part")
	if in_list "$r" OK EIO; then
		ok "fenced p: readdir of part/ is current or EIO ($r)"
	else
		not_ok "fenced p: readdir of part/ is current or EIO (got $r: $(ls "$mp/part" 2>&1 | tr '\n' ' '))"
	fi
	r=$(t_try 'os.stat(a[0])' "$mp/part/f2")
	if in_list "$r" OK EIO; then
		ok "fenced p: lookup of q's new file is current or EIO ($r)"
	else
		not_ok "fenced p: lookup of q's new file is current or EIO (got $r)"
	fi
	r=$(t_try 'd = open(a[0], "rb").read()
if d != b"changed\n": raise OSError(errno.ESTALE, "stale")' "$mp/part/f1")
	if in_list "$r" OK EIO; then
		ok "fenced p: read of q's rewritten file is current or EIO ($r)"
	else
		not_ok "fenced p: read of q's rewritten file is current or EIO (got $r)"
	fi
	t_umount "$mp" || true
	t_umount_fsck "$mq" "$img"
}
partition_test
lockd_stop

# --- admission ----------------------------------------------------------------------

# refused MNT WHAT PATTERN IMG OPTS: the mount fails with one line matching PATTERN
refused() {
	local mnt=$1 what=$2 pat=$3 rc=0 out lines
	mkdir -p "$mnt"
	out=$(timeout 60 "$T_MOUNT" -o "$5" "$4" "$mnt" 2>&1) || rc=$?
	if mountpoint -q "$mnt"; then
		t_mounts+=("$mnt")
		t_pids[$mnt]=$(t_daemon_pid "$mnt")
		not_ok "$what: refused (it mounted)"
		return
	fi
	lines=$(printf '%s\n' "$out" | grep -c .) || true
	if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -Eqi -- "$pat"; then
		ok "$what: refused, exit $rc: $out"
	else
		not_ok "$what: refused with exit != 0 and one line matching /$pat/"
		printf '#   exit %s, %s line(s):\n' "$rc" "$lines"
		printf '%s\n' "$out" | sed 's/^/#     /'
	fi
}

other=$t_dir/other
t_mkfs "$other" 128M -j 2 -t other:fs
sock=$t_dir/lockd3.sock
lockd_start "$sock" "$t_dir/lockd3.log" || not_ok "a third shoal-lockd starts"
t_mount "$img" "$ma" "lock=shoal:unix:$sock,node=a"
check "node a is in" mountpoint -q "$ma"
refused "$t_dir/o" "a node of another filesystem (table other:fs)" 'table' \
	"$other" "lock=shoal:unix:$sock,node=o"
refused "$t_dir/a2" "a second node named a" 'name.*(in use|already)|(in use|already).*name' \
	"$img" "lock=shoal:unix:$sock,node=a"
check_eq "node a still works after the refusals" OK \
	"$(t_try 'open(a[0], "w").write("still here")' "$ma/after_refusals")"
t_umount "$ma"
lockd_stop

printf 's3cret-of-the-cluster\n' >"$t_dir/secret"
printf 'not-the-secret\n' >"$t_dir/wrong"
chmod 600 "$t_dir/secret" "$t_dir/wrong"
sock=$t_dir/lockd4.sock
lockd_start "$sock" "$t_dir/lockd4.log" --secret-file "$t_dir/secret" ||
	not_ok "shoal-lockd --secret-file starts"
refused "$t_dir/s1" "a mount without secret= under lockd --secret-file" 'secret' \
	"$img" "lock=shoal:unix:$sock,node=s1"
refused "$t_dir/s2" "a mount with a wrong secret" 'secret' \
	"$img" "lock=shoal:unix:$sock,node=s2,secret=$t_dir/wrong"
rc=0
mkdir -p "$t_dir/s3"
out=$("$T_MOUNT" -o "lock=shoal:unix:$sock,node=s3,secret=$t_dir/secret" "$img" "$t_dir/s3" 2>&1) ||
	rc=$?
if [ $rc -eq 0 ] && mountpoint -q "$t_dir/s3"; then
	t_mounts+=("$t_dir/s3")
	t_pids["$t_dir/s3"]=$(t_daemon_pid "$t_dir/s3")
	ok "a mount with the right secret works"
	check_eq "and can write" OK "$(t_try 'open(a[0], "w").write("x")' "$t_dir/s3/with_secret")"
	t_umount_fsck "$t_dir/s3" "$img"
else
	not_ok "a mount with the right secret works (exit $rc: $out)"
fi
lockd_stop
t_done
