#!/usr/bin/env bash
# Runs the whole test suite under the thread sanitizer and fails on any reported race:
#
#   Tests/tsan.sh [SWIFT_TEST_ARG...]     e.g. Tests/tsan.sh --filter RPCTransportTests
#
# Builds in .build-tsan (the normal .build is untouched). The tests start the real rpcd and
# rpcbench, built with -sanitize=thread too, so every process writes its reports to one
# directory (TSAN_OPTIONS log_path); any report there, or a failed test, fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
# halt_on_error=0: finish the run and report every race, not only the first.
export TSAN_OPTIONS="log_path=$reports/tsan halt_on_error=0 ${TSAN_OPTIONS:-}"
# Sanitized binaries run several times slower: the tests' waits for a daemon to start and their
# whole-test time limits scale by this (Tests/Support/TestPace.swift); other timing stays as it is.
export RPCD_TEST_SLOWDOWN="${RPCD_TEST_SLOWDOWN:-4}"
# The nemesis test's races are in its first seconds as much as its last: a shorter run here.
export RPCD_NEMESIS_SECONDS="${RPCD_NEMESIS_SECONDS:-20}"
# The Swift backtracer would also catch a crash; leave crash reports to the sanitizer.
export SWIFT_BACKTRACE=enable=no

started=$(date +%s)
status=0
swift test --sanitize=thread --build-path .build-tsan "$@" || status=$?
elapsed=$(( $(date +%s) - started ))

races=0
for report in "$reports"/tsan*; do
    [ -f "$report" ] || continue
    count=$(grep -c '^WARNING: ThreadSanitizer' "$report" || true)
    races=$((races + count))
    echo "== $report ($count reports)"
    cat "$report"
done
echo "tsan: $races reports, swift test exited $status, ${elapsed} s"
if [ "$races" -gt 0 ] || [ "$status" -ne 0 ]; then
    exit 1
fi
