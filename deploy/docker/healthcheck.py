"""Container health check: exit 0 when the gRPC health service answers SERVING, 1 otherwise.

    python healthcheck.py [HOST:PORT] [SERVICE]

Defaults: ``127.0.0.1:$TILEDISPATCH_PORT`` (50051) and ``tiledispatch.v1.TileDispatchService``,
which stays NOT_SERVING until the registry and models are loaded. Needs only grpcio and
grpcio-health-checking, both dependencies of the service.
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICE = "tiledispatch.v1.TileDispatchService"


def check(target: str, service: str = SERVICE, timeout_s: float = 3.0) -> bool:
    """True when ``target`` says ``service`` is SERVING."""
    with grpc.insecure_channel(target) as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                               timeout=timeout_s)
        except grpc.RpcError as error:
            print(f"healthcheck: {target}: {error.code().name}", file=sys.stderr)
            return False
    serving = answer.status == health_pb2.HealthCheckResponse.SERVING
    if not serving:
        print(f"healthcheck: {target}: {health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)}",
              file=sys.stderr)
    return serving


def main(argv: list[str]) -> int:
    target = argv[0] if argv else f"127.0.0.1:{os.environ.get('TILEDISPATCH_PORT') or 50051}"
    service = argv[1] if len(argv) > 1 else SERVICE
    return 0 if check(target, service) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
