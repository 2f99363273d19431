#!/usr/bin/env python3
"""Container health check for voxgate images (compose healthcheck, Kubernetes exec probe).

    voxgate-healthcheck --socket /run/voxgate/engine.sock       # the engine sidecar answers GetStatus
    voxgate-healthcheck --target 127.0.0.1:50051 [--service S]  # gRPC health: "" = live, voxgate.v1.Speech = ready

Exit 0 when healthy, 1 otherwise (the reason on stderr).
"""

from __future__ import annotations

import argparse
import sys

import grpc


def check_sidecar(socket: str, timeout: float) -> str | None:
    from engine_api.v1 import engine_pb2, engine_pb2_grpc

    with grpc.insecure_channel(f"unix:{socket}") as channel:
        status = engine_pb2_grpc.EngineStub(channel).GetStatus(engine_pb2.GetStatusRequest(), timeout=timeout)
    return None if status.engine else "sidecar reports no engine"


def check_health(target: str, service: str, timeout: float) -> str | None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                          timeout=timeout)
    if reply.status == health_pb2.HealthCheckResponse.SERVING:
        return None
    return f"{service or 'liveness'}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voxgate-healthcheck", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="engine sidecar Unix socket")
    where.add_argument("--target", help="voxgate service host:port")
    parser.add_argument("--service", default="", help='health service name ("" liveness, voxgate.v1.Speech ready)')
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    try:
        problem = (check_sidecar(args.socket, args.timeout) if args.socket
                   else check_health(args.target, args.service, args.timeout))
    except grpc.RpcError as exc:
        problem = f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
