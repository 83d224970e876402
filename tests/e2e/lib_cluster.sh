# lib_cluster.sh - helpers of the multi-node (cluster) end-to-end tests.
# Source it after lib.sh:
#	. "$(dirname "$0")/lib.sh"
#	. "$(dirname "$0")/lib_cluster.sh"
#
# What it gives:
#   c_img                  the shared image ($t_dir/img)
#   c_sock                 the private lockd's unix socket ($t_dir/lk.sock)
#   c_nodes                node names mounted so far (a b c ...)
#   c_start_lockd [LEASE]  start a private shoal-lockd -f on $c_sock (lease in
#                          seconds, default C_LEASE=5: short, yet a node
#                          starved of CPU for 2 s on a loaded machine does
#                          not fence itself); log in $t_dir/lockd.log;
#                          the array C_LOCKD_OPTS is added to its options
#   c_mkfs SIZE [JOURNALS] format $c_img for the cluster (-t shoaltest:NAME)
#   c_mount NODE [OPTS]    mount $c_img on $t_dir/NODE as node NODE
#                          (shoal-mount -f in the background, stderr to
#                          $t_dir/NODE.log; extra OPTS appended, e.g. hold=0)
#   c_setup N SIZE [OPTS]  c_mkfs + c_start_lockd + mount nodes a, b, c...
#   c_mnt NODE             the mountpoint of NODE
#   c_stat NODE COUNTER    one counter of `shoal stat` (empty if unknown)
#   c_umount NODE          `shoal umount` (waits for the daemon) with a
#                          timeout; returns the daemon's exit status
#   c_umount_all           c_umount every mounted node
#   c_fsck_check           (everything unmounted) fsck.shoal -n must be clean
#   c_diag                 for a hang: every node's glocks with holders, waiters or
#                          requests, its daemon's threads that are in D
#                          state or in FUSE (kernel stacks) and every
#                          thread's shoal frames (gdb, one line a thread)
#   c_abort NODE           abort NODE's FUSE connection (fusectl): every
#                          request waiting on it fails, a stuck daemon and
#                          its callers can exit
#   c_logs                 print the tail of every node's and lockd's log
#   c_retry_check          no node's log says it gave up telling its kernel
#                          to drop an inode's attributes (fuse/main.c
#                          now_retry: a reply the kernel never took)
# At exit, even on failure, every node is unmounted (shoal umount, which
# waits; a node that does not go within C_UMOUNT_TIMEOUT seconds gets its
# FUSE connection aborted, is unmounted lazily and its daemon killed by
# pid), then lockd is stopped.
#
# The cluster tests have no ext4 counterpart: with E2E_FS=ext4 the test is
# skipped (exit 0).
if ! t_is_shoal; then
	echo "# $(basename "$0"): a shoal cluster test, nothing to compare with ext4"
	exit 0
fi

T_LOCKD=$SHOAL_BUILD/shoal-lockd
: "${C_LEASE:=5}"
: "${C_UMOUNT_TIMEOUT:=60}"
c_img=$t_dir/img
c_sock=$t_dir/lk.sock
c_nodes=()
c_lockd_pid=
[ -n "${C_LOCKD_OPTS+x}" ] || C_LOCKD_OPTS=()
declare -A c_mounted # node -> 1 while mounted
declare -A c_conn    # node -> FUSE connection number (device minor)

c_mnt() { echo "$t_dir/$1"; }

# c_pid_done PID: every thread of PID has exited (a zombie whose other
# threads are stuck in the kernel is not done: wait would block).
c_pid_done() {
	local t st
	[ -d "/proc/$1" ] || return 0
	for t in /proc/"$1"/task/*; do
		st=$(awk '{ print $3 }' "$t/stat" 2>/dev/null) || continue
		[ -z "$st" ] || [ "$st" = Z ] || [ "$st" = X ] || return 1
	done
	return 0
}

# c_wait_pid PID SECONDS: wait for our child PID to exit and return its
# exit status; 124 if it is still there after SECONDS.
c_wait_pid() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		c_pid_done "$1" && break
		sleep 0.1
	done
	c_pid_done "$1" || return 124
	wait "$1"
}

c_mkfs() {
	local size=$1 journals=${2:-4}
	t_mkfs "$c_img" "$size" -j "$journals" -t "shoaltest:$(basename "$t_dir" | tr -cd 'a-zA-Z0-9' | head -c 12)"
}

c_start_lockd() {
	local lease=${1:-$C_LEASE} i
	"$T_LOCKD" -f --listen "unix:$c_sock" --lease "$lease" "${C_LOCKD_OPTS[@]}" 2>"$t_dir/lockd.log" &
	c_lockd_pid=$!
	for ((i = 0; i < 100; i++)); do
		[ -S "$c_sock" ] && return 0
		t_pid_alive "$c_lockd_pid" || break
		sleep 0.05
	done
	echo "# shoal-lockd did not start:"
	sed 's/^/#   /' "$t_dir/lockd.log"
	return 1
}

c_mount() {
	local node=$1 opts="lock=shoal:unix:$c_sock,node=$1"
	[ -n "${2:-}" ] && opts+=",$2"
	if ! t_mount_fg "$c_img" "$(c_mnt "$node")" "$t_dir/$node.log" "$opts"; then
		echo "# mount of node $node failed:"
		sed 's/^/#   /' "$t_dir/$node.log"
		return 1
	fi
	[[ " ${c_nodes[*]} " == *" $node "* ]] || c_nodes+=("$node")
	c_mounted[$node]=1
	c_conn[$node]=$(mountpoint -d "$(c_mnt "$node")" | cut -d: -f2)
}

c_setup() {
	local n=$1 size=$2 opts=${3:-} names=(a b c d e f) i
	c_mkfs "$size" "$((n > 3 ? n : 3))"
	c_start_lockd
	for ((i = 0; i < n; i++)); do
		c_mount "${names[$i]}" "$opts"
	done
}

c_stat() { "$T_SHOAL" stat "$(c_mnt "$1")" 2>/dev/null | awk -v k="$2" '$1 == k { print $2 }'; }

# The daemon is our background child (t_mount_fg): after `shoal umount`
# returned, wait for its exit status.
c_umount() {
	local node=$1 mnt pid rc=0
	mnt=$(c_mnt "$node")
	pid=${t_pids[$mnt]:-}
	[ -n "${c_mounted[$node]:-}" ] || return 0
	if ! timeout "$C_UMOUNT_TIMEOUT" "$T_SHOAL" umount "$mnt" 2>"$t_dir/umount.err"; then
		echo "# shoal umount $mnt failed: $(head -1 "$t_dir/umount.err")"
		# Still unmount (plain umount) and wait for the daemon, so the
		# rest of the test and the cleanup are not stuck on it.
		if mountpoint -q "$mnt"; then
			timeout "$C_UMOUNT_TIMEOUT" umount "$mnt" 2>/dev/null || return 1
		fi
		rc=1
	fi
	if [ -n "$pid" ]; then
		local st=0
		c_wait_pid "$pid" "$C_UMOUNT_TIMEOUT" || st=$?
		[ $rc -ne 0 ] || rc=$st
	fi
	t_pids[$mnt]=
	t_fg[$mnt]=
	c_mounted[$node]=
	return $rc
}

c_umount_all() {
	local node rc=0 st
	for node in "${c_nodes[@]}"; do
		st=0
		c_umount "$node" || st=$?
		if [ $st -ne 0 ]; then
			echo "# node $node: unmount or daemon exit status $st"
			rc=1
		fi
	done
	return $rc
}

# c_umount_parallel NODE...: `shoal umount` of every NODE at once (a
# cluster's shutdown), then each daemon's exit status; 0 if all were 0.
c_umount_parallel() {
	local node mnt rc=0 st pids=() nodes=() i
	for node in "$@"; do
		[ -n "${c_mounted[$node]:-}" ] || continue
		mnt=$(c_mnt "$node")
		timeout "$C_UMOUNT_TIMEOUT" "$T_SHOAL" umount "$mnt" 2>"$t_dir/umount-$node.err" &
		pids+=($!)
		nodes+=("$node")
	done
	for i in "${!pids[@]}"; do
		node=${nodes[$i]}
		mnt=$(c_mnt "$node")
		st=0
		wait "${pids[$i]}" || st=$?
		if [ $st -ne 0 ]; then
			echo "# shoal umount $mnt: status $st: $(head -1 "$t_dir/umount-$node.err")"
			mountpoint -q "$mnt" && timeout "$C_UMOUNT_TIMEOUT" umount "$mnt" 2>/dev/null
			rc=1
		fi
		if [ -n "${t_pids[$mnt]:-}" ]; then
			st=0
			c_wait_pid "${t_pids[$mnt]}" "$C_UMOUNT_TIMEOUT" || st=$?
			[ $st -eq 0 ] || { echo "# node $node: daemon exit status $st"; rc=1; }
		fi
		t_pids[$mnt]=
		t_fg[$mnt]=
		c_mounted[$node]=
	done
	return $rc
}

c_stop_lockd() {
	[ -n "$c_lockd_pid" ] || return 0
	kill "$c_lockd_pid" 2>/dev/null
	wait "$c_lockd_pid" 2>/dev/null
	c_lockd_pid=
}

# c_fsck_check [WHAT]: all nodes unmounted first; fsck.shoal -n must be clean.
c_fsck_check() {
	local rc=0 what=${1:-"fsck.shoal -n is clean after every node unmounted"}
	t_fsck "$c_img" >"$t_dir/fsck.out" 2>&1 || rc=$?
	if [ $rc -eq 77 ]; then
		skip "$what: build/fsck.shoal not built"
	else
		check_eq "$what" 0 "$rc"
		[ $rc -eq 0 ] || grep -v '^Pass ' "$t_dir/fsck.out" | head -30 | sed 's/^/#   /'
	fi
}

c_retry_check() {
	local node bad=""
	for node in "${c_nodes[@]}"; do
		grep -q "took no reply" "$t_dir/$node.log" 2>/dev/null && bad="$bad $node"
	done
	check_eq "no node gave up dropping an inode's attributes (now_retry)" "" "$bad"
	[ -z "$bad" ] || grep -h "took no reply" "$t_dir"/*.log | head -5 | sed 's/^/#   /'
}

c_logs() {
	local node
	for node in "${c_nodes[@]}"; do
		echo "# --- log of node $node (last 15 lines)"
		tail -15 "$t_dir/$node.log" 2>/dev/null | sed 's/^/#   /'
	done
	echo "# --- lockd log (last 10 lines)"
	tail -10 "$t_dir/lockd.log" 2>/dev/null | sed 's/^/#   /'
}

c_diag() {
	local node mnt pid t
	for node in "${c_nodes[@]}"; do
		[ -n "${c_mounted[$node]:-}" ] || continue
		mnt=$(c_mnt "$node")
		echo "# --- glocks of node $node (with holders, waiters or requests; H: holders, W: waiters)"
		timeout 10 "$T_SHOAL" glocks "$mnt" 2>&1 | grep -vE ' t:-- .* h:0 w:0 ' | head -40 | sed 's/^/#   /'
		pid=${t_pids[$mnt]:-}
		[ -n "$pid" ] || continue
		echo "# --- kernel stacks of node $node's daemon (pid $pid): threads in D state or in FUSE (not reading requests)"
		for t in /proc/"$pid"/task/*; do
			grep -q fuse_dev_do_read "$t/stack" 2>/dev/null && continue
			[ "$(awk '{ print $3 }' "$t/stat" 2>/dev/null)" = D ] || grep -q fuse "$t/stack" 2>/dev/null || continue
			echo "#   thread ${t##*/} ($(awk '{ print $3 }' "$t/stat" 2>/dev/null)):" \
				"$(head -4 "$t/stack" 2>/dev/null | sed 's/^\[<0>\] //; s/+0x.*//' | tr '\n' ' ')"
		done
		if command -v gdb >/dev/null; then
			echo "# --- threads of node $node (gdb: innermost frame, then shoal's own frames)"
			timeout 20 gdb -p "$pid" -batch -ex 'thread apply all bt 30' 2>/dev/null | c_bt_compact |
				grep -vE 'fuse_session_loop|^[0-9]+: __GI___libc_read$' | head -60 | sed 's/^/#   /'
		fi
	done
}

# gdb's "thread apply all bt" -> one line per thread: LWP, the innermost
# function, then the frames in shoal's sources (absolute paths) outwards.
c_bt_compact() {
	awk '
	function flush() { if (t != "") print t; t = "" }
	/^Thread / { flush(); match($0, /LWP [0-9]+/); t = substr($0, RSTART + 4, RLENGTH - 4) ":"; n = 0; next }
	/^#[0-9]/ {
		fn = ($3 == "in") ? $4 : $2
		if (n == 0 || ($0 ~ / at \/[^ ]*:[0-9]+$/ && $0 !~ / at \/usr\//)) {
			loc = $0; sub(/.* at /, "", loc); sub(/.*\//, "", loc)
			t = t (n == 0 ? " " : " < ") fn ((n == 0 && $0 !~ / at \/[^ ]*:[0-9]+$/) ? "" : "@" loc)
		}
		n++
	}
	END { flush() }'
}

c_abort() {
	local c=${c_conn[$1]:-}
	[ -n "$c" ] || return 0
	[ -d /sys/fs/fuse/connections ] && [ ! -e /sys/fs/fuse/connections/"$c" ] &&
		mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null
	[ -e /sys/fs/fuse/connections/"$c"/abort ] && echo 1 >/sys/fs/fuse/connections/"$c"/abort
	return 0
}

c_cleanup() {
	local rc=$? node mnt pid i
	set +e
	for node in "${c_nodes[@]}"; do
		[ -n "${c_mounted[$node]:-}" ] || continue
		mnt=$(c_mnt "$node")
		pid=${t_pids[$mnt]:-}
		if ! timeout "$C_UMOUNT_TIMEOUT" "$T_SHOAL" umount "$mnt" >/dev/null 2>&1; then
			# A hung node: abort its connection, so nothing waits for it.
			c_abort "$node"
			if mountpoint -q "$mnt"; then
				timeout 20 umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
			fi
			if [ -n "$pid" ]; then
				for ((i = 0; i < 100; i++)); do c_pid_done "$pid" && break; sleep 0.1; done
				c_pid_done "$pid" || kill -9 "$pid" 2>/dev/null
			fi
		fi
		# (a thread stuck in the kernel keeps even a killed daemon)
		[ -z "$pid" ] || c_wait_pid "$pid" 5 2>/dev/null
		t_pids[$mnt]=
		c_mounted[$node]=
	done
	c_stop_lockd
	(exit $rc)
	t_cleanup
}
trap c_cleanup EXIT
