"""Where the custom ops' kernels come from and how they are launched, per process.

A :class:`Runtime` owns a :class:`~tiledispatch.integrations.torch_select.KernelSelector` (cache →
service → local ranking) and the launch backend:

* CUDA tensors: ``compiled`` binaries from the registry in ``registry_dir`` (or
  ``$TILEDISPATCH_REGISTRY_DIR``) when one is built for the GPU's arch, else Triton ``jit``
  (compiles each kernel on first use in the process: seconds per kernel, once);
* CPU tensors: PyTorch's own convolution (the interpreter is far too slow for real models; logged
  once), unless ``cpu="interpret"``, which runs our kernels under the Triton interpreter
  (``TRITON_INTERPRET=1`` must be set before triton is first imported): tiny shapes in tests.

Kernels run in the caller's process on the caller's current CUDA stream: Triton launches on
``torch.cuda.current_stream()`` of the *current device*, so a tensor on another device is launched
under ``torch.cuda.device(tensor.device)``.

Which implementation serves a call, ours or PyTorch's own convolution, is the runtime's ``policy``
(:mod:`.torch_dispatch`; default ``auto``: the faster of both per problem on CUDA, timed once).

Per-call host cost on a cache hit: one dict lookup keyed by shapes and parameters (the
:class:`ConvProblem`, its kernel, its :class:`~tiledispatch.native.launch.LaunchPlan` and, under
``fastest``, its decision are made once per shape), then the plan's ``run`` (operand checks, output and
workspace allocation, launches with bound pointers) or PyTorch's convolution. That lookup is in the
runtime's *routes* (key -> entry and implementation, the policy and decision already applied), which
are derived from the entries and dropped whenever an entry changes (:class:`_EntryTable`) or the
policy, ``cpu`` or ``dtypes`` is set; a miss takes the full path (:meth:`Runtime._dispatch`), which
fills them again. Each such change bumps the entries' ``generation``, which is also what bounds the
life of a TileConv's resolved calls (:mod:`.torch`: the module's own fast path, before the runtime).

CUDA graphs: a call whose problem is already known is capture-safe, and must stay so. Its output,
workspace and any aligned channels-last copy come from PyTorch's caching allocator (``torch.empty``,
``contiguous``, ``clone``) on the current stream, which is a capture's private pool, as does the
scratch of the ``tma`` family's device-side descriptors; nothing on the path synchronizes with the
host (no ``.item()``, ``.cpu()``, events or ``synchronize``); the launch reads the current stream at
the call (a plan keeps ``binary[grid]``, whose Triton runner looks the stream up per call, and data
pointers are bound per call: a plan holds no tensor, pointer or stream). The routes, decisions and
policy are host state read while capturing only: a replay re-runs the kernels the capture recorded,
whatever changes later. What is not capture-safe is a problem's first call (selection, loading or
JIT-compiling its kernel and, under ``fastest``, timing both sides, which is skipped while
capturing: see :mod:`.torch_dispatch`): run warm-up steps before capturing, as
``bench/torch_e2e.py --cuda-graph`` and the GPU test ``test_captured_training_step_replays_like_eager`` do.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

from . import torch_dispatch as dispatch
from .torch_dispatch import Decision, EventTimer, LayerDecision, Timer
from .torch_reference import forward as pytorch_forward
from .torch_reference import reference
from .torch_select import Choice, KernelSelector, SelectionError

log = logging.getLogger("tiledispatch.integrations")

_DTYPES = {torch.bfloat16: DType.BF16, torch.float16: DType.FP16, torch.float32: DType.FP32}


def memory_format(ndim: int) -> torch.memory_format:
    """channels_last for 4-D (N, C, H, W) tensors, channels_last_3d for 5-D ones."""
    return torch.channels_last if ndim == 4 else torch.channels_last_3d


def channels_last(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in channels-last memory, 16-byte aligned (a copy only when it is not already)."""
    fmt = torch.channels_last if tensor.dim() == 4 else torch.channels_last_3d  # memory_format(), inline: per call
    if not tensor.is_contiguous(memory_format=fmt):
        tensor = tensor.contiguous(memory_format=fmt)
    if tensor.data_ptr() % 16:
        tensor = tensor.clone(memory_format=fmt)
    return tensor


@dataclass(frozen=True)
class Entry:
    """A problem with its chosen kernel, how to launch it (its cached launch plan) and, once made,
    the ``fastest`` decision."""

    problem: ConvProblem
    choice: Choice
    backend: str                     # compiled | jit | interpret
    loader: Any = None
    decision: Decision | None = None
    plan: Any = None                 # the LaunchPlan of (problem, config, backend, loader); None: looked up per call

    @property
    def config(self) -> KernelConfig:
        return self.choice.config

    def with_plan(self) -> Entry:
        """This entry with its launch plan (built now, or taken from the process's plan cache)."""
        from tiledispatch.native import launch

        return replace(self, plan=launch.launch_plan(self.problem, self.config, self.backend, self.loader))


class _EntryTable(dict):
    """The runtime's entries (a dict keyed like :meth:`Runtime.entry`'s cache). Every change of it
    (the runtime's own, or a test's ``runtime._entries[key] = ...``) bumps ``generation`` and drops
    what was derived from the changed entries: the route of that key (a route depends on its own
    entry only; all of them when several keys change) and every ``pytorch_serves`` answer, so that
    a fast-path answer never outlives the entries it came from (a TileConv's resolved calls are
    checked against ``generation`` on every call). Reads are plain dict reads."""

    def __init__(self, routes: dict, serves: dict):
        super().__init__()
        self.generation = 0
        self.routes, self.serves = routes, serves
        self.lock = threading.Lock()

    def _changed(self, key: Any = None, every: bool = False) -> None:  # called with the lock held
        self.generation += 1
        if every:
            self.routes.clear()
        else:
            self.routes.pop(key, None)
        self.serves.clear()

    def remember(self, table: dict, key: Any, value: Any, generation: int) -> None:
        """``table[key] = value`` unless the entries changed since ``generation`` (read before
        ``value`` was derived from them)."""
        with self.lock:
            if self.generation == generation:
                table[key] = value

    def forget(self) -> None:
        """Drop every route and ``pytorch_serves`` answer, and bump ``generation`` (a setting they
        applied changed: the policy, ``cpu``, ``dtypes``)."""
        with self.lock:
            self._changed(every=True)

    def __setitem__(self, key, value) -> None:
        with self.lock:
            super().__setitem__(key, value)
            self._changed(key)

    def __delitem__(self, key) -> None:
        with self.lock:
            super().__delitem__(key)
            self._changed(key)

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self) -> None:
        with self.lock:
            super().clear()
            self._changed(every=True)

    def pop(self, key, *default):
        with self.lock:
            try:
                return super().pop(key, *default)
            finally:
                self._changed(key)

    def popitem(self):
        with self.lock:
            try:
                return super().popitem()
            finally:
                self._changed(every=True)

    def setdefault(self, key, default=None):
        with self.lock:
            try:
                return super().setdefault(key, default)
            finally:
                self._changed(key)

    def update(self, *args, **kwargs) -> None:
        with self.lock:
            super().update(*args, **kwargs)
            self._changed(every=True)


class Runtime:
    """Selection and launch settings of the PyTorch integration (one per process by default).

    ``target``/``mode``/``timeout_s``/``client_options``: the selection service (see :class:`KernelSelector`;
    ``client_options`` e.g. ``{"tls": True, "token": ...}``);
    ``registry_dir``: compiled kernels (default ``$TILEDISPATCH_REGISTRY_DIR``; none: JIT);
    ``arch``: override the compute target (default: from the GPU); ``cpu``: ``"torch"`` or
    ``"interpret"``; ``dtypes``: the tensor dtypes sent to our kernels (others go to PyTorch);
    ``policy``: ``auto``/``fastest``/``ours``/``pytorch`` (default ``$TILEDISPATCH_TORCH_POLICY``, else
    ``auto``; see :mod:`.torch_dispatch`); ``cost``: what a ``fastest`` decision compares, ``total``
    (device + host time per call: eager code) or ``device`` (device time alone: code replayed as CUDA
    graphs) (default ``$TILEDISPATCH_TORCH_COST``, else ``total``); ``timer``: how ``fastest`` times an
    implementation (default :class:`~.torch_dispatch.EventTimer`; tests inject fakes).
    """

    def __init__(self, *, target: str | None = None, mode: str = "auto", timeout_s: float | None = None,
                 registry_dir: str | Path | None = None, arch: str | None = None, rule_set: str = "default",
                 cpu: str = "torch", dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16),
                 selector: KernelSelector | None = None, client_options: dict[str, Any] | None = None,
                 policy: str | None = None, timer: Timer | None = None, cost: str | None = None):
        self.target, self.mode, self.timeout_s = target, mode, timeout_s
        env_dir = os.environ.get("TILEDISPATCH_REGISTRY_DIR")
        self.registry_dir = Path(registry_dir) if registry_dir else (Path(env_dir) if env_dir else None)
        self.arch = arch or os.environ.get("TILEDISPATCH_ARCH") or None
        self.rule_set = rule_set
        self._selector = selector
        self.client_options = dict(client_options or {})
        self._jit_selector: KernelSelector | None = None
        self._registry: Any = None
        # Derived from the entries (emptied on every change of them, see _EntryTable): per call key,
        # the entry and whether ours runs it (``_routes``), and ``pytorch_serves``' answers.
        self._routes: dict[tuple, tuple[Entry | None, bool]] = {}
        self._serves: dict[tuple, bool] = {}
        self._entries: _EntryTable = _EntryTable(self._routes, self._serves)
        # Layers timed both ways under fastest (torch_dispatch, "Layers"): per pytorch_serves key and the
        # decided implementation of each needed direction. Kept across generations (its key holds what
        # it depends on); emptied by clear().
        self._layers: dict[tuple, LayerDecision] = {}
        self._layer_paths: dict[tuple, str] = {}  # which launch path ours was timed on: cpp | python
        self._decision_paths: dict[tuple, str] = {}  # the same for each direction's decision
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self.cpu = cpu
        self.dtypes = dtypes
        self.policy = policy if policy is not None else os.environ.get(dispatch.POLICY_ENV)
        self.cost = cost if cost is not None else os.environ.get(dispatch.COST_ENV)
        self.timer: Timer = timer if timer is not None else EventTimer()

    # The settings that decide where a call goes. Setting one bumps the entries' generation (and
    # drops the routes and pytorch_serves answers): what a TileConv keeps of its calls' resolution
    # is valid for one generation (torch.TileConv's fast path), so it cannot outlive the setting.
    @property
    def policy(self) -> str:
        """``auto``, ``fastest``, ``ours`` or ``pytorch``; settable (decisions made so far are kept)."""
        return self._policy

    @policy.setter
    def policy(self, value: str | None) -> None:
        self._policy = dispatch.parse_policy(value)
        self._entries.forget()  # routes and pytorch_serves answers applied the old policy

    @property
    def cost(self) -> str:
        """``total`` or ``device``: what ``fastest`` decisions compare (settable: the decisions made so
        far are re-derived from their kept times, nothing is timed again)."""
        return self._cost

    @cost.setter
    def cost(self, value: str | None) -> None:
        cost = dispatch.parse_cost(value)
        self._cost = cost
        changed = {key: replace(entry, decision=entry.decision.under(cost)) for key, entry in self._entries.items()
                   if entry.decision is not None and entry.decision.cost != cost}
        if changed:
            self._entries.update(changed)
        self._entries.forget()  # routes and pytorch_serves answers applied the old decisions

    @property
    def cpu(self) -> str:
        """``torch`` or ``interpret``: what runs convolutions on CPU tensors (settable)."""
        return self._cpu

    @cpu.setter
    def cpu(self, value: str) -> None:
        if value not in ("torch", "interpret"):
            raise ValueError(f"cpu: must be 'torch' or 'interpret', got {value!r}")
        self._cpu = value
        self._entries.forget()

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """The tensor dtypes sent to our kernels (settable; others go to PyTorch)."""
        return self._dtypes

    @dtypes.setter
    def dtypes(self, value: tuple[torch.dtype, ...]) -> None:
        self._dtypes = tuple(value)
        self._entries.forget()

    # ---- what goes where -------------------------------------------------------------------------
    def accepts(self, tensor: torch.Tensor) -> bool:
        """Whether a convolution on ``tensor`` runs our kernels (else PyTorch's, logged once)."""
        if tensor.dtype not in self.dtypes:
            self.log_once(f"dtype-{tensor.dtype}", "tiledispatch: %s convolutions run PyTorch's kernels "
                          "(our kernels are used for %s)", tensor.dtype, [str(d) for d in self.dtypes])
            return False
        if tensor.is_cuda:
            return True
        if tensor.device.type == "cpu" and self.cpu == "interpret":
            return True
        self.log_once(f"device-{tensor.device.type}", "tiledispatch: convolutions on %s tensors run PyTorch's "
                      "kernels (ours run on CUDA; the Triton interpreter is only for tests)", tensor.device.type)
        return False

    def log_once(self, key: str, message: str, *args: Any) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        log.info(message, *args)

    # ---- selection -------------------------------------------------------------------------------
    @property
    def selector(self) -> KernelSelector:
        """The selector for the current CUDA device's arch (built on first use)."""
        if self._selector is None:
            with self._lock:
                if self._selector is None:
                    self._selector = self._build_selector()
        return self._selector

    def _device_arch(self) -> str:
        if self.arch:
            return self.arch
        if torch.cuda.is_available():
            from tiledispatch.native.arch import arch_for_device_name

            index = torch.cuda.current_device()
            spec = arch_for_device_name(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))
            return spec.name
        return "sm_90"

    def _build_selector(self) -> KernelSelector:
        arch = self._device_arch()
        pool = None
        if self.registry_dir is not None and torch.cuda.is_available():
            from tiledispatch.native.registry import Registry

            try:
                self._registry = Registry.load(self.registry_dir, arch)
                pool = self._registry.configs
            except (OSError, ValueError, KeyError) as error:
                log.warning("tiledispatch: no usable kernel registry at %s (%s); kernels are JIT-compiled on "
                            "first use", self.registry_dir, error)
        return KernelSelector(self.target, mode=self.mode, arch=arch, pool=pool, rule_set=self.rule_set,
                              timeout_s=self.timeout_s, client_options=self.client_options)

    def _jit(self) -> KernelSelector:
        """Local selection over the rule set (JIT), for problems the registry has no kernel for."""
        if self._jit_selector is None:
            self._jit_selector = KernelSelector(mode="local", arch=self.selector.spec, rule_set=self.rule_set)
        return self._jit_selector

    @staticmethod
    def problem(direction: Direction, dtype: torch.dtype, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                groups: int, stride: tuple[int, ...], pad_begin: tuple[int, ...], pad_end: tuple[int, ...],
                dilation: tuple[int, ...]) -> ConvProblem:
        """The :class:`ConvProblem` of one call (PyTorch shapes: ``N, C, *spatial`` and ``K, C/G, *filter``)."""
        return ConvProblem(direction=direction, dtype=_DTYPES[dtype], batch=x_shape[0], groups=groups,
                           in_channels=x_shape[1], out_channels=w_shape[0], input_size=x_shape[2:],
                           filter_size=w_shape[2:], stride=stride, dilation=dilation, pad_begin=pad_begin,
                           pad_end=pad_end)

    def entry(self, direction: Direction, dtype: torch.dtype, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
              groups: int, stride: tuple[int, ...], pad_begin: tuple[int, ...], pad_end: tuple[int, ...],
              dilation: tuple[int, ...], device_type: str) -> Entry:
        """The problem and kernel for one convolution call (cached per shape and parameters)."""
        start = time.perf_counter()
        key = (direction, dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation, device_type)
        found = self._entries.get(key)
        if found is not None:  # the fast path: counted as the selector's cache hits
            stats = self.selector.stats
            stats.cached += 1
            stats.cached_s += time.perf_counter() - start
            return found
        problem = self.problem(direction, dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation)
        selector = self.selector  # built first: building it loads the registry
        if device_type != "cuda":
            entry = Entry(problem, selector.select(problem), "interpret")
        elif self._registry is not None:
            try:
                entry = Entry(problem, selector.select(problem), "compiled", self._registry.loader())
            except SelectionError:
                self.log_once("registry-miss", "tiledispatch: the registry at %s has no kernel for %s; "
                              "JIT-compiling one from the rule set", self.registry_dir, problem.key)
                entry = Entry(problem, self._jit().select(problem), "jit")
        else:
            entry = Entry(problem, selector.select(problem), "jit")
        entry = entry.with_plan()
        self._entries[key] = entry
        return entry

    def native_conv(self, x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...],
                    pad_begin: tuple[int, ...], pad_end: tuple[int, ...], dilation: tuple[int, ...], grad_x: bool,
                    grad_w: bool) -> tuple[int, int, int] | None:
        """The C++ launch path's plan ids ``(forward, backward-data, backward-weight)`` (-1 for a
        gradient that does not flow) for an eager call on these tensors, when every direction it
        needs is routed to our kernel on registry binaries (under ``fastest``: decided on ours, or the
        layer's timing chose all ours on the C++ path) and each plan can run there
        (:mod:`.torch_native`); else None (the Python path serves it, deciding what is undecided).
        Derived from the current entries: a caller keeps the answer for one generation of them."""
        device = self._cpp_device(x)
        if device is None:
            return None
        policy = dispatch.resolve(self._policy, x.device)
        if policy == dispatch.PYTORCH:
            return None
        entries = self._layer_entries(x, weight, groups, stride, pad_begin, pad_end, dilation, grad_x, grad_w)
        if entries is None:
            return None
        if policy == dispatch.FASTEST:
            impls = tuple(e.decision.impl if e.decision is not None else None for e in entries if e is not None)
            if any(impl != dispatch.OURS for impl in impls):
                key = _layer_key(x, weight, groups, stride, pad_begin, pad_end, dilation, grad_x, grad_w)
                layer = self._layers.get((key, impls))
                if (None in impls or self._cost != dispatch.TOTAL or layer is None
                        or layer.route_for(self._cost) != dispatch.OURS_LAYER):
                    return None
        return self._plan_ids(entries, device)

    @staticmethod
    def _cpp_device(x: torch.Tensor) -> int | None:
        """The CUDA device index on which the C++ launch path can serve a call on ``x``: its own, when
        the extension is built and that device is the current one; else None."""
        if not x.is_cuda:
            return None
        from . import torch_native

        if torch_native.extension() is None:
            return None
        device = x.get_device()
        if device != torch.cuda.current_device():
            # A registry's binaries are loaded on the device current at their first use; calls on
            # another device keep the Python path, which switches devices per call.
            return None
        return device

    def _layer_entries(self, x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...],
                       pad_begin: tuple[int, ...], pad_end: tuple[int, ...], dilation: tuple[int, ...], grad_x: bool,
                       grad_w: bool) -> list[Entry | None] | None:
        """The entries of a call's forward, backward-data and backward-weight (None for a gradient that
        does not flow); None when a needed one has not been selected yet."""
        shapes = (tuple(x.shape), tuple(weight.shape), groups, stride, pad_begin, pad_end, dilation, x.device.type)
        entries: list[Entry | None] = []
        for direction, flows in ((Direction.FORWARD, True), (Direction.BACKWARD_DATA, grad_x),
                                 (Direction.BACKWARD_WEIGHT, grad_w)):
            entry = self._entries.get((direction, x.dtype, *shapes)) if flows else None
            if flows and entry is None:
                return None
            entries.append(entry)
        return entries

    def _plan_ids(self, entries: list[Entry | None], device: int) -> tuple[int, int, int] | None:
        """The C++ plan ids of :meth:`_layer_entries`' entries on ``device`` (-1 where no gradient
        flows); None when one of them cannot run on the C++ path."""
        ids = []
        for entry in entries:
            found = -1 if entry is None else self._cpp_plan(entry, device)
            if found is None:
                return None
            ids.append(found)
        return ids[0], ids[1], ids[2]

    def pytorch_serves(self, x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...],
                       pad_begin: tuple[int, ...], pad_end: tuple[int, ...], dilation: tuple[int, ...]) -> bool:
        """Whether every direction this call can run is already settled on PyTorch's convolution
        (policy ``pytorch``, or ``fastest`` decisions for the forward and, when gradients flow, both
        backward directions). The caller may then run ``F.conv`` itself, under PyTorch's own autograd:
        one ``convolution_backward`` for both gradients and none of the custom ops' per-call cost.

        Answers are kept per call key until the entries or a setting change (one dict lookup)."""
        grad = torch.is_grad_enabled()
        key = _layer_key(x, weight, groups, stride, pad_begin, pad_end, dilation, grad and x.requires_grad,
                         grad and weight.requires_grad)
        found = self._serves.get(key)
        if found is not None:
            return found
        generation = self._entries.generation
        answer = self._pytorch_serves(x, weight, groups, stride, pad_begin, pad_end, dilation, key)
        if answer is None:
            # A layer to time, met during a CUDA-graph capture: ours as decided, and nothing derived
            # from this answer may be kept (a TileConv's resolved call, at this generation): bump it.
            self._entries.forget()
            return False
        self._entries.remember(self._serves, key, answer, generation)
        return answer

    def _pytorch_serves(self, x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...],
                        pad_begin: tuple[int, ...], pad_end: tuple[int, ...], dilation: tuple[int, ...],
                        key: tuple) -> bool | None:
        """:meth:`pytorch_serves` from the entries and layer decisions (uncached; ``key``: its cache key).
        None: not known yet, and not to be learnt now (capturing)."""
        policy = dispatch.resolve(self._policy, x.device)
        if policy == dispatch.PYTORCH:
            return True
        if policy != dispatch.FASTEST:
            return False
        x_shape, w_shape, device_type = tuple(x.shape), tuple(weight.shape), x.device.type
        directions = [Direction.FORWARD]
        if torch.is_grad_enabled():
            if x.requires_grad:
                directions.append(Direction.BACKWARD_DATA)
            if weight.requires_grad:
                directions.append(Direction.BACKWARD_WEIGHT)
        impls = []
        for direction in directions:
            found = self._entries.get((direction, x.dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end,
                                       dilation, device_type))
            if found is None or found.decision is None:
                return False  # undecided: the layer's Function decides it on its call
            impls.append(found.decision.impl)
        if all(impl == dispatch.PYTORCH for impl in impls):
            return True
        if self._cost == dispatch.DEVICE:
            return False
        layer = self._layers.get((key, tuple(impls)))
        if layer is None:
            if dispatch.is_capturing(x.device):
                return None
            layer = self._decide_layer(x, weight, groups, stride, pad_begin, pad_end, dilation, key, tuple(impls))
        return layer.native_for(self._cost)

    def _decide_layer(self, x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...],
                      pad_begin: tuple[int, ...], pad_end: tuple[int, ...], dilation: tuple[int, ...], key: tuple,
                      impls: tuple[str, ...]) -> LayerDecision:
        """Time the layer of this call as decided (the autograd Function) and as PyTorch's own
        convolution, forward and the backward of the gradients that flow, on copies of its operands
        (detached: nothing reaches the caller's autograd graph or ``.grad``); kept and logged."""
        from . import torch_native
        from .torch_ops import EagerConv, eager_call

        grads = key[-2:]
        fmt = memory_format(x.dim())
        call = eager_call(self, x.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt), stride,
                          pad_begin, pad_end, dilation, groups)
        with torch.no_grad():
            grad_out = torch.randn_like(pytorch_forward(x, weight, groups, stride, pad_begin, pad_end, dilation))

        # Ours as a TileConv will run it: the C++ launch path where it serves every needed direction.
        plans = self.native_conv(x, weight, groups, stride, pad_begin, pad_end, dilation, *grads)
        # Else, every direction on ours through the C++ path, where that can run the whole layer.
        ours_plans = None
        device = self._cpp_device(x) if plans is None else None
        if device is not None:
            entries = self._layer_entries(x, weight, groups, stride, pad_begin, pad_end, dilation, *grads)
            ours_plans = self._plan_ids(entries, device) if entries is not None else None

        def layer(route: str):
            def run():
                xs = x.detach().requires_grad_(grads[0])
                ws = weight.detach().requires_grad_(grads[1])
                with torch.enable_grad():
                    if route == dispatch.NATIVE:
                        y = pytorch_forward(xs, ws, groups, stride, pad_begin, pad_end, dilation)
                    elif route == dispatch.OURS_LAYER:
                        y = torch_native.conv(xs, ws, None, ours_plans)
                    elif plans is not None:
                        y = torch_native.conv(xs, ws, None, plans)
                    else:
                        y = EagerConv.apply(xs.contiguous(memory_format=fmt), ws.contiguous(memory_format=fmt), call)
                    inputs = [t for t, flows in zip((xs, ws), grads) if flows]
                    if inputs:
                        torch.autograd.grad(y, inputs, grad_out)
            return run

        decision = dispatch.decide_layer(self.timer, layer(dispatch.AS_DECIDED), layer(dispatch.NATIVE), x.device,
                                         layer(dispatch.OURS_LAYER) if ours_plans is not None else None)
        self._layers[(key, impls)] = decision
        self._layer_paths[(key, impls)] = "cpp" if plans is not None else "python"
        problem = self.problem(Direction.FORWARD, x.dtype, tuple(x.shape), tuple(weight.shape), groups, stride,
                               pad_begin, pad_end, dilation)
        dispatch.log_layer_decision(f"{problem.key} (gradients: x {grads[0]}, w {grads[1]})", decision, self._cost)
        return decision

    def layer_report(self) -> list[dict[str, Any]]:
        """One dict per layer timed both ways under ``fastest``: its forward problem key, which gradients
        flow, the decided implementation of each needed direction (fwd, then bwd_data and bwd_weight
        where they flow), each timed route's device and host ms per call (as decided: ``mixed_*``;
        PyTorch's own: ``native_*``; all ours on the C++ path: ``ours_*``, None where not timed), the
        route that serves it under the current ``cost`` (``route``: ``pytorch_own``, ``ours_cpp`` or
        ``as_decided``; ``native``: whether it is PyTorch's own), and the launch path the as-decided
        route was timed on (``ours_path``: ``cpp``, :mod:`.torch_native`, or ``python``)."""
        out = []
        for (key, impls), layer in self._layers.items():
            x_shape, w_shape, dtype, _, groups, stride, pad_begin, pad_end, dilation, grad_x, grad_w = key
            problem = self.problem(Direction.FORWARD, dtype, tuple(x_shape), tuple(w_shape), groups, stride,
                                   pad_begin, pad_end, dilation)
            out.append({"problem": problem.key, "grad_x": grad_x, "grad_w": grad_w, "impls": list(impls),
                        "mixed_ms": layer.mixed.device_ms, "mixed_host_ms": layer.mixed.host_ms,
                        "native_ms": layer.native.device_ms, "native_host_ms": layer.native.host_ms,
                        "ours_ms": layer.ours.device_ms if layer.ours is not None else None,
                        "ours_host_ms": layer.ours.host_ms if layer.ours is not None else None,
                        "route": layer.route_for(self._cost), "native": layer.native_for(self._cost),
                        "decision_s": layer.seconds, "ours_path": self._layer_paths.get((key, impls), "python")})
        return out

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def dispatch_report(self) -> list[dict[str, Any]]:
        """One dict per problem decided under ``fastest``: problem key, direction, our kernel and its
        source, the implementation chosen (``ours``/``pytorch``), both device times and both host
        times per call in ms, what the decision compared (``cost``: ``total`` or ``device``), PyTorch's
        time over ours by that measure (``speedup``), the decision's wall time (``decision_s``) and the
        launch path ours was timed on (``ours_path``: ``cpp`` or ``python``)."""
        return [{"problem": e.problem.key, "direction": e.problem.direction.value, "kernel": e.config.name,
                 "source": e.choice.source, "backend": e.backend, "impl": e.decision.impl,
                 "ours_ms": e.decision.ours_ms, "pytorch_ms": e.decision.pytorch_ms,
                 "ours_host_ms": e.decision.ours_host_ms, "pytorch_host_ms": e.decision.pytorch_host_ms,
                 "cost": e.decision.cost, "speedup": e.decision.speedup, "decision_s": e.decision.seconds,
                 "ours_path": self._decision_paths.get(key, "python")}
                for key, e in list(self._entries.items()) if e.decision is not None]

    def clear(self) -> None:
        """Forget every cached problem, choice and decision (the next call selects and decides again)."""
        self._layers.clear()
        self._layer_paths.clear()
        self._decision_paths.clear()
        self._entries.clear()
        if self._selector is not None:
            self._selector.clear()
        if self._jit_selector is not None:
            self._jit_selector.clear()

    # ---- launching -------------------------------------------------------------------------------
    def run(self, direction: Direction, first: torch.Tensor, second: torch.Tensor, x_shape: tuple[int, ...],
            w_shape: tuple[int, ...], groups: int, stride: tuple[int, ...], pad_begin: tuple[int, ...],
            pad_end: tuple[int, ...], dilation: tuple[int, ...]) -> torch.Tensor:
        """One direction on PyTorch-shaped tensors, by the implementation the policy picks; the result
        is in channels-last memory either way.

        Steady state: one lookup in the routes (the entry and the implementation, policy and
        decision applied; counted as a selection cache hit like :meth:`entry`'s), then the launch or
        PyTorch's convolution; a miss goes through :meth:`_dispatch`, which fills the route."""
        # is_cuda/is_cpu and get_device() answer without building a torch.device (its .type costs
        # several times more); only other devices build one.
        cuda = first.is_cuda
        device_type = "cuda" if cuda else ("cpu" if first.is_cpu else first.device.type)
        dtype = first.dtype
        if (not cuda and self._cpu != "interpret") or dtype not in _DTYPES:
            return reference(direction, first, second, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation)
        if cuda and first.get_device() != torch.cuda.current_device():
            with torch.cuda.device(first.device):
                return self._dispatch((direction, first, second, x_shape, w_shape, groups, stride, pad_begin,
                                       pad_end, dilation))
        start = time.perf_counter()
        route = self._routes.get((direction, dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation,
                                  device_type))
        if route is None:
            return self._dispatch((direction, first, second, x_shape, w_shape, groups, stride, pad_begin, pad_end,
                                   dilation))
        entry, ours = route
        if entry is not None:  # as entry()'s cache hit (which built the selector: no property needed)
            stats = self._selector.stats
            stats.cached += 1
            stats.cached_s += time.perf_counter() - start
        if ours:
            return self._launch(entry, first, second)
        return reference(direction, first, second, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation)

    def _dispatch(self, call: tuple) -> torch.Tensor:
        """``call`` (:meth:`run`'s arguments) on ours or PyTorch's convolution, per the policy (the
        full path: entry, decision; then the call's route is remembered for :meth:`run`)."""
        direction, first, second, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation = call
        device = first.device
        policy = dispatch.resolve(self._policy, device)
        key = (direction, first.dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation, device.type)
        if policy == dispatch.PYTORCH:
            self._entries.remember(self._routes, key, (None, False), self._entries.generation)
            return reference(*call)
        entry = self.entry(direction, first.dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation,
                           device.type)
        if policy == dispatch.FASTEST:
            decision = entry.decision if entry.decision is not None else self._decide(entry, call)
            self._remember_route(key, policy)
            if decision is not None and decision.impl == dispatch.PYTORCH:
                return reference(*call)
        else:
            self._remember_route(key, policy)
        return self._launch(entry, first, second)

    def _remember_route(self, key: tuple, policy: str) -> None:
        """The route of ``key`` from its current entry: ours, or PyTorch's under a ``fastest``
        decision for it; none while undecided under ``fastest`` (the next call decides)."""
        generation = self._entries.generation
        entry = self._entries.get(key)
        if entry is None:
            return
        if policy == dispatch.FASTEST:
            if entry.decision is None:
                return
            ours = entry.decision.impl != dispatch.PYTORCH
        else:
            ours = True
        self._entries.remember(self._routes, key, (entry, ours), generation)

    def _launch(self, entry: Entry, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """Our kernel of ``entry`` on the two operands (copied to aligned channels-last if they are
        not), through the entry's launch plan: checks and pointer binding only."""
        plan = entry.plan if entry.plan is not None else entry.with_plan().plan
        # channels_last()'s checks inline with the plan's format (that of PyTorch-shaped operands;
        # any other rank is not contiguous in it and goes through channels_last as before)
        fmt = plan.memory_format
        if not first.is_contiguous(memory_format=fmt) or first.data_ptr() % 16:
            first = channels_last(first)
        if not second.is_contiguous(memory_format=fmt) or second.data_ptr() % 16:
            second = channels_last(second)
        return plan.run(first, second, check_support=False)

    def _ours_for_timing(self, entry: Entry, first: torch.Tensor, second: torch.Tensor) -> tuple[Any, str]:
        """What ``fastest`` times as ours for one direction, and its launch path: the C++ path's run of the
        entry's plan where that path can serve it (registry binaries on CUDA, the extension built: a
        layer whose directions all go to ours then runs there, at that path's host cost), else
        :meth:`_launch` (``python``)."""
        if first.is_cuda:
            plan_id = self._cpp_plan(entry, first.get_device())
            if plan_id is not None:
                from . import torch_native

                run = torch_native.run
                return (lambda: run(first, second, plan_id)), "cpp"
        return (lambda: self._launch(entry, first, second)), "python"

    @staticmethod
    def _cpp_plan(entry: Entry, device: int) -> int | None:
        """The C++ launch path's id of ``entry``'s plan on ``device``: None unless the entry runs
        registry binaries, the extension is built and the plan packs."""
        if entry.backend != "compiled":
            return None
        from . import torch_native

        if torch_native.extension() is None:
            return None
        plan = entry.plan if entry.plan is not None else entry.with_plan().plan
        return torch_native.plan_id(plan, device)

    def _decide(self, entry: Entry, call: tuple) -> Decision | None:
        """Time ours and PyTorch's on ``call``'s tensors and cache the faster in the entry (one INFO
        line); None while the current stream is being captured into a CUDA graph (nothing timed)."""
        direction, first, second, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation = call
        if dispatch.is_capturing(first.device):
            self.log_once("capture", "tiledispatch: problems first seen during CUDA-graph capture (first: %s) "
                          "run our kernel there, undecided; run an eager step before capturing so that ours and "
                          "PyTorch's are timed first", entry.problem.key)
            return None
        ours, path = self._ours_for_timing(entry, first, second)
        decision = dispatch.decide(self.timer, ours, lambda: reference(*call), first.device, self._cost)
        key = (direction, first.dtype, x_shape, w_shape, groups, stride, pad_begin, pad_end, dilation,
               first.device.type)
        self._decision_paths[key] = path
        self._entries[key] = replace(entry, decision=decision)
        dispatch.log_decision(entry.problem.key, entry.config.name, decision)
        return decision


def _layer_key(x: torch.Tensor, weight: torch.Tensor, groups: int, stride: tuple[int, ...], pad_begin: tuple[int, ...],
               pad_end: tuple[int, ...], dilation: tuple[int, ...], grad_x: bool, grad_w: bool) -> tuple:
    """A call's key in ``pytorch_serves``' answers and the layer decisions (``layer_report`` unpacks it)."""
    return x.shape, weight.shape, x.dtype, x.device.type, groups, stride, pad_begin, pad_end, dilation, grad_x, grad_w


_RUNTIME: Runtime | None = None
_RUNTIME_LOCK = threading.Lock()


def get_runtime() -> Runtime:
    """The process's runtime (built from the environment on first use)."""
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = Runtime()
    return _RUNTIME


def configure(runtime: Runtime | None = None, **settings: Any) -> Runtime:
    """Replace the process's runtime: ``configure(target="host:50051")``, ``configure(cpu="interpret")``,
    or ``configure(Runtime(...))``. Cached choices are dropped."""
    global _RUNTIME
    if runtime is not None and settings:
        raise ValueError("configure: give a Runtime or settings, not both")
    with _RUNTIME_LOCK:
        _RUNTIME = runtime if runtime is not None else Runtime(**settings)
    return _RUNTIME
