"""Prometheus metrics of one server, in a registry of its own (never the process-global one, so
several servers in one process, e.g. tests, do not collide), served on their own port."""

from __future__ import annotations

import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_KERNEL_BUCKETS = (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10)
_ERROR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10)


class Metrics:
    """Every metric the service exports. Labels are low-cardinality by construction (methods,
    status codes, sources, model versions, devices): never problem keys or kernel names."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpc_requests = Counter("tiledispatch_rpc_requests", "RPCs handled, by method and status code",
                                    ["method", "code"], registry=r)
        self.rpc_latency = Histogram("tiledispatch_rpc_latency_seconds", "RPC latency, by method and status code",
                                     ["method", "code"], buckets=_LATENCY_BUCKETS, registry=r)
        self.inflight = Gauge("tiledispatch_rpc_inflight", "RPCs being handled", registry=r)
        self.selections = Counter("tiledispatch_selections", "Selections answered, by source and model version",
                                  ["source", "model"], registry=r)
        self.cache = Counter("tiledispatch_selection_cache", "Selection cache lookups, by result (hit or miss)",
                             ["result"], registry=r)
        self.cache_hit_ratio = Gauge("tiledispatch_selection_cache_hit_ratio",
                                     "Hits over lookups of the selection cache since start", registry=r)
        self.prediction_error = Histogram(
            "tiledispatch_prediction_relative_error",
            "|predicted - measured| / measured kernel time, for every measurement the server takes",
            ["source", "model"], buckets=_ERROR_BUCKETS, registry=r)
        self.kernel_seconds = Histogram("tiledispatch_kernel_run_seconds",
                                        "Time of one kernel execution (Run and Benchmark medians), by target",
                                        ["executed_on"], buckets=_KERNEL_BUCKETS, registry=r)
        self.measurements = Counter("tiledispatch_measurements", "Kernel measurements taken, by status",
                                    ["status"], registry=r)
        self.worker_restarts = Counter("tiledispatch_worker_restarts", "GPU worker processes restarted, by device",
                                       ["device"], registry=r)
        self.kernel_faults = Counter("tiledispatch_kernel_faults", "Kernels that crashed or hung a worker",
                                     registry=r)
        self.registry_size = Gauge("tiledispatch_registry_kernels", "Kernels selection chooses from", registry=r)
        self.quarantined = Gauge("tiledispatch_quarantined_kernels", "Kernels excluded after a fault", registry=r)
        self.auth_refused = Counter("tiledispatch_auth_refused", "Calls refused by authentication, by method and code",
                                    ["method", "code"], registry=r)
        self.shed = Counter("tiledispatch_rpc_shed", "Calls shed with RESOURCE_EXHAUSTED, by the limit that shed them",
                            ["limit"], registry=r)
        self.ready = Gauge("tiledispatch_ready", "1 when the service is SERVING", registry=r)
        self.gpu_workers = Gauge("tiledispatch_gpu_workers", "GPU worker processes configured", registry=r)
        self._hits = 0
        self._lookups = 0
        self._lock = threading.Lock()  # lookups come from several executor threads

    def cache_lookup(self, hit: bool) -> None:
        self.cache.labels("hit" if hit else "miss").inc()
        with self._lock:
            self._hits += hit
            self._lookups += 1
            self.cache_hit_ratio.set(self._hits / self._lookups)

    def serve(self, host: str, port: int) -> Callable[[], None]:
        """Expose ``/metrics`` on ``host:port``; returns the function that stops it."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop
