"""The crawler's pure parts (no torchvision needed): padding rules and the expansion to problems."""

from __future__ import annotations

from types import SimpleNamespace

from tiledispatch.models.sources import torchvision_crawler as crawler


def _conv(padding, mode="zeros", kernel=(3, 3), dilation=(1, 1)):
    return SimpleNamespace(kernel_size=kernel, dilation=dilation, padding=padding, padding_mode=mode)


def test_same_padding_puts_the_odd_pixel_at_the_end():
    assert crawler._pads(_conv("same", kernel=(4, 3)), (10, 10)) == ((10, 10), (1, 1), (2, 1))
    assert crawler._pads(_conv("valid"), (10, 10)) == ((10, 10), (0, 0), (0, 0))


def test_reflect_padding_is_outside_the_convolution():
    assert crawler._pads(_conv((1, 2), mode="reflect"), (10, 10)) == ((12, 14), (0, 0), (0, 0))


def test_expand_dedups_batches_and_drops_oversized():
    shape = crawler.ConvShape(groups=1, in_channels=64, out_channels=64, input_size=(56, 56),
                              filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1), pad_end=(1, 1))
    huge = crawler.ConvShape(groups=1, in_channels=2048, out_channels=2048, input_size=(512, 512),
                             filter_size=(1, 1), stride=(1, 1), dilation=(1, 1), pad_begin=(0, 0), pad_end=(0, 0))
    a = crawler.ModelResult("net_a", "classification", (1, 3, 224, 224), [shape, shape, huge])
    b = crawler.ModelResult("net_b", "classification", (1, 3, 224, 224), [shape])
    out = crawler.expand([a, b])
    batches = crawler.BATCHES["classification"]
    assert len(out.problems) == len(batches) + sum(
        1 for n in batches if huge.problem(n).input_elements <= crawler.MAX_ELEMENTS)
    meta = [m for m, p in zip(out.meta, out.problems) if p["in_channels"] == 64]
    assert all(m["models"] == ["net_a", "net_b"] and m["group"] == "torchvision:net_a" for m in meta)
    assert out.source["dropped_too_large"] > 0
