"""Arch specs (sm_80, sm_89, sm_90) and their lookup."""

from __future__ import annotations

import dataclasses

import pytest

from tiledispatch.native.arch import (
    ARCH_SPECS,
    DEFAULT_DEVICE_FOR_ARCH,
    ArchError,
    ArchSpec,
    arch_for_device_name,
    get_arch,
)
from tiledispatch.native.problem import DType

KIB = 1024
SPECS = list(ARCH_SPECS.values())


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_spec_fields_are_positive_and_consistent(spec: ArchSpec):
    for field in dataclasses.fields(ArchSpec):
        value = getattr(spec, field.name)
        if isinstance(value, str):
            assert value, field.name
        else:
            assert not isinstance(value, bool) and value > 0, field.name
    assert spec.arch == f"sm_{spec.compute_capability}"
    assert ARCH_SPECS[spec.name] is spec
    assert spec.smem_per_block_bytes <= spec.smem_per_sm_bytes
    assert spec.max_registers_per_thread == 255
    assert spec.peak_fp32_fma_tflops < spec.peak_tf32_tflops <= spec.peak_bf16_tflops
    for dtype in DType:
        assert spec.peak_tflops(dtype) > 0
    assert spec.peak_tflops(DType.BF16) == spec.peak_bf16_tflops
    assert spec.peak_tflops(DType.FP16) == spec.peak_fp16_tflops
    assert spec.peak_tflops(DType.FP32) == spec.peak_tf32_tflops


def test_expected_targets_are_present():
    assert {s.arch for s in SPECS} == {"sm_80", "sm_89", "sm_90"}
    assert {"h100_sxm", "h100_pcie", "h200", "a100_sxm", "l40s"} <= set(ARCH_SPECS)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.arch == "sm_90"], ids=lambda s: s.name)
def test_hopper_has_227_kib_per_block(spec):
    assert spec.smem_per_block_bytes == 227 * KIB
    assert spec.smem_per_sm_bytes == 228 * KIB


def test_smaller_arches_have_less_shared_memory():
    hopper = get_arch("sm_90").smem_per_block_bytes
    assert get_arch("sm_80").smem_per_block_bytes == 163 * KIB < hopper
    assert get_arch("sm_89").smem_per_block_bytes == 99 * KIB < hopper


def test_h200_versus_h100():
    h200, h100 = get_arch("h200"), get_arch("h100_sxm")
    assert h200.memory_bandwidth_gbs > h100.memory_bandwidth_gbs
    assert h200.l2_bytes >= h100.l2_bytes and h200.sms == h100.sms == 132
    assert get_arch("h100_pcie").sms < h100.sms


@pytest.mark.parametrize("name, expected", [
    ("h200", "h200"), ("H200", "h200"), ("h100_sxm", "h100_sxm"), ("H100-SXM", "h100_sxm"),
    ("h100_pcie", "h100_pcie"), ("a100_sxm", "a100_sxm"), ("l40s", "l40s"),
    ("sm_90", "h200"), ("SM_90", "h200"), ("sm-90", "h200"), ("sm_80", "a100_sxm"), ("sm_89", "l40s"),
])
def test_get_arch(name, expected):
    assert get_arch(name) is ARCH_SPECS[expected]


def test_default_device_for_each_target_matches_it():
    for target, device in DEFAULT_DEVICE_FOR_ARCH.items():
        assert ARCH_SPECS[device].arch == target


@pytest.mark.parametrize("name", ["sm_75", "sm_100", "v100", "h300", "", "sm90"])
def test_unknown_arch_errors(name):
    with pytest.raises(ArchError, match="arch") as info:
        get_arch(name)
    assert repr(name) in str(info.value)
    assert "h200" in str(info.value) and "sm_90" in str(info.value)  # says what is known
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("device, capability, expected", [
    ("NVIDIA H200", (9, 0), "h200"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "h100_sxm"),
    ("NVIDIA H100 PCIe", (9, 0), "h100_pcie"),
    ("NVIDIA A100-SXM4-80GB", (8, 0), "a100_sxm"),
    ("NVIDIA L40S", (8, 9), "l40s"),
    ("Some Future Hopper", (9, 0), "h200"),        # unknown name: by compute capability
    ("Some Ampere", (8, 0), "a100_sxm"),
])
def test_arch_for_device_name(device, capability, expected):
    assert arch_for_device_name(device, capability) is ARCH_SPECS[expected]


def test_arch_for_unknown_device_and_capability_errors():
    with pytest.raises(ArchError):
        arch_for_device_name("Tesla T4", (7, 5))
