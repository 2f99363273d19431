#!/usr/bin/env bash
# Toolchains CI needs beyond Python, for the Node and Go client tests
# (tests/integration/test_other_clients.py) and scripts/gen_clients.sh:
#   Go and the Go gRPC/protobuf packages, built offline in GOPATH mode from Debian packages;
#   protoc with protoc-gen-go and protoc-gen-go-grpc (to check the generated Go code);
#   nginx (nginx-light) as the real gRPC load balancer of tests/deploy/test_load_balancer.py;
#   systemd-analyze (systemd) to verify deploy/systemd/*.service in tests/deploy/test_manifests.py;
#   gRPC C++ (libgrpc++-dev, libprotobuf-dev, protobuf-compiler-grpc, g++, make, pkg-config) for the C++ examples
#   (clients/cpp, tests/integration/test_cpp_client.py);
#   mmdebstrap, podman and buildah to make a Debian base and build and run the images without a container
#   engine or registry (scripts/build_images.py, tests/deploy/test_images.py).
# node and npm are expected on the machine already; buf comes with the venv (dev extra).
# Idempotent: installs only what is missing (apt-get, as root or through sudo); silent when
# everything is there.
set -euo pipefail

PACKAGES=(
    golang-go
    protobuf-compiler
    protoc-gen-go
    protoc-gen-go-grpc
    golang-google-grpc-dev
    golang-google-genproto-dev
    golang-google-protobuf-dev
    golang-github-golang-protobuf-1-5-dev  # not golang-goprotobuf-dev: it conflicts
    nginx-light  # grpc_pass + least_conn; the test starts its own on loopback (no service is enabled)
    systemd  # systemd-analyze verify only; nothing is started (a container has no systemd as PID 1)
    libtcmalloc-minimal4  # tcmalloc for vLLM's EngineCore and Worker on the CPU (engine option allocator=auto)
    libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc g++ make pkg-config  # clients/cpp (grpc_cpp_plugin, pkg-config grpc++)
    mmdebstrap podman buildah uidmap eatmydata  # scripts/build_images.py (podman imports the base; uidmap: rootless)
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done

if [ ${#missing[@]} -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "ci_toolchains.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
        sudo=(sudo)
    fi
    echo "ci_toolchains.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq >/dev/null
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for tool in node npm go protoc protoc-gen-go protoc-gen-go-grpc systemd-analyze grpc_cpp_plugin g++ make pkg-config mmdebstrap podman buildah; do
    command -v "$tool" >/dev/null || { echo "ci_toolchains.sh: $tool not found on PATH" >&2; exit 1; }
done
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "ci_toolchains.sh: nginx not found" >&2; exit 1; }
