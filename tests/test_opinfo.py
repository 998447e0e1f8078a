"""PyTorch's own test inputs for `F.scaled_dot_product_attention` through
`txbook.attention.attention`.

The samples come from PyTorch's OpInfo database
(`torch.testing._internal.common_methods_invocations.op_db`, entry
`nn.functional.scaled_dot_product_attention`): shapes with and without a head dimension, queries and
keys of different lengths and ranks, `is_causal`, and float (additive) `attn_mask`s. Every sample
except those with dropout (random by definition) must give PyTorch's numbers on both of our paths,
in float32 and float64. In bfloat16 and float16 the teaching path must be at least half as accurate
as PyTorch's kernel, measured against float64. Needs the `expecttest` package (imported by PyTorch's
test utilities).
"""
import pytest
import torch

from txbook.attention import attention

pytest.importorskip('expecttest')
from helpers import pytorch_sdpa, samples  # noqa: E402  (OpInfo samples, our argument names)


def test_there_are_samples_and_float_masks():
    s = samples(torch.float32)
    assert len(s) >= 10
    assert any(kw.get('mask') is not None and kw['mask'].is_floating_point() for *_, kw in s)
    assert any(kw.get('is_causal') for *_, kw in s)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('fused', [True, False])
def test_opinfo_samples_match_pytorch(dtype, fused):
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    for q, k, v, kw in samples(dtype):
        ref = pytorch_sdpa(q, k, v, kw)
        ours = attention(q, k, v, fused=fused, **kw)
        assert ours.dtype == dtype and ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, **tol, msg=lambda m: f"{tuple(q.shape)} {kw}: {m}")


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_half_precision_teaching_path_within_twice_pytorch_error(dtype):
    worst = 0.0
    for q, k, v, kw in samples(dtype):
        q64, k64, v64 = q.double(), k.double(), v.double()
        kw64 = {n: (t.double() if torch.is_tensor(t) and t.is_floating_point() else t)
                for n, t in kw.items()}
        exact = pytorch_sdpa(q64, k64, v64, kw64)
        err_torch = (pytorch_sdpa(q, k, v, kw).double() - exact).abs().max().item()
        ours = attention(q, k, v, fused=False, **kw)
        assert ours.dtype == dtype
        err_ours = (ours.double() - exact).abs().max().item()
        # when PyTorch happens to be exact
        ulp = torch.finfo(dtype).eps * exact.abs().max().item()
        assert err_ours <= 2 * err_torch + ulp, (tuple(q.shape), kw.keys(), err_ours, err_torch)
        worst = max(worst, err_ours / max(err_torch, ulp))
    print(f"{dtype}: worst ratio of our error to PyTorch's {worst:.2f}")


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_half_precision_large_logits_stay_finite(dtype):
    g = torch.Generator().manual_seed(0)
    q = (40 * torch.randn(2, 3, 9, 64, generator=g)).to(dtype)        # |q·q| ≫ 65504
    for fused in (True, False):
        y = attention(q, q, q, scale=1.0, fused=fused)
        assert y.isfinite().all()
        ref = attention(q.double(), q.double(), q.double(), scale=1.0)
        torch.testing.assert_close(y.double(), ref, atol=0.5, rtol=0.02)
