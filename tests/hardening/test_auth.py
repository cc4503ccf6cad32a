"""Issue 7.1: TLS, mutual TLS and bearer tokens with a per-method policy, against a server with a
(fake) GPU worker and real certificates made in the test. A refused call runs nothing: no kernel
time is recorded, no measurement is written."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest

from tests.service.conftest import TINY, crashing_kernel
from tests.service.harness import FAKE_HANDLER, TILEDISPATCH, ServerProcess, free_port, newest_models, settings_for
from tiledispatch.client import (
    Client,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Tls,
    UnauthenticatedError,
    UnavailableError,
)
from tiledispatch.server.auth import AuthConfigError, TokenAuth, digest
from tiledispatch.v1 import tiledispatch_pb2 as pb
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc

from .conftest import ADMIN_TOKEN, OPS_TOKEN, RUN_TOKEN
from .servers import metric, rows, running_server, serving

KERNEL_RUNS = "tiledispatch_kernel_run_seconds_count"


@pytest.fixture(scope="module")
def secure(pki, tokens_file, tmp_path_factory):
    """An mTLS + token server with a fake GPU: (port, settings, client Tls)."""
    tls = Tls(ca_cert=pki.ca.cert, client_cert=pki.client.cert, client_key=pki.client.key)
    settings = settings_for(tmp_path_factory.mktemp("secure"), gpus="0", worker_handler=FAKE_HANDLER,
                            kernel_timeout_s=5.0, metrics_port=free_port(), tls_cert=str(pki.server.cert),
                            tls_key=str(pki.server.key), tls_client_ca=str(pki.ca.cert),
                            auth_tokens_file=str(tokens_file))
    previous = os.environ.get("TILEDISPATCH_FAKE_FAULTS")
    os.environ["TILEDISPATCH_FAKE_FAULTS"] = f"crash:{crashing_kernel()}"
    try:
        with running_server(settings, tls) as port:
            yield port, settings, tls
    finally:
        if previous is None:
            os.environ.pop("TILEDISPATCH_FAKE_FAULTS", None)
        else:
            os.environ["TILEDISPATCH_FAKE_FAULTS"] = previous


def client(secure, token=None, **kw) -> Client:
    port, _, tls = secure
    return Client(f"127.0.0.1:{port}", tls=kw.pop("tls", tls), token=token, retries=0, timeout=kw.pop("timeout", 30),
                  **kw)


# ---- the policy ----------------------------------------------------------------------------------
def test_open_methods_need_no_token(secure):
    with client(secure) as anyone:
        assert anyone.select(TINY).candidates
        assert anyone.info()["has_gpu"]
        assert anyone.list_models() and anyone.list_kernels(problem=TINY)


@pytest.mark.parametrize("token, error", [(None, UnauthenticatedError), ("not-a-known-token-xyz", UnauthenticatedError),
                                          (ADMIN_TOKEN, PermissionDeniedError)],
                         ids=["missing", "wrong", "lacks-scope"])
def test_run_and_benchmark_refused_and_nothing_runs(secure, token, error):
    port, settings, _ = secure
    runs, measured = metric(settings.metrics_port, KERNEL_RUNS), rows(settings.db)
    with client(secure, token) as caller:
        with pytest.raises(error):
            caller.run(TINY, generate_inputs=True)
        with pytest.raises(error):
            list(caller.benchmark(TINY, top_k=2))
        with pytest.raises(error):
            caller.select(TINY, policy="autotune", top_k=2)  # AUTOTUNE measures on the GPU
        if token != ADMIN_TOKEN:
            with pytest.raises(error):
                caller.lift_quarantine(crashing_kernel())
    assert metric(settings.metrics_port, KERNEL_RUNS) == runs  # nothing executed
    assert rows(settings.db) == measured                      # nothing measured or recorded
    assert metric(settings.metrics_port, "tiledispatch_auth_refused_total") >= 3


def test_a_wrong_token_is_refused_even_on_open_methods(secure):
    with client(secure, "wrong-token-but-long-enough") as caller, pytest.raises(UnauthenticatedError):
        caller.select(TINY)


def test_malformed_authorization_metadata(secure):
    port, _, tls = secure
    with grpc.secure_channel(f"127.0.0.1:{port}", tls.credentials()) as chan:
        stub = pb_grpc.TileDispatchServiceStub(chan)
        request = pb.RunRequest(generate=pb.GenerateInputs(seed=1))
        for value in ("Basic dXNlcjpwYXNz", "Bearer", RUN_TOKEN, "Bearer  "):
            with pytest.raises(grpc.RpcError) as caught:
                stub.Run(request, metadata=(("authorization", value),), timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, value


def test_refused_callers_bytes_are_not_parsed(secure):
    """An unauthenticated Run with bytes that are no message: UNAUTHENTICATED, not INVALID_ARGUMENT."""
    port, _, tls = secure
    with grpc.secure_channel(f"127.0.0.1:{port}", tls.credentials()) as chan:
        raw = chan.unary_unary("/tiledispatch.v1.TileDispatchService/Run", request_serializer=None,
                               response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            raw(b"\xff\xff\xff\xff garbage", timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_authorised_calls_run(secure):
    port, settings, _ = secure
    runs, measured = metric(settings.metrics_port, KERNEL_RUNS), rows(settings.db)
    with client(secure, RUN_TOKEN) as runner:
        assert runner.run(TINY, generate_inputs=True).executed_on == "gpu"
        events = list(runner.benchmark(TINY, top_k=2))
        assert len(events) == 3 and events[-1].measured == 2
        assert runner.select({**TINY, "batch": 3}, policy="autotune", top_k=2).source == "autotune"
    assert metric(settings.metrics_port, KERNEL_RUNS) > runs
    assert rows(settings.db) == measured + 4


def test_lift_quarantine_is_admin_only_and_works(secure):
    port, settings, _ = secure
    crashing = crashing_kernel()
    with client(secure, RUN_TOKEN) as runner, client(secure, ADMIN_TOKEN) as admin, \
            client(secure, OPS_TOKEN) as ops:
        with pytest.raises(InternalError, match=crashing):  # the fake GPU crashes on it: quarantined
            runner.run(TINY, kernel=crashing, generate_inputs=True)
        assert {k["name"]: k for k in runner.list_kernels(problem=TINY)}[crashing]["quarantined"]
        assert rows(settings.db, "quarantine") == 1
        with pytest.raises(PermissionDeniedError):
            runner.lift_quarantine(crashing)
        with pytest.raises(UnauthenticatedError):
            client(secure).lift_quarantine(crashing)
        with pytest.raises(NotFoundError):
            admin.lift_quarantine("gconv_fwd_bf16_2d_igemm_8x8x8_w1_s1_gm1_sk1_mg1_v1_i32")
        with pytest.raises(NotFoundError):
            admin.lift_quarantine("no-such-kernel")
        with pytest.raises(InvalidArgumentError):
            admin.lift_quarantine("")
        answer = admin.lift_quarantine(crashing)
        assert answer["was_quarantined"] and "crashed" in answer["reason"] and answer["quarantined_kernels"] == 0
        assert not {k["name"]: k for k in runner.list_kernels(problem=TINY)}[crashing]["quarantined"]
        assert rows(settings.db, "quarantine") == 0
        assert ops.lift_quarantine(crashing)["was_quarantined"] is False  # idempotent


# ---- the transport -------------------------------------------------------------------------------
def test_health_over_mutual_tls(secure):
    port, _, tls = secure
    assert serving(port, tls)


@pytest.mark.parametrize("case", ["plaintext", "no-client-cert", "rogue-client-cert", "wrong-ca"])
def test_transport_refuses_clients_without_the_right_certificates(secure, pki, case):
    tls = {"plaintext": None,
           "no-client-cert": Tls(ca_cert=pki.ca.cert),
           "rogue-client-cert": Tls(ca_cert=pki.ca.cert, client_cert=pki.rogue_client.cert,
                                    client_key=pki.rogue_client.key),
           "wrong-ca": Tls(ca_cert=pki.rogue_ca.cert, client_cert=pki.client.cert, client_key=pki.client.key)}[case]
    with client(secure, RUN_TOKEN, tls=tls, **{"timeout": 5}) as caller, pytest.raises(UnavailableError):
        caller.select(TINY)


# ---- configuration -------------------------------------------------------------------------------
def test_token_file_parsing():
    auth = TokenAuth.parse(f"a run {RUN_TOKEN}\nb admin sha256:{digest(ADMIN_TOKEN).hex()}\n\n# comment\n")
    assert auth.authenticate(RUN_TOKEN).scopes == {"run"} and auth.authenticate(ADMIN_TOKEN).name == "b"
    assert auth.authenticate("x" * 10_000) is None and auth.authenticate("") is None
    for bad in ("a run", "a fly tokentokentokentoken", "a run short", "", "# only a comment"):
        with pytest.raises(AuthConfigError):
            TokenAuth.parse(bad)


def test_server_process_with_tls_from_the_environment_and_the_cli(pki, tokens_file, tmp_path):
    """``tiledispatch serve`` configured through TILEDISPATCH_* variables (TLS without client
    certificates, tokens), called by the CLI with --token/--ca-cert."""
    env = {"TILEDISPATCH_TLS_CERT": str(pki.server.cert), "TILEDISPATCH_TLS_KEY": str(pki.server.key),
           "TILEDISPATCH_AUTH_TOKENS_FILE": str(tokens_file)}
    server = ServerProcess(tmp_path, "--gpus", "none", "--models-dir", str(newest_models(tmp_path)), env=env)
    server.start = _start_tls(server, Tls(ca_cert=pki.ca.cert))
    server.start()
    try:
        base = [*TILEDISPATCH, "info", "--target", server.target, "--ca-cert", str(pki.ca.cert), "--json"]
        done = subprocess.run(base, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and '"has_gpu": false' in done.stdout, done.stderr
        run = [*TILEDISPATCH, "run", "--target", server.target, "--ca-cert", str(pki.ca.cert), "--n", "1", "--c",
               "4", "--k", "4", "--g", "2", "--input", "4,4", "--filter", "3,3", "--pad", "1,1", "--json"]
        done = subprocess.run(run, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "UNAUTHENTICATED" in done.stderr
        done = subprocess.run([*run, "--token", RUN_TOKEN], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "cpu_reference" in done.stdout, done.stderr
        lift = [*TILEDISPATCH, "lift-quarantine", crashing_kernel(), "--target", server.target, "--ca-cert",
                str(pki.ca.cert)]
        done = subprocess.run(lift, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TILEDISPATCH_TOKEN": ADMIN_TOKEN})
        assert done.returncode == 0 and "was not quarantined" in done.stdout, done.stderr
        assert '"tls": "on"' in server.log() and '"auth": "tokens"' in server.log()
    finally:
        server.stop()


def _start_tls(server: ServerProcess, tls: Tls):
    def start(timeout: float = 90.0):
        import time

        server._log = open(server.log_path, "w")  # noqa: SIM115 - closed by stop()
        server.process = subprocess.Popen(server.args, stdout=server._log, stderr=subprocess.STDOUT, env=server.env,
                                          cwd=str(server.log_path.parent))
        deadline = time.monotonic() + timeout
        while not serving(server.port, tls):
            if server.process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(server.log()[-3000:])
            time.sleep(0.2)
        return server

    return start


def test_bad_security_settings_refuse_to_start(tmp_path, pki):
    tokens = tmp_path / "tokens"
    tokens.write_text("x run short\n")
    for args in (["--tls-cert", str(pki.server.cert)], ["--tls-client-ca", str(pki.ca.cert)],
                 ["--auth-tokens-file", str(tmp_path / "missing")], ["--auth-tokens-file", str(tokens)]):
        done = subprocess.run([*TILEDISPATCH, "serve", "--gpus", "none", "--port", str(free_port()),
                               "--metrics-port", "0", *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TILEDISPATCH_HOME": str(tmp_path)})
        assert done.returncode != 0, args
        assert "tls" in (done.stdout + done.stderr).lower() or "token" in (done.stdout + done.stderr).lower(), args


def test_the_client_package_still_needs_only_grpc():
    code = "import tiledispatch.client as c; c.Tls(); print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok"
