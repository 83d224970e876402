#!/bin/bash
# t_cluster_sqlite.sh - a real program that no one here wrote relies on
# fcntl locks across nodes (issue 20, defect 3): SQLite (Debian's, through
# python3's sqlite3 module), rollback journal mode (SQLite documents WAL as
# unsupported on network filesystems).
#
# SQLITE_PROCS processes on each of two nodes (default 4) each run
# SQLITE_TX transactions (default 60; the issue's full run is 500:
# SQLITE_TX=500) of `BEGIN IMMEDIATE; UPDATE t SET n=n+1; INSERT ...;
# COMMIT` with a busy timeout on one database file.  Then the counter is
# exactly 2 * SQLITE_PROCS * SQLITE_TX, the row count matches, and
# `PRAGMA integrity_check` says ok, read from either node.  The same on one
# node mounted lock=nolock (the kernel's own locks), with all the
# processes on it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

: "${SQLITE_PROCS:=4}"
: "${SQLITE_TX:=60}"

# worker DB TAG: SQLITE_TX transactions, exit status 0 when all committed
worker='
import sqlite3, sys
db, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(db, timeout=120, isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
for i in range(n):
    c.execute("BEGIN IMMEDIATE")
    c.execute("UPDATE t SET n = n + 1")
    c.execute("INSERT INTO r(tag, i) VALUES (?, ?)", (tag, i))
    c.execute("COMMIT")
c.close()
'
setup='
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
c.execute("CREATE TABLE t(n INTEGER)")
c.execute("INSERT INTO t VALUES (0)")
c.execute("CREATE TABLE r(tag TEXT, i INTEGER)")
c.close()
'
report='
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(c.execute("SELECT n FROM t").fetchone()[0], c.execute("SELECT count(*) FROM r").fetchone()[0],
      c.execute("PRAGMA integrity_check").fetchone()[0])
'

# run_workers DIR... : SQLITE_PROCS workers on each DIR's db, at once
run_workers() {
	local pids=() d p k rc=0 t0
	t0=$(date +%s.%N)
	for d in "$@"; do
		for ((k = 0; k < SQLITE_PROCS; k++)); do
			"$T_PY" -c "$worker" "$d/db" "$(basename "$d")$k" "$SQLITE_TX" \
				2>>"$t_dir/workers.err" &
			pids+=($!)
		done
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	echo "# ${#pids[@]} processes x $SQLITE_TX transactions: $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }") s"
	return $rc
}

c_mkfs 256M 3
c_start_lockd
c_mount a
c_mount b
A=$(c_mnt a)
B=$(c_mnt b)
"$T_PY" -c "$setup" "$A/db"
check "every worker on a and b committed all its transactions" run_workers "$A" "$B"
[ -s "$t_dir/workers.err" ] && sed 's/^/#   /' "$t_dir/workers.err" | head -5
want=$((2 * SQLITE_PROCS * SQLITE_TX))
check_eq "two nodes: counter, rows and integrity_check, read on a" "$want $want ok" \
	"$("$T_PY" -c "$report" "$A/db")"
check_eq "the same read on b" "$want $want ok" "$("$T_PY" -c "$report" "$B/db")"
check "every node unmounts cleanly" c_umount_all
c_stop_lockd
c_fsck_check

# one node, lock=nolock: the kernel's own locks, as on ext4
rm -f "$t_dir/workers.err"
N=$t_dir/n
t_mkfs "$t_dir/img1" 256M
t_mount "$t_dir/img1" "$N" "lock=nolock"
"$T_PY" -c "$setup" "$N/db"
SQLITE_PROCS=$((2 * SQLITE_PROCS)) run_workers "$N" || not_ok "nolock: a worker failed"
want=$((2 * SQLITE_PROCS * SQLITE_TX))
check_eq "one node, lock=nolock: counter, rows and integrity_check" "$want $want ok" \
	"$("$T_PY" -c "$report" "$N/db")"
t_umount_fsck "$N" "$t_dir/img1"
[ $t_failed -eq 0 ] || c_logs
t_done
