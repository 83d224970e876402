#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through
# CTest: first the unit, end-to-end and fuzz tests built with AddressSanitizer +
# UndefinedBehaviorSanitizer, then the lock manager's and the in-process
# cluster unit tests built with ThreadSanitizer, then everything (unit, e2e, crash) in the
# normal build (the crash tests alone: they time leases and load both
# CPUs).  CTest's summary lines end the output.
set -euo pipefail
. "$(dirname "$0")/deps.sh"
shoal_install_deps
cd "$shoal_top"
jobs=$(nproc)

echo "== sanitizer build (ASan + UBSan): unit, e2e and fuzz tests"
shoal_build build-asan -DSHOAL_SANITIZE=ON -DSHOAL_WERROR=ON
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan -L 'unit|e2e|fuzz' --output-on-failure -j"$jobs"
unset ASAN_OPTIONS UBSAN_OPTIONS

echo "== ThreadSanitizer build: the lock manager's unit tests (shoal-lockd's server and client in one process) and the in-process clusters (several nodes and a lockd in one process)"
cmake -S "$shoal_top" -B "$shoal_top/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHOAL_TSAN=ON \
	-DSHOAL_WERROR=ON >/dev/null
cmake --build "$shoal_top/build-tsan" -j"$jobs" --target test_lockd test_lockd_seal test_plock test_cluster test_cluster_crash
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	ctest --test-dir build-tsan -R '^unit/(test_lockd|test_lockd_seal|test_plock|test_cluster|test_cluster_crash)$' --output-on-failure

echo "== normal build: every test (unit and e2e two at a time, then crash one by one)"
shoal_build build -DSHOAL_WERROR=ON
rc=0
ctest --test-dir build -L 'unit|e2e|fuzz' --output-on-failure -j"$jobs" || rc=$?
ctest --test-dir build -L crash --output-on-failure || rc=$?
exit $rc
