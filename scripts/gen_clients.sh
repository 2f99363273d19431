#!/usr/bin/env bash
# Generate every client's code from proto/ (the public API, voxgate/v1/speech.proto):
#
#   python  scripts/gen_protos.py (public API -> clients/python/voxgate_client/_proto/,
#           engine API -> engine_api/_proto/); needs the venv (make install)
#   go      protoc + protoc-gen-go + protoc-gen-go-grpc -> clients/go/voxgatev1/
#   node    copies of the .proto files the Node client loads at run time -> clients/node/proto/,
#           TypeScript types (proto-loader-gen-types) -> clients/node/types/
#
# Usage: scripts/gen_clients.sh [python] [go] [node]          (no target: all three)
#        scripts/gen_clients.sh --check [go] [node]           (no target: go and node)
# --check generates into a temporary directory and fails if the committed Go/Node code
# differs (the Go files' generator-version header lines aside); it changes nothing.
#
# Generated code is committed: building or running a client needs none of these tools.
# Go tools: Debian protobuf-compiler, protoc-gen-go, protoc-gen-go-grpc (scripts/ci_toolchains.sh).
# Node: npm; clients/node/node_modules is installed (npm ci) if missing.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PROTO=voxgate/v1/speech.proto
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    if [ $check = 1 ]; then targets=(go node); else targets=(python go node); fi
fi
OUT="$ROOT"
if [ $check = 1 ]; then
    OUT="$(mktemp -d)"
    trap 'rm -rf "$OUT"' EXIT
fi

# The directory holding google/protobuf/duration.proto (a well-known type that protoc ships).
well_known_include() {
    local dir
    for dir in /usr/include /usr/local/include; do
        if [ -f "$dir/google/protobuf/duration.proto" ]; then echo "$dir"; return; fi
    done
    "$PYTHON" -c 'import grpc_tools, pathlib; print(pathlib.Path(grpc_tools.__file__).parent / "_proto")'
}

gen_python() {
    [ $check = 0 ] || { echo "gen_clients.sh: --check covers go and node only" >&2; exit 2; }
    "$PYTHON" scripts/gen_protos.py
}

gen_go() {
    local out="$OUT/clients/go/voxgatev1" tmp tool
    for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
        command -v "$tool" >/dev/null || { echo "gen_clients.sh: $tool not found (scripts/ci_toolchains.sh installs it)" >&2; exit 1; }
    done
    tmp="$(mktemp -d)"
    # paths=source_relative puts the files at voxgate/v1/ whatever go_package says; the package
    # name (voxgatev1) and import path (voxgate.dev/clients/go/voxgatev1) come from go_package.
    protoc -I proto -I "$(well_known_include)" \
        --go_out="$tmp" --go_opt=paths=source_relative \
        --go-grpc_out="$tmp" --go-grpc_opt=paths=source_relative \
        "$PROTO"
    rm -rf "$out"
    mkdir -p "$out"
    cp "$tmp"/voxgate/v1/*.go "$out"/
    rm -rf "$tmp"
    [ $check = 1 ] || echo "$PROTO -> clients/go/voxgatev1/ ($(cd "$out" && echo *.go))"
}

gen_node() {
    local dir="$OUT/clients/node"
    rm -rf "$dir/proto" "$dir/types"
    mkdir -p "$dir/proto/voxgate/v1" "$dir/proto/google/protobuf"
    cp "proto/$PROTO" "$dir/proto/$PROTO"
    # protobufjs (under proto-loader) has the well-known types built in; a copy of
    # duration.proto is shipped anyway so that any tool can load proto/ as it is.
    cp "$(well_known_include)/google/protobuf/duration.proto" "$dir/proto/google/protobuf/"
    if [ ! -d clients/node/node_modules/@grpc/proto-loader ]; then
        (cd clients/node && npm ci --no-audit --no-fund --loglevel=error)
    fi
    # The same options as LOADER_OPTIONS in index.js, so the types describe what it returns.
    (cd clients/node && npx --no-install proto-loader-gen-types --grpcLib=@grpc/grpc-js \
        --keepCase --longs=String --enums=String --defaults --oneofs --includeDirs=proto \
        --outDir="$dir/types" "$PROTO" >/dev/null)
    [ $check = 1 ] || echo "$PROTO -> clients/node/proto/ (loaded at run time), clients/node/types/ (TypeScript)"
}

compare() {  # committed vs freshly generated
    local path="$1"
    if ! diff -r -I '^// .*protoc' "$path" "$OUT/$path" >/dev/null; then
        echo "gen_clients.sh: $path is out of date with proto/; run scripts/gen_clients.sh" >&2
        diff -r -I '^// .*protoc' "$path" "$OUT/$path" | head -40 >&2
        return 1
    fi
}

for target in "${targets[@]}"; do
    case "$target" in
        python) gen_python ;;
        go) gen_go ;;
        node) gen_node ;;
        *) echo "usage: $0 [--check] [python] [go] [node]" >&2; exit 2 ;;
    esac
done

if [ $check = 1 ]; then
    status=0
    for target in "${targets[@]}"; do
        case "$target" in
            go) compare clients/go/voxgatev1 || status=1 ;;
            node) { compare clients/node/proto && compare clients/node/types; } || status=1 ;;
        esac
    done
    [ $status = 1 ] || echo "generated Go and Node code is up to date with proto/"
    exit $status
fi
