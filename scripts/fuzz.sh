#!/usr/bin/env bash
# fuzz.sh - run every native Go fuzz target (func FuzzX(f *testing.F)) of
# the workspace's modules, one after the other, each for FUZZTIME.
#
#   scripts/fuzz.sh            every target, FUZZTIME each (default 60000x)
#   FUZZTIME=1m scripts/fuzz.sh     a duration instead of a count of inputs
#   scripts/fuzz.sh ./internal/wire FuzzDecodeRequest   one package, or one target
#
# `go test -fuzz` fuzzes one target of one package per run, so this script
# finds the targets itself (a grep of the *_test.go files git knows of),
# builds each package's fuzzing test binary once (go test -c -fuzz) and
# runs it once per target, from the package's directory, with the corpus
# go test would use: testdata/fuzz/FuzzX there (the seeds in git, and
# where a failing input is written) and $GOCACHE/fuzz/<import path> (what
# earlier runs found). A failure prints the input and the file it was
# written to; `go test -run 'FuzzX/NAME' ./pkg` replays it. Exits non-zero
# on the first failing target.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-60000x}
only_pkg=${1:-}
only_target=${2:-}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache=$($GO env GOCACHE)/fuzz

# Directories with fuzz targets, from the files git tracks or would add.
fuzz_func='^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)'
dirs=$(git grep -l --untracked -e "$fuzz_func" -- '*_test.go' | xargs -r -n1 dirname | sort -u)
[ -n "$dirs" ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }

# inputs prints how many inputs testdata/fuzz/<target> of a package holds.
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }

total=0
start=$SECONDS
for dir in $dirs; do
    [ -z "$only_pkg" ] || [ "./$dir" = "${only_pkg%/}" ] || [ "$dir" = "${only_pkg%/}" ] || continue
    targets=$(cat "$dir"/*_test.go | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p' | sort)
    pkg=$(cd "$dir" && $GO list .)
    test_bin="$bin/$(echo "$pkg" | tr / _).test"
    (cd "$dir" && $GO test -c -fuzz=. -o "$test_bin" .)
    for target in $targets; do
        [ -z "$only_target" ] || [ "$target" = "$only_target" ] || continue
        echo "fuzz: $pkg $target for $FUZZTIME"
        t0=$EPOCHREALTIME
        seeds=$(inputs "$dir/testdata/fuzz/$target")
        if ! (cd "$dir" && "$test_bin" -test.run='^$' -test.fuzz="^$target\$" -test.fuzztime="$FUZZTIME" \
            -test.fuzzcachedir="$cache/$pkg" -test.fuzzminimizetime=10s); then
            if [ "$(inputs "$dir/testdata/fuzz/$target")" -gt "$seeds" ]; then
                echo "fuzz: $pkg $target failed (the input is in $dir/testdata/fuzz/$target/)" >&2
            else
                # Go 1.26's coordinator can fail a timed run at its deadline
                # with "context deadline exceeded" (go.dev/issue/75804).
                echo "fuzz: $pkg $target failed without writing an input; if it said" \
                    "'context deadline exceeded', that is Go's fuzz coordinator at a timed" \
                    "deadline (go.dev/issue/75804): run a count instead, FUZZTIME=100000x" >&2
            fi
            exit 1
        fi
        awk -v t="$target" -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "fuzz: %s took %.1fs\n", t, b - a }'
        total=$((total + 1))
    done
done
[ "$total" -gt 0 ] || { echo "fuzz: no target matched ${only_pkg:-} ${only_target:-}" >&2; exit 1; }
echo "fuzz: $total targets, $FUZZTIME each, in $((SECONDS - start))s"
