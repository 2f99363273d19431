#!/usr/bin/env bash
# Build the Go transcribe example offline, in GOPATH mode, against Debian's Go packages
# (golang-google-grpc-dev, golang-google-protobuf-dev, ... under /usr/share/gocode;
# scripts/ci_toolchains.sh installs them).
#
# Usage: clients/go/build.sh OUTPUT     e.g. clients/go/build.sh /tmp/transcribe
#
# The generated package's import path is voxgate.dev/clients/go/voxgatev1 (go_package in
# proto/voxgate/v1/speech.proto), so this directory is copied to
# $GOPATH/src/voxgate.dev/clients/go in a temporary GOPATH.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTPUT" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
case "$1" in /*) out="$1" ;; *) out="$PWD/$1" ;; esac
command -v go >/dev/null || { echo "build.sh: go not found (scripts/ci_toolchains.sh installs it)" >&2; exit 1; }

gopath="$(mktemp -d)"
trap 'rm -rf "$gopath"' EXIT
pkg="$gopath/src/voxgate.dev/clients/go"
mkdir -p "$pkg"
cp -r "$here/voxgatev1" "$here/resume" "$here/examples" "$pkg/"

export GO111MODULE=off GOFLAGS='' GOPATH="$gopath:${GOCODE:-/usr/share/gocode}"
[ -n "${HOME:-}" ] || export GOCACHE="${GOCACHE:-$gopath/cache}"
cd "$pkg"
go vet ./voxgatev1 ./resume ./examples/...
go build -o "$out" ./examples/transcribe
