"""PyTorch's own test inputs for `F.scaled_dot_product_attention` through
`txbook.efficient.blockwise_attention`.

The same OpInfo samples as `tests/test_opinfo.py` (without dropout): every one must give PyTorch's
numbers in float32 and float64 for several block sizes, including sizes that do not divide the
number of keys, and the gradients of a float64 sample must match those of PyTorch's kernel.
"""
import pytest
import torch

from txbook.efficient import blockwise_attention

pytest.importorskip('expecttest')
from helpers import pytorch_sdpa, samples  # noqa: E402  (OpInfo samples, our argument names)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('block_size', [1, 3, 64])
def test_blockwise_matches_pytorch_on_opinfo_samples(dtype, block_size):
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    s = samples(dtype)
    assert len(s) >= 10
    for q, k, v, kw in s:
        ref = pytorch_sdpa(q, k, v, kw)
        ours = blockwise_attention(q, k, v, block_size=block_size, **kw)
        assert ours.dtype == dtype and ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, **tol, msg=lambda m: f"{tuple(q.shape)} {kw}: {m}")


def test_blockwise_gradients_match_pytorch():
    for q, k, v, kw in samples(torch.float64):
        xs = [t.detach().requires_grad_() for t in (q, k, v)]
        ref = torch.autograd.grad(pytorch_sdpa(*xs, kw).sum(), xs)
        ours = torch.autograd.grad(blockwise_attention(*xs, block_size=3, **kw).sum(), xs)
        for a, b in zip(ours, ref): torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


# FlashAttention-2 in PyTorch (`flash_attention`): the same samples, forward and its hand-written
# backward pass.
from txbook.efficient import flash_attention  # noqa: E402


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('blocks', [(1, 1), (3, 5), (None, 64)])
def test_flash_matches_pytorch_on_opinfo_samples(dtype, blocks):
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    block_q, block_k = blocks
    for q, k, v, kw in samples(dtype):
        ref = pytorch_sdpa(q, k, v, kw)
        ours = flash_attention(q, k, v, block_q=block_q, block_k=block_k, **kw)
        assert ours.dtype == dtype and ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, **tol, msg=lambda m: f"{tuple(q.shape)} {kw}: {m}")


@pytest.mark.parametrize('blocks', [(1, 1), (2, 3), (None, 64)])
def test_flash_gradients_match_pytorch(blocks):
    block_q, block_k = blocks
    g = torch.Generator().manual_seed(0)      # not the global generator: other files share it
    with torch.random.fork_rng():              # OpInfo's samples draw from the global one
        torch.manual_seed(0)
        cases = samples(torch.float64)
    for q, k, v, kw in cases:
        xs = [t.detach().requires_grad_() for t in (q, k, v)]
        out = pytorch_sdpa(*xs, kw)
        dout = torch.randn(out.shape, dtype=out.dtype, generator=g)
        ref = torch.autograd.grad(out, xs, dout)
        ours = torch.autograd.grad(flash_attention(*xs, block_q=block_q, block_k=block_k, **kw),
                                   xs, dout)
        for a, b in zip(ours, ref): torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_flash_training_memory_is_linear():
    """The recomputing backward pass holds no N×N matrix: peak / N stays flat while explicit peak /
    N² does"""
    from txbook.perf import peak_memory
    g = torch.Generator().manual_seed(0)
    peaks = {}
    for N in (512, 1024, 2048):
        q, k, v = (torch.randn(1, 1, N, 32, generator=g).requires_grad_() for _ in range(3))
        dout = torch.randn(1, 1, N, 32, generator=g)
        step = lambda: torch.autograd.grad(flash_attention(q, k, v, block_q=64, block_k=64),
                                           (q, k, v), dout)
        peaks[N] = peak_memory(step)[1]
    assert peaks[2048] < 0.25 * 4 * 2048 ** 2              # a quarter of one N×N float32 matrix
    assert peaks[2048] / peaks[512] < 4.5                  # ~linear (quadratic would be 16)
