#!/usr/bin/env bash
# t_cluster_soak.sh - the multi-node soak of issue 22 (a crash-label test:
# the normal build only, it loads both CPUs for a minute): 4 nodes run a mixed
# workload at once (tests/crash/soak_work.py: small files made, fsync'ed,
# renamed and unlinked in each node's own directory; 64 KiB appends to two
# big files per node and truncates of them to 0; uniquely named files in
# one shared directory; 64-byte O_APPEND records to one shared log).
# It fails on any operation slower than 30 s, a worker that does not
# finish, a file or log record that reads back wrong, any of the 4
# unmounts (all at once) slower than 10 s, or fsck finding anything
# (orphans included).
#
# SOAK_SECONDS (default 60), SOAK_NODES (default 4), SOAK_SEED (default:
# random, printed).  Before issue 22's fixes the truncates never returned
# and the unmounts hung; before issue 20's O_APPEND fix the shared log
# lost records.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../e2e/lib_cluster.sh"

: "${SOAK_SECONDS:=60}"
: "${SOAK_NODES:=4}"
: "${SOAK_SEED:=$RANDOM}"
echo "# seed $SOAK_SEED, $SOAK_NODES nodes, $SOAK_SECONDS s (rerun: SOAK_SEED=$SOAK_SEED)"
nodes=(a b c d e f g h)
nodes=("${nodes[@]:0:$SOAK_NODES}")
work=$SHOAL_SRC/tests/crash/soak_work.py
mkdir -p "$t_dir/state"

c_mkfs 2G "$SOAK_NODES"
c_start_lockd
for n in "${nodes[@]}"; do c_mount "$n"; done
# the shared directory, made once
mkdir "$(c_mnt a)/shared"

declare -A wpid
i=0
for n in "${nodes[@]}"; do
	"$T_PY" "$work" run "$n" "$(c_mnt "$n")" "$SOAK_SECONDS" "$((SOAK_SEED * 10 + i))" \
		"$t_dir/state/$n.json" 2>"$t_dir/work-$n.err" &
	wpid[$n]=$!
	i=$((i + 1))
done
hung=
for n in "${nodes[@]}"; do
	if ! c_wait_pid "${wpid[$n]}" "$((SOAK_SECONDS + 60))"; then
		[ -d "/proc/${wpid[$n]}" ] && hung+=" $n"
	fi
done
check_eq "every worker finished within $SOAK_SECONDS + 60 s" "" "$hung"
if [ -n "$hung" ]; then
	c_diag
	for n in $hung; do kill -9 "${wpid[$n]}" 2>/dev/null; done
fi
for n in "${nodes[@]}"; do
	check "node $n's worker ran without an error" [ ! -s "$t_dir/work-$n.err" ]
	[ ! -s "$t_dir/work-$n.err" ] || tail -5 "$t_dir/work-$n.err" | sed 's/^/#   /'
done
for n in "${nodes[@]}"; do
	[ -f "$t_dir/state/$n.json" ] || continue
	read -r ops slow slowop < <("$T_PY" -c 'import json, sys
s = json.load(open(sys.argv[1]))
print(s["ops"], "%.3f" % s["slowest"][0], s["slowest"][1])' "$t_dir/state/$n.json")
	echo "# node $n: $ops operations, slowest $slow s ($slowop)"
	check "node $n: no operation slower than 30 s" awk -v s="$slow" 'BEGIN { exit !(s < 30) }'
done

# everything as its node left it, seen from two nodes
for n in a "${nodes[-1]}"; do
	rc=0
	"$T_PY" "$work" check "$t_dir/state" "$(c_mnt "$n")" >"$t_dir/check-$n.out" 2>&1 || rc=$?
	check_eq "node $n reads every file and log record as the nodes left them" 0 "$rc"
	[ $rc -eq 0 ] || head -10 "$t_dir/check-$n.out" | sed 's/^/#   /'
done

# all unmounts at once, each within 10 s
for n in "${nodes[@]}"; do
	(
		s=$(date +%s%N)
		timeout 60 "$T_SHOAL" umount "$(c_mnt "$n")" 2>"$t_dir/umount-$n.err"
		echo "$? $(( ($(date +%s%N) - s) / 1000000 ))" >"$t_dir/umount-$n.rc"
	) &
done
wait_ok=1
for n in "${nodes[@]}"; do
	for ((k = 0; k < 700; k++)); do [ -s "$t_dir/umount-$n.rc" ] && break; sleep 0.1; done
	read -r rc ms <"$t_dir/umount-$n.rc" 2>/dev/null || { rc=none; ms=none; }
	echo "# node $n: shoal umount exit $rc after $ms ms"
	check "node $n: shoal umount, all at once, exits 0 within 10 s" \
		[ "$rc" = 0 ] && [ "$ms" != none ] && [ "$ms" -le 10000 ]
	pid=${t_pids[$(c_mnt "$n")]:-}
	[ -z "$pid" ] || c_wait_pid "$pid" 10 || wait_ok=0
	t_pids[$(c_mnt "$n")]=
	c_mounted[$n]=
done
check "every daemon exited" [ $wait_ok = 1 ]
c_stop_lockd
c_fsck_check "fsck.shoal -n is clean (no orphan left) after every node unmounted"
[ $t_failed -eq 0 ] || c_logs
t_done
