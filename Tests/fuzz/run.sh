#!/usr/bin/env bash
# Fuzzes one target (or all) with libFuzzer for SECONDS each:
#
#   Tests/fuzz/run.sh TARGET SECONDS [LIBFUZZER_FLAG...]    TARGET: framer, decoder, dispatcher, journal
#   Tests/fuzz/run.sh all SECONDS                           each target in turn, one process at a time
#
# For each target: build it with -sanitize=fuzzer,address (release, in .build-fuzz, so the normal
# build is untouched); replay every committed crasher in Tests/fuzz/crashers/TARGET (one that still
# crashes fails the target and it is not fuzzed: the fuzzer would only find it again); then fuzz for
# SECONDS in a temporary corpus seeded from Tests/fuzz/corpus/TARGET (what it grows is not kept).
# A crash, leak, timeout or out-of-memory input is copied to Tests/fuzz/crashers/TARGET/ and the
# target fails. Prints one line per target with executions, executions per second and crashes.
# Exit status: 0 when every target passed, 1 when any crashed, 2 on a usage or build error.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
    echo "usage: Tests/fuzz/run.sh framer|decoder|dispatcher|journal|all SECONDS [LIBFUZZER_FLAG...]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
target=$1
seconds=$2
shift 2
[[ $seconds =~ ^[0-9]+$ ]] || usage
all_targets=(framer decoder dispatcher journal)

product() {
    case $1 in
        framer) echo FuzzFramer ;;
        decoder) echo FuzzDecoder ;;
        dispatcher) echo FuzzDispatcher ;;
        journal) echo FuzzJournal ;;
        *) return 1 ;;
    esac
}

# A libFuzzer dictionary of JSON and envelope tokens for the targets that read JSON.
dictionary() {
    case $1 in
        framer) ;;
        *) echo "-dict=Tests/fuzz/dict/json.dict" ;;
    esac
}

if [ "$target" = all ]; then
    targets=("${all_targets[@]}")
else
    product "$target" >/dev/null || usage
    targets=("$target")
fi

build_path=.build-fuzz
# lld: gold fails to link libFuzzer's main beside SwiftPM's `--defsym main=<module>_main`.
build_flags=(-c release --build-path "$build_path"
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -use-ld=lld)
# The Swift runtime's backtracer and libFuzzer both catch the crash signal; with both, the
# backtracer can outlive the process and hold its output open. libFuzzer's own report (via
# llvm-symbolizer) names the Swift runtime failure and the frames.
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# The failure and the first frames of the project's code (not libFuzzer's or libc's) of a crash report.
summarize() {
    grep -E 'Fatal error|ERROR: |SUMMARY|^ *#[0-9]+ .* in .*(Swift runtime failure|/Sources/|/Tests/fuzz/)' "$1" \
        | grep -vE '^ *#.*(FuzzSupport|_main |\$main)' | head -n 12 | swift demangle --simplified | cut -c1-300 | sed 's/^/    /' || true
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=0
for t in "${targets[@]}"; do
    name=$(product "$t")
    echo "== fuzz $t ($name): building"
    if ! swift build "${build_flags[@]}" --product "$name" >"$work/build.log" 2>&1; then
        cat "$work/build.log" >&2
        echo "fuzz $t: the build failed" >&2
        exit 2
    fi
    binary="$build_path/release/$name"
    crashers=Tests/fuzz/crashers/$t
    mkdir -p "$crashers"

    # Regression: every committed crasher must run clean now.
    still=0
    replayed=0
    for input in "$crashers"/*; do
        [ -f "$input" ] || continue
        replayed=$((replayed + 1))
        if ! "$binary" "$input" >"$work/replay.log" 2>&1; then
            still=$((still + 1))
            echo "fuzz $t: crasher $input still crashes:"
            summarize "$work/replay.log"
        fi
    done
    echo "fuzz $t: $replayed committed crashers replayed, $still still crash"
    if [ "$still" -gt 0 ]; then
        echo "fuzz $t: not fuzzed: fix the crashers above first (replay one: $binary FILE)"
        failed=1
        continue
    fi

    # Fuzz in a scratch corpus seeded from the committed one.
    corpus="$work/corpus-$t"
    artifacts="$work/artifacts-$t/"
    mkdir -p "$corpus" "$artifacts"
    cp Tests/fuzz/corpus/"$t"/* "$corpus"/
    log="$work/fuzz-$t.log"
    status=0
    started=$(date +%s)
    "$binary" "$corpus" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts" $(dictionary "$t") "$@" >"$log" 2>&1 || status=$?
    elapsed=$(( $(date +%s) - started ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    found=0
    for artifact in "$artifacts"*; do
        [ -f "$artifact" ] || continue
        found=$((found + 1))
        cp "$artifact" "$crashers/"
        echo "fuzz $t: new crasher $crashers/$(basename "$artifact")"
    done
    if [ "$found" -gt 0 ] || [ "$status" -ne 0 ]; then
        summarize "$log"
        # CI keeps no files: the input itself, to recreate it with `base64 -d`.
        grep -E '^Base64: ' "$log" | head -n 1 | cut -c1-2000 | sed 's/^/    /' || true
        if [ "$found" -eq 0 ]; then
            tail -n 5 "$log" | sed 's/^/    /'
            echo "fuzz $t: libFuzzer exited $status without an artifact"
        fi
        failed=1
    fi
    echo "fuzz $t: ${execs:-0} executions in ${elapsed} s (${rate:-0}/s), $found crashes, corpus $(ls "$corpus" | wc -l) inputs"
done
exit "$failed"
