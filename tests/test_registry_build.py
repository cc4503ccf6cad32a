"""The ``tiny`` rule set compiles ahead of time for sm_90 on a CPU-only host: within shared memory,
without register spills, in worker processes; a second build compiles nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tiledispatch.native.rules import DEFAULT_FAMILIES

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache = tmp_path_factory.mktemp("registry")
    command = [sys.executable, "-m", "tiledispatch.cli", "registry", "build", "--rule-set", "tiny", "--arch", "sm_90",
               "--workers", "2", "--cache-dir", str(cache)]
    first = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    second = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return cache, first, second


def test_tiny_builds_without_spills_or_shared_memory_overflow(built):
    cache, first, _ = built
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    manifest = json.loads((cache / "manifest-sm_90.json").read_text())
    kernels = manifest["kernels"]
    assert len(kernels) >= 24
    for name, entry in kernels.items():
        assert entry["status"] == "ok", (name, entry)
        assert entry["local_bytes"] == 0 and entry["stack_bytes"] == 0, (name, entry)
        assert entry["shared_bytes"] <= 227 * 1024, (name, entry)
        assert entry["registers"] > 0 and entry["compile_s"] > 0
        for key in entry["programs"].values():
            assert (cache / "artifacts" / key / "kernel.cubin").stat().st_size > 0


def test_second_build_compiles_nothing(built):
    cache, _, second = built
    assert second.returncode == 0, second.stdout[-3000:]
    builds = json.loads((cache / "manifest-sm_90.json").read_text())["builds"]
    assert builds[-1]["compiled"] == 0 and builds[-1]["kernels"] == builds[0]["kernels"]


def test_registry_loads_every_built_kernel_without_compiling(built):
    from tiledispatch.native.registry import Registry

    cache, _, _ = built
    registry = Registry.load(cache, "sm_90")
    assert len(registry) >= 24
    assert {c.family for c in registry.configs} == set(DEFAULT_FAMILIES)  # tiny keeps every default family


def test_the_build_records_a_build_id_per_kernel(built):
    from tiledispatch.native.build_ids import build_ids
    from tiledispatch.native.registry import Registry

    cache, _, _ = built
    registry = Registry.load(cache, "sm_90")
    ids = registry.builds
    assert set(ids) == {c.name for c in registry.configs}
    # The same programs are the same binary: a 2D direct kernel is its 3D twin (2D runs as 3D), while a 2D
    # gmerge forward compiles its depth sizes in and differs from its twin.
    direct = "gconv_fwd_bf16_{}_direct_64x32x1_w4_s1_gm1_sk1_mg1_v1_i32"
    gmerge = "gconv_fwd_bf16_{}_gmerge_64x32x32_w4_s4_gm8_sk1_mg4_v8_i32"
    assert ids[direct.format("2d")] == ids[direct.format("3d")]
    assert ids[gmerge.format("2d")] != ids[gmerge.format("3d")]
    names = sorted(registry.builds)[:5]
    assert build_ids(names) == {name: registry.builds[name] for name in names}  # from the source, no compile


def test_missing_registry_names_the_build_command(tmp_path):
    from tiledispatch.native.registry import Registry

    with pytest.raises(FileNotFoundError, match="registry build"):
        Registry.load(tmp_path, "sm_90")


def test_full_only_tma_tiles_compile_for_sm_90_without_spills(tmp_path):
    """The tma family is in ``full`` only (not in tiny): its measured tiles still compile on this host."""
    from tiledispatch.native.configs import Family, KernelConfig
    from tiledispatch.native.problem import Direction, DType
    from tiledispatch.native.registry import build
    from tiledispatch.native.rules import TMA_MEASURED_TILES, rule_set_configs

    full = set(rule_set_configs("full", directions=["fwd", "bwd_data"], dtypes=["bf16"]))
    chosen = [KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.TMA, 128, 128, 64, 8, 4, 8, 1, 1, 8),
              KernelConfig(Direction.BACKWARD_DATA, DType.BF16, 3, Family.TMA, 64, 64, 16, 4, 4, 8, 1, 1, 8)]
    for config in chosen:
        assert config in full
        assert (config.block_m, config.block_n, config.block_k, config.num_warps, config.num_stages,
                config.group_m) in TMA_MEASURED_TILES
    # Two spawned workers: an in-process build would compile under this session's TRITON_INTERPRET.
    results = build(chosen, arch="sm_90", cache_dir=tmp_path, workers=2, rule_set="full")
    for result in results:
        assert result.status == "ok", (result.kernel, result.status, result.error)
        assert result.local_bytes == 0 and result.stack_bytes == 0 and 0 < result.shared_bytes <= 227 * 1024
        assert len(result.programs) == (3 if "bwd_data" in result.kernel else 2)  # main + pad (+ flip)


def test_channel_pair_kernels_promise_an_even_channel_count_to_the_compiler():
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.launch import template_for
    from tiledispatch.native.registry import _source

    def attrs(name):
        config = parse_kernel_name(name)
        program = template_for(config).programs(config)["run"]
        names = list(program.signature())
        return {names[index]: value for (index,), value in _source(program).attrs.items()}

    pair = attrs("gconv_fwd_bf16_2d_dwrun_8x32x3_w2_s2_gm4_sk1_mg1_v2_i32")
    single = attrs("gconv_fwd_bf16_2d_dwrun_8x16x3_w2_s2_gm4_sk1_mg1_v1_i32")
    assert pair["CHANNELS"] == [["tt.divisibility", 2]]
    assert "CHANNELS" not in single
    assert {k: v for k, v in pair.items() if k != "CHANNELS"} == single  # pointers: 16-byte aligned in both


def test_channel_pair_kernels_compile_to_32_bit_loads_and_stores(built):
    """The even-channel promise reaches the compiler: tiny's vec-2 dwrun binaries move channel pairs (32-bit
    LDG/STG of the activations; the weights, strided by the taps, stay 16-bit), the vec-1 sibling single values."""
    import re
    from pathlib import Path

    import triton

    cache, first, _ = built
    assert first.returncode == 0
    kernels = json.loads((cache / "manifest-sm_90.json").read_text())["kernels"]
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"

    def memory_ops(name):
        cubin = cache / "artifacts" / kernels[name]["programs"]["run"] / "kernel.cubin"
        sass = subprocess.run([str(cuobjdump), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        return set(re.findall(r"\b((?:LDG|STG)\.E(?:\.U16)?)\b", sass))

    for direction in ("fwd", "bwd_data"):
        pair = memory_ops(f"gconv_{direction}_bf16_2d_dwrun_4x32x3_w2_s2_gm4_sk1_mg1_v2_i32")
        single = memory_ops(f"gconv_{direction}_bf16_2d_dwrun_8x16x3_w2_s2_gm4_sk1_mg1_v1_i32")
        assert {"LDG.E", "STG.E"} <= pair and "STG.E.U16" not in pair, pair
        assert single == {"LDG.E.U16", "STG.E.U16"}, single
