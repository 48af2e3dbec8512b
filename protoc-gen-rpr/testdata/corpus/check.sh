#!/usr/bin/env bash
# check.sh: generate, build and vet rpr code for a corpus of real service
# .proto files, and print one line per file.
#
#   protoc-gen-rpr/testdata/corpus/check.sh CORPUS_DIR [MANIFEST]
#
# CORPUS_DIR is a proto root: every file at the path it is imported by
# (grpc/health/v1/health.proto, google/api/annotations.proto, ...), the
# service files and every file they import except the well-known types
# (google/protobuf/*), which buf provides. MANIFEST (default: the MANIFEST
# beside this script) lists each file's repository, commit and path, so
# that the corpus can be assembled again; its "service" lines are the files
# to check, its "dep" lines what they import. The corpus is other projects'
# files and is not committed. To assemble it from MANIFEST, copy each file
# out of its repository at its commit, e.g. with
#   git --git-dir=REPO.git show COMMIT:PATH > CORPUS_DIR/CORPUS_PATH
#
# For each service file it
#   1. generates code with protoc-gen-go (every corpus file) and
#      protoc-gen-rpr (that file alone), through buf as the Makefile runs
#      it (go tool -modfile=tools/go.mod buf), into a scratch module whose
#      go.mod replaces github.com/rprtunnel/rpr with this checkout;
#   2. builds the file's Go package (go build);
#   3. vets it (go vet);
# and prints "ok" or "FAIL" with the step that failed and its error. It
# exits 1 unless every file passes.
#
# go_package: the corpus files name Go packages of their own projects
# (google.golang.org/grpc/health/grpc_health_v1, go.etcd.io/etcd/api/v3/...,
# github.com/envoyproxy/go-control-plane/...) or none, and the generated code
# of all of them must live in the one scratch module. So the scratch
# generation rewrites the go_package option of every corpus file with buf's
# managed mode (go_package_prefix rprcorpus.test/gen: the file's directory
# under it, e.g. rprcorpus.test/gen/grpc/health/v1, package healthv1). The
# well-known types keep theirs (google.golang.org/protobuf/types/known/...).
# The corpus files themselves are not changed.
#
# Needs Go and this checkout; no network beyond the Go module proxy (for
# the modules the checkout's go.sum names, if they are not cached). Set
# KEEP=1 to keep the scratch directory.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 CORPUS_DIR [MANIFEST]" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
corpus=$(cd "$1" && pwd)
manifest=${2:-$here/MANIFEST}
[ -f "$root/tools/go.mod" ] || { echo "check.sh: $root is not an rpr checkout (no tools/go.mod)" >&2; exit 2; }
[ -f "$manifest" ] || { echo "check.sh: no manifest at $manifest" >&2; exit 2; }

# Service files (fifth column of the "service" lines), in manifest order.
mapfile -t files < <(awk -F'\t' '$1 == "service" { print $5 }' "$manifest")
[ ${#files[@]} -gt 0 ] || { echo "check.sh: $manifest lists no service file" >&2; exit 2; }
missing=0
while IFS=$'\t' read -r role repo commit path dest; do
	case $role in service | dep) ;; *) continue ;; esac
	if [ ! -f "$corpus/$dest" ]; then
		echo "check.sh: $corpus/$dest is missing ($repo@$commit:$path)" >&2
		missing=1
	fi
done <"$manifest"
[ $missing = 0 ] || exit 2

scratch=$(mktemp -d "${TMPDIR:-/tmp}/rpr-corpus.XXXXXX")
if [ "${KEEP:-}" = 1 ]; then
	echo "scratch directory: $scratch"
else
	trap 'rm -rf "$scratch"' EXIT
fi

export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
buf() { (cd "$root" && go tool -modfile=tools/go.mod buf "$@"); }
# oneline joins a command's output into one line for the report, its
# lines separated by " | ".
oneline() { awk 'NF { gsub(/[[:space:]]+/, " "); sub(/^ /, ""); sub(/ $/, ""); printf "%s%s", sep, $0; sep = " | " } END { print "" }'; }

# The plugins, built once (buf runs them once per file).
(cd "$root" && go build -modfile=tools/go.mod -o "$scratch/bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
(cd "$root" && go build -o "$scratch/bin/protoc-gen-rpr" ./protoc-gen-rpr)

cp -R "$corpus" "$scratch/proto"
cat >"$scratch/buf.yaml" <<'EOF'
version: v2
modules:
  - path: proto
EOF
template() { # template PLUGIN: a buf.gen.yaml for one plugin, go_package rewritten
	cat <<EOF
version: v2
managed:
  enabled: true
  override:
    - file_option: go_package_prefix
      value: rprcorpus.test/gen
plugins:
  - local: $scratch/bin/$1
    out: $scratch/gen
    opt: paths=source_relative
EOF
}
template protoc-gen-go >"$scratch/go.gen.yaml"
template protoc-gen-rpr >"$scratch/rpr.gen.yaml"

cat >"$scratch/go.mod" <<EOF
module rprcorpus.test

go 1.26

require github.com/rprtunnel/rpr v0.0.0

replace github.com/rprtunnel/rpr => $root
EOF
cp "$root/go.sum" "$scratch/go.sum"

# Messages for every file, once: the rpr code of each file needs them.
if ! out=$(buf generate "$scratch" --template "$scratch/go.gen.yaml" 2>&1); then
	echo "FAIL protoc-gen-go on the corpus: $(oneline <<<"$out")"
	exit 1
fi

passed=0 streaming=0
for f in "${files[@]}"; do
	if ! out=$(buf generate "$scratch" --template "$scratch/rpr.gen.yaml" --path "$scratch/proto/$f" 2>&1); then
		echo "FAIL $f: generate: $(oneline <<<"$out")"
		continue
	fi
	gen="$scratch/gen/${f%.proto}_rpr.pb.go"
	if [ ! -f "$gen" ]; then
		echo "FAIL $f: generate: protoc-gen-rpr wrote no ${f%.proto}_rpr.pb.go (no service?)"
		continue
	fi
	pkg=./gen/$(dirname "$f")
	if ! out=$(cd "$scratch" && go build "$pkg" 2>&1); then
		echo "FAIL $f: build: $(oneline <<<"$out")"
		continue
	fi
	if ! out=$(cd "$scratch" && go vet "$pkg" 2>&1); then
		echo "FAIL $f: vet: $(oneline <<<"$out")"
		continue
	fi
	unary=$(grep -cE '^[[:space:]]+Handler:[[:space:]]+_' "$gen" || true)
	streams=$(grep -cE '^[[:space:]]+StreamHandler:[[:space:]]+_' "$gen" || true)
	[ "$streams" = 0 ] || streaming=$((streaming + 1))
	echo "ok   $f: generated, compiled, vetted (methods: $unary unary, $streams streaming)"
	passed=$((passed + 1))
done

echo "$passed/${#files[@]} files generated, compiled and vetted; $streaming of them have streaming methods"
[ "$passed" = ${#files[@]} ]
