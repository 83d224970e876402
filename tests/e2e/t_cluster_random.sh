#!/usr/bin/env bash
# t_cluster_random.sh - randomized multi-node coherence test: three nodes
# (a, b, c) of one image, CLUSTER_RANDOM_PER_NODE (3) worker processes per
# node, each running random operations (create, write, append, read,
# truncate, rename and RENAME_EXCHANGE, unlink, mkdir, rmdir, link,
# symlink, chmod, setxattr, removexattr, stat, readdir) on a small shared
# tree through its node's mountpoint for CLUSTER_RANDOM_SECONDS (40), every
# operation logged with its start and end time.  cluster_random.py then
# checks every result against what one filesystem allows (its docstring
# has the model: no stale data, sizes, names, modes or xattrs; no error but
# those a race explains), that the tree is identical on every node at the
# end, and fsck.shoal -n is clean after unmount.  A hang fails the test
# (glocks and daemon stacks printed) instead of blocking.
#
# The seed is fixed (CLUSTER_RANDOM_SEED, default 1) and printed; the
# interleaving still differs from run to run.  The logs are kept with
# E2E_KEEP=1 (in $t_dir/log).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

: "${CLUSTER_RANDOM_SEED:=1}"
: "${CLUSTER_RANDOM_SECONDS:=40}"
: "${CLUSTER_RANDOM_PER_NODE:=3}"
prog=$(dirname "$0")/cluster_random.py
log=$t_dir/log
mkdir -p "$log"

c_setup 3 1G
mnts=("$(c_mnt a)" "$(c_mnt b)" "$(c_mnt c)")
echo "# seed $CLUSTER_RANDOM_SEED (rerun: CLUSTER_RANDOM_SEED=$CLUSTER_RANDOM_SEED bash $0)"

# worker_stacks: where the workers of a hung run are in the kernel.
worker_stacks() {
	local p
	[ -s "$log/pids" ] || return 0
	echo "# --- kernel stacks of the workers (w0 a, w1 b, w2 c, w3 a, ...)"
	for p in $(cat "$log/pids"); do
		[ -d "/proc/$p" ] || continue
		echo "#   $p ($(awk '{ print $3 }' "/proc/$p/stat")): $(head -6 "/proc/$p/stack" 2>/dev/null |
			sed 's/^\[<0>\] //; s/+0x.*//' | tr '\n' ' ')"
	done
}

# kill_workers: the workers of a hung run, by the pids it wrote.
kill_workers() {
	local p
	[ -s "$log/pids" ] || return 0
	for p in $(cat "$log/pids"); do
		kill -9 "$p" 2>/dev/null || true
	done
}

rc=0
timeout -k 10 $((CLUSTER_RANDOM_SECONDS + 100)) "$T_PY" "$prog" run --log "$log" \
	--seed "$CLUSTER_RANDOM_SEED" --duration "$CLUSTER_RANDOM_SECONDS" \
	--per-node "$CLUSTER_RANDOM_PER_NODE" "${mnts[@]}" || rc=$?
if [ $rc -eq 3 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	not_ok "random operations on a, b, c: a worker hung (exit $rc)"
	worker_stacks
	c_diag
	for node in a b c; do c_abort "$node"; done
	kill_workers
	c_logs
	t_done
	exit 1
fi
check_eq "random operations on a, b and c for ${CLUSTER_RANDOM_SECONDS} s: every worker finished" 0 "$rc"

rc=0
timeout -k 10 90 "$T_PY" "$prog" final --log "$log" "${mnts[@]}" >"$t_dir/final.out" 2>&1 || rc=$?
cat "$t_dir/final.out"
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	not_ok "walking the final tree on a, b, c hung"
	c_diag
	for node in a b c; do c_abort "$node"; done
	c_logs
	t_done
	exit 1
fi
check_eq "the final tree (names, inodes, modes, links, sizes, times, contents, xattrs) is identical on a, b and c" 0 "$rc"

rc=0
timeout 120 "$T_PY" "$prog" check --log "$log" >"$t_dir/check.out" 2>&1 || rc=$?
grep -v '^ERROR' "$t_dir/check.out" || true
grep '^ERROR' "$t_dir/check.out" | head -40 | sed 's/^/# /' || true
check_eq "every result is one a single filesystem allows (no stale data, size, name, mode or xattr; no EIO/ESTALE)" 0 "$rc"

# The run must have done enough to mean something.
stat_of() { "$T_PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], 0))' "$log/stats.json" "$1"; }
if [ -s "$log/stats.json" ]; then
	n_ops=$(stat_of ops)
	n_must=$(stat_of "tags that must be there")
	n_names=$(stat_of "name observations checked")
	# (about 10000, 800, 10000 in 40 s on 2 cores; a sanitizer build or a
	# loaded machine does less)
	check "at least 1000 operations ($n_ops), 150 tags that had to be read ($n_must), 1000 name observations ($n_names) checked" \
		test "$n_ops" -ge 1000 -a "$n_must" -ge 150 -a "$n_names" -ge 1000
fi

check_eq "no node fenced itself or failed (logs)" "" \
	"$(grep -hiE 'fenced|abort|assert|error|corrupt' "$t_dir"/[abc].log | head -5)"
check "shoal umount of a, b and c (each daemon exits 0)" c_umount_all
c_fsck_check
c_retry_check
[ "$t_failed" -eq 0 ] || c_logs
t_done
