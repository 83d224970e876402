#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through
# CTest: first the unit, end-to-end and fuzz tests built with AddressSanitizer +
# UndefinedBehaviorSanitizer, then everything (unit, e2e, crash) in the
# normal build.  CTest's summary line ends the output.
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

echo "== normal build: every test"
shoal_build build -DSHOAL_WERROR=ON
ctest --test-dir build --output-on-failure
