#!/usr/bin/env bash
# t_atime_r1.sh - R1 (issue 4): reads never take an exclusive lock, shown
# the way seeds/000 shows it: find the file's inode number with stat,
# `shoal trace MNT "gltype == 2 && glnum == INO"` on every node, mmap and
# read the file, and see no request for EX and no callback.
#
# Three nodes (a, b, c) mounted afresh for each atime source (so every
# glock starts UN, step 2 of the seed's procedure), reading one file at the
# same moment: open (O_NOATIME where that is the source), pread, drop the
# file's page cache now and then (POSIX_FADV_DONTNEED, so reads and page
# faults reach shoal again), mmap read-only, copy 10 KiB ranges, munmap,
# close, fstat; readdir of the directory and readlink on the way.  Sources:
#   noatime     the mount option
#   chattr +A   the file's own flag (relatime mount)
#   O_NOATIME   the readers' open flag (relatime mount)
#   newer       relatime with an atime already newer than mtime and ctime
#   due         relatime, atime older than mtime: an update is due
#   strict      strictatime: every read that reaches shoal updates atime
# For each file and node: the trace shows the first grant (UN -> SH), no
# request for or grant of EX and no callback until every node's reads are
# done; `shoal glstats` agrees (ex:0 cb:0); atime as stat shows it is as
# docs/LOCKING.md "atime" says: unchanged for the first four; for due and
# strict each node shows its own read's time at once (kept in memory, the
# glock being only SH), relatime does not move it again, strictatime does
# on the next read that reaches shoal but not on one the page cache
# serves; the last node to unmount writes its kept time (a try-lock EX,
# nobody else left), which the next mount finds on disk.  A write on one
# node then shows the callbacks and the EX request in the same traces (the
# test can see what it looks for).  Also: a bad filter is exit 2, `shoal
# glocks` shows holders, a trace ends with "# end" and exit 0 when its
# mount goes away.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

NODES=(a b c)
ITERS=${ITERS:-40}
declare -A tr_pid # node -> pid of its `shoal trace`

c_mkfs 1G 3
c_start_lockd

mount_all() { # OPTS
	local n
	c_nodes=()
	for n in "${NODES[@]}"; do c_mount "$n" "$1" || return 1; done
}

# atns PATH: atime in ns as stat shows it
atns() { "$T_PY" -c 'import os, sys; print(os.stat(sys.argv[1]).st_atime_ns)' "$1"; }

# tr_start NODE OUT FILTER: `shoal trace` of NODE into OUT, in the
# background; returns once the daemon says the subscription is in place.
tr_start() {
	local i
	"$T_SHOAL" trace "$(c_mnt "$1")" "$3" >"$2" 2>"$2.err" &
	tr_pid[$1]=$!
	for ((i = 0; i < 300; i++)); do
		grep -q '^# tracing' "$2" 2>/dev/null && return 0
		kill -0 "${tr_pid[$1]}" 2>/dev/null || break
		sleep 0.1
	done
	echo "# shoal trace on node $1 did not start: $(cat "$2.err")"
	return 1
}

# tr_flush NODE OUT SENTINEL: stat SENTINEL (a path under the mounts)
# through NODE, its first use there (a request and a grant of its glock),
# and wait until that shows in OUT: every earlier event of NODE has been
# delivered by then (one subscriber's events arrive in order).
tr_flush() {
	local i ino=${inos[$3]}
	"$T_PY" -c 'import os, sys; os.stat(sys.argv[1])' "$(c_mnt "$1")/$3"
	for ((i = 0; i < 300; i++)); do
		grep -q " 2/$ino prev:UN new:SH " "$2" && return 0
		sleep 0.1
	done
	echo "# node $1: the trace never showed the grant of $3 (2/$ino)"
	return 1
}

# wait_grep REGEX FILE: until FILE has a line matching REGEX (at most 30 s)
wait_grep() {
	local i
	for ((i = 0; i < 300; i++)); do
		grep -qE "$1" "$2" && return 0
		sleep 0.1
	done
	return 1
}

tr_stop() {
	local n
	for n in "${!tr_pid[@]}"; do
		kill "${tr_pid[$n]}" 2>/dev/null || true
		wait "${tr_pid[$n]}" 2>/dev/null || true
	done
	tr_pid=()
}

# The reader one node runs: waits for every node's reader (a barrier in
# DIR), then ITERS rounds over the files.  Prints OK or what failed.
cat >"$t_dir/reader.py" <<'EOF'
import os, sys, mmap, random, time
node, bar, nnodes, iters, noatime = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
paths = sys.argv[6:]
open(os.path.join(bar, "ready." + node), "w").close()
end = time.time() + 120
while sum(1 for f in os.listdir(bar) if f.startswith("ready.")) < nnodes:
    if time.time() > end:
        sys.exit("barrier: the other readers never came")
    time.sleep(0.01)
rnd = random.Random(node)
flags = os.O_RDONLY | (os.O_NOATIME if noatime else 0)
d = os.path.dirname(paths[0])
for it in range(iters):
    for p in paths:
        fd = os.open(p, flags)
        size = os.fstat(fd).st_size
        if it % 3 == 0:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if len(os.pread(fd, 65536, rnd.randrange(0, size - 65536))) != 65536:
            sys.exit("short pread of " + p)
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        for _ in range(4):
            o = rnd.randrange(0, size - 10240)
            if len(m[o:o + 10240]) != 10240:
                sys.exit("short mmap copy of " + p)
        m.close()
        os.fstat(fd)
        os.close(fd)
    os.listdir(d)
    os.readlink(os.path.join(d, "link"))
print("OK")
EOF

# run_readers SESSION NOATIME FILE...: the three readers at once.
run_readers() {
	local s=$1 noat=$2 n rc=0 paths
	shift 2
	mkdir -p "$t_dir/bar.$s"
	declare -A pid=()
	for n in "${NODES[@]}"; do
		paths=()
		for f in "$@"; do paths+=("$(c_mnt "$n")/$s/$f"); done
		"$T_PY" "$t_dir/reader.py" "$n" "$t_dir/bar.$s" "${#NODES[@]}" "$ITERS" "$noat" \
			"${paths[@]}" >"$t_dir/reader.$s.$n" 2>&1 &
		pid[$n]=$!
	done
	for n in "${NODES[@]}"; do
		wait "${pid[$n]}" || rc=1
		check_eq "$s: node $n read and mmapped ${*} concurrently with the others" OK \
			"$(tail -1 "$t_dir/reader.$s.$n")"
	done
	return $rc
}

# tr_check SESSION NODE OUT FILE: the events of FILE in NODE's trace, up to
# the sentinel: at least the first grant, never EX, never a callback.
tr_check() {
	local s=$1 n=$2 out=$3 f=$4 ino=${inos[$1/$4]} sent=${inos[$1/sentinel]} ev grant ex cb
	# the lines before the sentinel's first event, then those of FILE
	ev=$(awk -v s=" 2/$sent " 'index($0, s) { exit } { print }' "$out" | grep " 2/$ino " || true)
	grant=$(grep -c '^[^ ]* state *2/[0-9]* prev:UN new:SH' <<<"$ev" || true)
	ex=$(grep -cE '^[^ ]* (request|state) .*(new|target):EX' <<<"$ev" || true)
	cb=$(grep -c '^[^ ]* callback ' <<<"$ev" || true)
	check "$s: node $n's trace of $f (2/$ino) shows its first grant UN -> SH" [ "$grant" -ge 1 ]
	check_eq "$s: node $n's trace of $f: requests for or grants of EX" 0 "$ex"
	check_eq "$s: node $n's trace of $f: callbacks" 0 "$cb"
	if [ "$ex" != 0 ] || [ "$cb" != 0 ]; then
		grep -E 'EX|callback' <<<"$ev" | head -5 | sed 's/^/#   /'
	fi
	# the counters say the same
	local g
	g=$("$T_SHOAL" glstats "$(c_mnt "$n")" "gltype == 2 && glnum == $ino" | grep '^G: ')
	check_eq "$s: node $n's glstats of $f: EX requests, callbacks" "ex:0 cb:0" \
		"$(grep -oE 'ex:[0-9]+' <<<"$g") $(grep -oE 'cb:[0-9]+' <<<"$g")"
}

# session NAME MOUNTOPTS NOATIME FILE...: mount the three nodes, trace
# NAME/FILE... and NAME's two sentinels on each, run the readers, wait for
# every trace to show the first sentinel, check the traces.  The traces go
# on (tr_stop ends them).
session() {
	local s=$1 opts=$2 noat=$3 n f filter
	shift 3
	mount_all "$opts" || return 1
	filter=""
	for f in "$@" sentinel sentinel2; do
		filter+="${filter:+ || }glnum == ${inos[$s/$f]} && gltype == 2"
	done
	for n in "${NODES[@]}"; do tr_start "$n" "$t_dir/trace.$s.$n" "$filter" || return 1; done
	run_readers "$s" "$noat" "$@"
	for n in "${NODES[@]}"; do tr_flush "$n" "$t_dir/trace.$s.$n" "$s/sentinel" || return 1; done
	for n in "${NODES[@]}"; do
		for f in "$@"; do tr_check "$s" "$n" "$t_dir/trace.$s.$n" "$f"; done
	done
}

# reread NODE PATH [cached]: one 4 KiB read through NODE that reaches shoal
# (the file's page cache dropped first), or with "cached" one the page
# cache serves (the same page read twice, the second time is measured).
reread() {
	"$T_PY" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.pread(fd, 4096, 0)
if len(sys.argv) > 2:
    print(os.stat(sys.argv[1]).st_atime_ns)
    os.pread(fd, 4096, 0)
os.close(fd)' "$(c_mnt "$1")/$2" ${3:+cached}
}

# --- the files, made on node a ---------------------------------------------------------------

mount_all "" || exit 1
A=$(c_mnt a)
for s in noatime relatime onoatime strict; do
	mkdir "$A/$s"
	: >"$A/$s/sentinel"
	: >"$A/$s/sentinel2"
	ln -s sentinel "$A/$s/link"
done
files=(noatime/f relatime/chattr relatime/newer relatime/due onoatime/f strict/f)
for f in "${files[@]}"; do
	head -c $((4 << 20)) /dev/urandom >"$A/$f"
done
chattr +A "$A/relatime/chattr"
check "chattr +A is set on relatime/chattr" bash -c "lsattr '$A/relatime/chattr' | awk '{ print \$1 }' | grep -q A"
touch -a -d "@$(($(date +%s) + 3600))" "$A/relatime/newer"
declare -A at0 inos # (the inode numbers, learnt now: a stat later would take a glock)
for f in "${files[@]}"; do at0[$f]=$(atns "$A/$f"); done
for s in noatime relatime onoatime strict; do
	for f in sentinel sentinel2; do inos[$s/$f]=$(stat -c %i "$A/$s/$f"); done
done
for f in "${files[@]}"; do inos[$f]=$(stat -c %i "$A/$f"); done
check "relatime/due: atime not after mtime (an update is due)" \
	[ "${at0[relatime/due]}" -le "$("$T_PY" -c 'import os, sys; print(os.stat(sys.argv[1]).st_mtime_ns)' "$A/relatime/due")" ]
check "relatime/newer: atime after mtime and ctime" \
	"$T_PY" -c 'import os, sys; s = os.stat(sys.argv[1]); sys.exit(not (s.st_atime_ns > s.st_mtime_ns and s.st_atime_ns > s.st_ctime_ns))' "$A/relatime/newer"

# the tools: a bad filter, holders in the dump, per-type statistics
rc=0
"$T_SHOAL" trace "$A" 'gltype = 2' >/dev/null 2>"$t_dir/bad.err" || rc=$?
check_eq "shoal trace with a bad filter: exit 2" 2 "$rc"
check "... and it says where and why (column 8: unknown operator '=')" \
	grep -q "column 8: unknown operator '='" "$t_dir/bad.err"
rc=0
"$T_SHOAL" glstats "$A" 'glnum == 12ab' >/dev/null 2>&1 || rc=$?
check_eq "shoal glstats with a bad filter: exit 2" 2 "$rc"
check "shoal glocks: the journal glock with its holder (H:, thread and pid)" \
	bash -c "'$T_SHOAL' glocks '$A' 'gltype == 9' | grep -A1 '^G: s:EX n:9/.* f:S ' | grep -qE '^ H: s:EX f:HA tid:[0-9]+ pid:[0-9]+ age:[0-9]+ms'"
check "shoal glstats: per-type totals for inode glocks, then one line per glock" \
	bash -c "'$T_SHOAL' glstats '$A' | grep -q '^T: type:2 inode glocks:[1-9]' && '$T_SHOAL' glstats '$A' | grep -q '^G: n:2/'"
tr_start c "$t_dir/trace.end" "" || exit 1
c_umount_all
rc=0
wait "${tr_pid[c]}" || rc=$?
tr_pid=()
check_eq "a trace ends with exit 0 when its mount goes away" 0 "$rc"
check_eq "... and its last line says so" "# end" "$(tail -1 "$t_dir/trace.end" | cut -c1-5)"

# --- noatime (the mount option) ---------------------------------------------------------------

session noatime noatime 0 f || exit 1
for n in "${NODES[@]}"; do
	check_eq "noatime: atime on node $n unchanged" "${at0[noatime/f]}" "$(atns "$(c_mnt "$n")/noatime/f")"
done
tr_stop
c_umount_all

# --- relatime: chattr +A, an atime newer than mtime, and an update due -----------------------------

session relatime "" 0 chattr newer due || exit 1
for f in chattr newer; do
	for n in "${NODES[@]}"; do
		check_eq "relatime/$f: atime on node $n unchanged" "${at0[relatime/$f]}" \
			"$(atns "$(c_mnt "$n")/relatime/$f")"
	done
done
declare -A at_due
for n in "${NODES[@]}"; do
	at_due[$n]=$(atns "$(c_mnt "$n")/relatime/due")
	check "relatime/due: node $n shows its read's atime at once (kept in memory under SH)" \
		[ "${at_due[$n]}" -gt "${at0[relatime/due]}" ]
done
check "relatime/due: each node shows its own (a and b differ)" [ "${at_due[a]}" != "${at_due[b]}" ]
reread a relatime/due
check_eq "relatime/due: another read on node a that reaches shoal leaves it (not due again)" \
	"${at_due[a]}" "$(atns "$(c_mnt a)/relatime/due")"
check "node a counted kept atime updates (atime_deferred)" [ "$(c_stat a atime_deferred)" -ge 1 ]
check_eq "... and wrote none (atime_written)" 0 "$(c_stat a atime_written)"
tr_stop
c_umount_all # a, b, then c: the last one alone gets EX with its try-lock

# --- O_NOATIME (the readers' open flag, relatime mount) ---------------------------------------

session onoatime "" 1 f || exit 1
for n in "${NODES[@]}"; do
	check_eq "O_NOATIME: atime on node $n unchanged" "${at0[onoatime/f]}" "$(atns "$(c_mnt "$n")/onoatime/f")"
done
check_eq "relatime/due on disk after the unmounts: the time the last node (c) kept" \
	"${at_due[c]}" "$(atns "$(c_mnt a)/relatime/due")"
tr_stop
c_umount_all

# --- strictatime --------------------------------------------------------------------------

session strict strictatime 0 f || exit 1
declare -A at_s
for n in "${NODES[@]}"; do
	at_s[$n]=$(atns "$(c_mnt "$n")/strict/f")
	check "strictatime: node $n shows its read's atime at once (kept in memory under SH)" \
		[ "${at_s[$n]}" -gt "${at0[strict/f]}" ]
done
reread a strict/f
t1=$(atns "$(c_mnt a)/strict/f")
check "strictatime: another read on node a that reaches shoal moves it again" [ "$t1" -gt "${at_s[a]}" ]
t2=$(reread a strict/f cached)
check "... a read the page cache serves does not (it never reaches shoal)" \
	[ "$(atns "$(c_mnt a)/strict/f")" = "$t2" ]
for n in b c; do
	check_eq "strictatime: node a's reads do not move node $n's atime" "${at_s[$n]}" \
		"$(atns "$(c_mnt "$n")/strict/f")"
done
# the reads above made no lock traffic either
sent2=${inos[strict/sentinel2]}
ino=${inos[strict/f]}
for n in "${NODES[@]}"; do tr_flush "$n" "$t_dir/trace.strict.$n" strict/sentinel2 || exit 1; done
for n in "${NODES[@]}"; do
	check_eq "strictatime: node $n's trace of f until the second sentinel: EX or callbacks" 0 \
		"$(awk -v s=" 2/$sent2 " 'index($0, s) { exit } { print }' "$t_dir/trace.strict.$n" |
			grep " 2/$ino " | grep -cE ' callback |(new|target):EX' || true)"
done

# the control: a write on node a does show in the same traces
echo x >>"$(c_mnt a)/strict/f"
for n in b c; do stat "$(c_mnt "$n")/strict/f" >/dev/null; done
check "control: a write on node a shows its request for EX in a's trace" \
	wait_grep "^[^ ]* request  2/$ino prev:SH new:-- target:EX " "$t_dir/trace.strict.a"
for n in b c; do
	check "control: ... and a callback in node $n's trace" \
		wait_grep "^[^ ]* callback 2/$ino prev:SH new:SH target:EX " "$t_dir/trace.strict.$n"
done
tr_stop
c_umount_all || not_ok "every node unmounted cleanly"
c_fsck_check
t_done
