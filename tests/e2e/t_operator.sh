#!/usr/bin/env bash
# t_operator.sh - operator errors on a shared disk (issue 23): one wrong
# command on a second machine must end in a clear refusal, with every file
# unchanged and fsck.shoal -n clean afterwards.
#
# A "second machine" is a loop device on the same image (losetup): its I/O
# goes around this machine's locks on the image file, as another host's
# would.  Each case runs the wrong command there while a node has the
# filesystem mounted here:
#   1  a single-node mount (the default lock=nolock) of a mounted disk
#   2  a second lockd: its node gets journal 0, which the first one's has
#   3  mkfs.shoal -f of a mounted disk
#   4  fsck.shoal -y of a mounted disk
# and a crashed node's stale heartbeat is taken over by the next mount (at
# once: the block names this machine and the process, which is gone).
# Then lockd's and the mount's own refusals: --listen on a file that is not
# a socket (6), a secret file others can read or that is missing (10), TCP
# beyond loopback without a secret (9), a lockd at its file descriptor
# limit (13), a node name over 63 bytes (8).
. "$(dirname "$0")/lib.sh"

if ! t_is_shoal; then
	echo "# t_operator.sh tests shoal's own tools: nothing to compare with ext4"
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v losetup >/dev/null; then
	skip "needs root and losetup for a second machine's view of the disk"
	t_done
	exit 0
fi

T_LOCKD=$SHOAL_BUILD/shoal-lockd
# the heartbeat period of this test's mounts: checks watch about 2.5 of them
export SHOAL_HEARTBEAT_MS=${SHOAL_HEARTBEAT_MS:-300}
img=$t_dir/img
m=$t_dir/mnt
other=$t_dir/other
mkdir -p "$m" "$other"
loops=()
lockd_pids=()

op_cleanup() {
	local rc=$? l p
	set +e
	if mountpoint -q "$other"; then umount "$other" 2>/dev/null || umount -l "$other"; fi
	for p in "${lockd_pids[@]}"; do kill "$p" 2>/dev/null; done
	# the mounts on loop devices go first (t_cleanup unmounts the rest)
	for mnt in "${t_mounts[@]}"; do mountpoint -q "$mnt" && umount "$mnt" 2>/dev/null; done
	for l in "${loops[@]}"; do
		for _ in $(seq 50); do losetup -d "$l" 2>/dev/null && break; sleep 0.1; done
	done
	(exit $rc)
	t_cleanup
}
trap op_cleanup EXIT

# another_host: a loop device on the image, the disk as another machine sees it.
another_host() {
	local l
	l=$(losetup -f --show "$img")
	loops+=("$l")
	echo "$l"
}

# snapshot DIR: checksums of every file and the tree's shape.
snapshot() { (cd "$1" && find . -printf '%p %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort); }

# refused WHAT WANT_MSG CMD...: CMD must fail and say WANT_MSG (a regex).
refused() {
	local what=$1 want=$2 rc=0
	shift 2
	"$@" >"$t_dir/out" 2>&1 || rc=$?
	if [ $rc -ne 0 ] && grep -Eq "$want" "$t_dir/out"; then
		ok "$what: refused (exit $rc): $(grep -E "$want" "$t_dir/out" | head -1)"
	else
		not_ok "$what: refused with a message matching '$want' (exit $rc)"
		sed 's/^/#   /' "$t_dir/out" | head -10
	fi
	if mountpoint -q "$other"; then umount "$other"; fi
}

# unchanged: after the refusals, the files are what they were and fsck is clean.
unchanged() {
	t_umount_fsck "$m" "$img"
	check "$1: mounts again after the refusals" t_mount "$img" "$m" "$2"
	snapshot "$m" >"$t_dir/after"
	check "$1: every file unchanged" cmp -s "$t_dir/before" "$t_dir/after"
	t_umount "$m"
}

fill() {
	mkdir -p "$m/dir/sub"
	head -c 300000 /dev/urandom >"$m/dir/data"
	echo hello >"$m/dir/sub/hello"
	ln -s ../dir/data "$m/dir/sub/link"
	sync -f "$m"
	snapshot "$m" >"$t_dir/before"
}

# --- defects 1, 3, 4: a single-node mount here, wrong commands there ---------
t_mkfs "$img" 96M -j 2 -J 4M
check "single-node mount here (node here)" t_mount "$img" "$m" "lock=nolock,node=here"
fill
dev=$(another_host)
live="in use on another machine.*node 'here'.*last update"
refused "defect 1: lock=nolock mount of the mounted disk elsewhere" "$live" \
	"$T_MOUNT" -o lock=nolock,node=there "$dev" "$other"
check "... at once: the block names this machine's running shoal-mount" \
	grep -q "its process $(t_daemon_pid "$m") on this machine is running" "$t_dir/out"
refused "defect 3: mkfs.shoal -f of the mounted disk elsewhere" "$live" \
	"$T_MKFS" -q -f "$dev"
refused "defect 4: fsck.shoal -y of the mounted disk elsewhere" "$live" \
	"$T_FSCK" -y "$dev"
rc=0
"$T_FSCK" -n "$dev" >"$t_dir/out" 2>&1 || rc=$?
check "fsck.shoal -n of the mounted disk elsewhere warns and changes nothing (exit $rc)" \
	grep -q "warning: single-node (lock=nolock) heartbeat: node 'here'" "$t_dir/out"
unchanged "single-node" "lock=nolock,node=here"

# --- a crash: the stale heartbeat is taken over ---------------------------------
check "mount here again" t_mount "$img" "$m" "lock=nolock,node=here"
pid=$(t_daemon_pid "$m")
kill -9 "$pid"
for _ in $(seq 100); do t_pid_alive "$pid" || break; sleep 0.05; done
umount -l "$m" 2>/dev/null || true
rc=0
"$T_MOUNT" -o lock=nolock,node=there "$dev" "$other" 2>"$t_dir/out" || rc=$?
if [ $rc -eq 0 ] && mountpoint -q "$other" && grep -q "did not change: a mount that crashed" "$t_dir/out"; then
	ok "a crashed node's stale heartbeat is taken over by a mount elsewhere"
	# the block names this machine and the dead process: no watch
	check "... at once: its writer's process on this machine is gone" \
		grep -q "its process on this machine is gone" "$t_dir/out"
else
	not_ok "a crashed node's stale heartbeat is taken over (exit $rc)"
	sed 's/^/#   /' "$t_dir/out"
fi
if mountpoint -q "$other"; then snapshot "$other" >"$t_dir/after"; else : >"$t_dir/after"; fi
check "... with every file the crashed node wrote" cmp -s "$t_dir/before" "$t_dir/after"
if mountpoint -q "$other"; then umount "$other"; fi
for _ in $(seq 100); do pgrep -f "shoal-mount.*$other" >/dev/null || break; sleep 0.05; done
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "fsck.shoal -n is clean after the takeover" 0 "$rc"
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check "... and the clean unmount left no heartbeat warning" bash -c "! grep -q warning '$t_dir/fsck.out'"

# --- defect 2: two lock servers for one disk -----------------------------------
t_mkfs "$img" 96M -j 2 -J 4M -t "optest:$(basename "$t_dir" | tr -cd 'a-zA-Z0-9' | head -c 12)"
for s in 1 2; do
	(umask 000 && exec "$T_LOCKD" -f --listen "unix:$t_dir/lk$s.sock" 2>"$t_dir/lockd$s.log") &
	lockd_pids+=($!)
done
for _ in $(seq 100); do [ -S "$t_dir/lk1.sock" ] && [ -S "$t_dir/lk2.sock" ] && break; sleep 0.05; done
dev=$(another_host) # t_mkfs made a new image file
check "cluster node a on lockd 1 (journal 0)" t_mount "$img" "$m" "lock=shoal:unix:$t_dir/lk1.sock,node=a"
fill
refused "defect 2: node b of a second lockd on the same disk elsewhere" \
	"in use on another machine.*journal 0's heartbeat: node 'a'" \
	"$T_MOUNT" -o "lock=shoal:unix:$t_dir/lk2.sock,node=b" "$dev" "$other"
# --- defect 5: another filesystem with the same lock table on that lockd -------
table="optest:$(basename "$t_dir" | tr -cd 'a-zA-Z0-9' | head -c 12)"
t_mkfs "$t_dir/img2" 64M -j 2 -J 4M -t "$table"
refused "defect 5: a node of another filesystem with the same lock table" \
	"table $table belongs to filesystem [0-9a-f-]{36}, not [0-9a-f-]{36}" \
	"$T_MOUNT" -o "lock=shoal:unix:$t_dir/lk1.sock,node=c" "$t_dir/img2" "$other"
rc=0
t_fsck "$t_dir/img2" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "... the other filesystem is untouched (fsck.shoal -n)" 0 "$rc"
unchanged "two lock servers" "lock=shoal:unix:$t_dir/lk1.sock,node=a"

# --- defect 6: --listen unix:PATH on a file that is not a socket -------------
echo "precious" >"$t_dir/notasocket"
refused "defect 6: shoal-lockd --listen unix:PATH where PATH is a regular file" \
	"not a socket" timeout 10 "$T_LOCKD" -f --listen "unix:$t_dir/notasocket"
check_eq "... the file is still there, unchanged" "precious" "$(cat "$t_dir/notasocket" 2>/dev/null)"
check "... the socket of a running lockd is 0600 whatever the umask" \
	bash -c "[ \"\$(stat -c %a '$t_dir/lk1.sock')\" = 600 ]"

# --- defect 10: a secret file others can read; a missing one -----------------
printf 'sesame\n' >"$t_dir/secret"
chmod 644 "$t_dir/secret"
refused "defect 10: shoal-lockd --secret-file readable by others" \
	"secret file $t_dir/secret is readable or writable by group or others \(mode 0644\).*chmod 600" \
	timeout 10 "$T_LOCKD" -f --listen "unix:$t_dir/lk3.sock" --secret-file "$t_dir/secret"
check "... and it made no socket" bash -c "[ ! -e '$t_dir/lk3.sock' ]"
chmod 640 "$t_dir/secret"
refused "defect 10: a mount with secret= readable by the group" \
	"secret file $t_dir/secret is readable or writable by group or others \(mode 0640\)" \
	"$T_MOUNT" -o "lock=shoal:unix:$t_dir/lk1.sock,node=c,secret=$t_dir/secret" "$img" "$other"
refused "defect 10: shoal-lockd --secret-file that does not exist" \
	"secret file $t_dir/nosecret: No such file or directory" \
	timeout 10 "$T_LOCKD" -f --listen "unix:$t_dir/lk3.sock" --secret-file "$t_dir/nosecret"
refused "defect 10: a mount with secret= that does not exist" \
	"secret=$t_dir/nosecret: the cluster's secret file: No such file or directory" \
	"$T_MOUNT" -o "lock=shoal:unix:$t_dir/lk1.sock,node=c,secret=$t_dir/nosecret" "$img" "$other"

# --- defect 9: TCP beyond loopback without a secret ----------------------------
refused "defect 9: shoal-lockd --listen 0.0.0.0:0 without a secret" \
	"listen 0.0.0.0:0: anyone who can reach it could join the cluster without a secret: give --secret-file \(or --insecure" \
	timeout 10 "$T_LOCKD" -f --listen 0.0.0.0:0

# --- defect 13: lockd at its file descriptor limit ---------------------------
# 40 connections to a lockd allowed 24 descriptors: it must neither spin
# nor flood its log (it logged 100,000 lines a second), and it serves a
# node as soon as they are gone.
(exec prlimit --nofile=24:24 "$T_LOCKD" -f --listen "unix:$t_dir/lk4.sock" 2>"$t_dir/lockd4.log") &
lockd_pids+=($!)
for _ in $(seq 100); do [ -S "$t_dir/lk4.sock" ] && break; sleep 0.05; done
"$T_PY" - "$t_dir/lk4.sock" "$t_dir/lockd4.log" <<'EOF_PY'
import socket, sys, time
socks = []
for i in range(40):
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect(sys.argv[1])
    except BlockingIOError:
        pass
    socks.append(s)
# until lockd says it is at its limit (5 s at most), then 0.5 s more at it
end = time.time() + 5
while time.time() < end and "descriptor" not in open(sys.argv[2]).read():
    time.sleep(0.05)
time.sleep(0.5)
EOF_PY
n=$(grep -c "Too many open files" "$t_dir/lockd4.log" || true)
check "defect 13: lockd at its fd limit says so" grep -q "file descriptor limit" "$t_dir/lockd4.log"
check "... once, not in a loop ($n lines)" test "$n" -le 3
check "... and serves a node once the connections are gone" \
	timeout 10 "$SHOAL_BUILD/lockbench" lock "unix:$t_dir/lk4.sock" 10

# --- defect 8: a node name longer than 63 bytes --------------------------------
long=$(printf 'n%.0s' $(seq 64))
refused "defect 8: node= of 64 bytes" "node name.*63 bytes" \
	"$T_MOUNT" -o "lock=nolock,node=$long" "$img" "$other"
refused "defect 8: node= of 64 bytes, cluster" "node name.*63 bytes" \
	"$T_MOUNT" -o "lock=shoal:unix:$t_dir/lk1.sock,node=$long" "$img" "$other"
rc=0
t_fsck "$img" >"$t_dir/fsck.out" 2>&1 || rc=$?
check_eq "fsck.shoal -n is clean after the refused node names" 0 "$rc"

t_done
