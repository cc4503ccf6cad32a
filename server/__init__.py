"""The gRPC service (DESIGN §8). One job per module:

``config`` settings · ``logs`` JSON logs · ``errors`` domain errors and their gRPC codes ·
``convert`` messages ↔ core types · ``catalog`` the kernels to choose from · ``predictors`` trained
models and the analytic fallback · ``selection`` the policy and its cache · ``tuning_db`` SQLite
measurements and quarantine · ``worker``/``gpu_handler`` GPU worker processes · ``device`` GPU probe
and versions · ``metrics`` Prometheus · ``service`` the transport-neutral core · ``servicer`` the
thin gRPC layer · ``handlers`` its method handlers (transport shortcuts) · ``answers`` stored
serialized Select answers · ``shm_inputs`` Run inputs from a local client's shared memory ·
``main`` the ``tiledispatch serve`` entry point.

Importing any of them has no side effects; torch and triton are imported only inside GPU workers.
"""
