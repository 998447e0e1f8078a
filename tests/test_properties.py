"""Property tests (hypothesis) for the core: `txbook.attention`, `txbook.mhsa`, `txbook.blocks`,
RoPE.

Each property is checked on random shapes, masks and inputs that hypothesis draws; the references
are independent of the code under test where that is possible (a float64 softmax written out here,
PyTorch's kernel), and otherwise the property itself (equivariance, causality) is the check.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st, HealthCheck

from txbook.attention import attention, attention_weights, causal_mask
from txbook.mhsa import MultiHeadAttention, KVCache
from txbook.blocks import TransformerBlock, Decoder
from txbook.position import RotaryEmbedding, apply_rope

torch.set_num_threads(1)
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NEG = float('-inf')


@st.composite
def qkv_case(draw, dtype=torch.float64):
    "Random q, k, v with 0-2 leading dims, N, M, Dh, Dv, and a seed for everything random"
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    N, M = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    Dh, Dv = draw(st.integers(1, 9)), draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([None, 0.5, 2.0]))
    mk = lambda *s: torch.randn(*s, generator=g, dtype=dtype)
    return mk(*lead, N, Dh), mk(*lead, M, Dh), mk(*lead, M, Dv), g, scale


def reference(q, k, v, keep=None, bias=None, is_causal=False, scale=None, offset=0):
    """softmax(q kᵀ·scale + bias) v in float64 with a plain loop-free formula; rows with no key give
    0"""
    s = (q.double() @ k.double().mT) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if bias is not None: s = s + bias.double()
    allowed = torch.ones_like(s, dtype=torch.bool)
    if keep is not None: allowed = allowed & keep
    if is_causal: allowed = allowed & torch.ones(s.shape[-2:], dtype=torch.bool).tril(offset)
    allowed = allowed & (s > NEG)
    e = torch.where(allowed, (s - s.masked_fill(~allowed, NEG).amax(-1, keepdim=True)
                              .nan_to_num(neginf=0.0)).exp(), 0.0)
    den = e.sum(-1, keepdim=True)
    w = torch.where(den > 0, e / den.clamp_min(1e-300), 0.0)
    return w @ v.double(), w


@FAST
@given(qkv_case(), st.booleans(), st.booleans())
def test_fused_equals_teaching_path_and_reference_float64(case, use_mask, is_causal):
    q, k, v, g, scale = case
    keep = torch.rand(q.shape[-2], k.shape[-2], generator=g) > 0.4 if use_mask else None
    ref, w_ref = reference(q, k, v, keep, is_causal=is_causal, scale=scale)
    for fused in (True, False):
        y = attention(q, k, v, keep, is_causal=is_causal, scale=scale, fused=fused)
        assert y.dtype == torch.float64
        torch.testing.assert_close(y, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(attention_weights(q, k, keep, is_causal=is_causal, scale=scale),
                               w_ref, atol=1e-12, rtol=1e-10)


@FAST
@given(qkv_case(), st.booleans(), st.integers(0, 8))
def test_causal_offset_matches_reference(case, use_mask, offset):
    "Queries at positions offset..offset+N-1 (a KV cache): query n sees keys 0..n+offset"
    q, k, v, g, scale = case
    keep = torch.rand(q.shape[-2], k.shape[-2], generator=g) > 0.4 if use_mask else None
    ref, w_ref = reference(q, k, v, keep, is_causal=True, scale=scale, offset=offset)
    for fused in (True, False):
        y = attention(q, k, v, keep, is_causal=True, offset=offset, scale=scale, fused=fused)
        torch.testing.assert_close(y, ref, atol=1e-12, rtol=1e-10)
    w = attention_weights(q, k, keep, is_causal=True, offset=offset, scale=scale)
    torch.testing.assert_close(w, w_ref, atol=1e-12, rtol=1e-10)


@FAST
@given(qkv_case(), st.booleans())
def test_weight_rows_sum_to_one_or_zero(case, is_causal):
    q, k, v, g, scale = case
    keep = torch.rand(q.shape[-2], k.shape[-2], generator=g) > 0.5
    w = attention_weights(q, k, keep, is_causal=is_causal, scale=scale)
    allowed = keep & causal_mask(q.shape[-2], k.shape[-2]) if is_causal else keep
    alive = allowed.any(-1)                                            # (N,)
    sums = w.sum(-1)
    assert (w >= 0).all()
    torch.testing.assert_close(sums[..., alive], torch.ones_like(sums[..., alive]))
    # fully masked rows: exactly 0
    assert (sums[..., ~alive] == 0).all()
    assert (w.masked_select(~allowed.expand_as(w)) == 0).all()         # no weight on a blocked key


@FAST
@given(qkv_case(torch.float32), st.booleans(), st.booleans())
def test_bool_mask_equals_float_zero_minus_inf(case, is_causal, fused):
    q, k, v, g, scale = case
    keep = torch.rand(q.shape[-2], k.shape[-2], generator=g) > 0.5
    as_float = torch.zeros(keep.shape).masked_fill(~keep, NEG)
    a = attention(q, k, v, keep, is_causal=is_causal, scale=scale, fused=fused)
    b = attention(q, k, v, as_float, is_causal=is_causal, scale=scale, fused=fused)
    assert not b.isnan().any()
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@FAST
@given(qkv_case(), st.booleans())
def test_float_bias_matches_reference_and_gradients_stay_finite(case, fused):
    q, k, v, g, scale = case
    bias = torch.randn(q.shape[-2], k.shape[-2], generator=g, dtype=torch.float64)
    bias[0] = NEG                                                      # one fully masked row
    ref, _ = reference(q, k, v, bias=bias, scale=scale)
    qg = q.clone().requires_grad_()
    y = attention(qg, k, v, bias, scale=scale, fused=fused)
    torch.testing.assert_close(y, ref, atol=1e-12, rtol=1e-10)
    y.square().sum().backward()
    assert qg.grad.isfinite().all()


@FAST
@given(st.integers(2, 8), st.integers(0, 2**31 - 1))
def test_self_attention_is_permutation_equivariant(N, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(16, 4).double().eval()
    blk = TransformerBlock(16, 4, d_mlp=24).double().eval()
    x = torch.randn(2, N, 16, dtype=torch.float64)
    p = torch.randperm(N)
    with torch.no_grad():
        torch.testing.assert_close(mha(x[:, p]), mha(x)[:, p])
        torch.testing.assert_close(blk(x[:, p]), blk(x)[:, p])


@FAST
@given(st.integers(2, 8), st.integers(0, 7), st.booleans(), st.integers(0, 2**31 - 1))
def test_causality_output_n_ignores_later_tokens(N, n, use_rope, seed):
    n = n % N
    torch.manual_seed(seed)
    rope = RotaryEmbedding(4) if use_rope else None
    blk = TransformerBlock(16, 4, d_mlp=24, rope=rope).double().eval()
    x = torch.randn(1, N, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, n + 1:] = torch.randn_like(x2[:, n + 1:])
    with torch.no_grad():
        y, y2 = blk(x, is_causal=True), blk(x2, is_causal=True)
        torch.testing.assert_close(y[:, :n + 1], y2[:, :n + 1])
        outs = []
        for seq in (x, x2):                                             # the same through a cache:
            # prefix 0..n-1, then the rest
            cache = KVCache()
            if n: blk(seq[:, :n], is_causal=True, cache=cache)
            outs.append(blk(seq[:, n:], is_causal=True, cache=cache))
        torch.testing.assert_close(outs[0], y[:, n:])                  # cache == no cache
        torch.testing.assert_close(outs[1], y2[:, n:])
        torch.testing.assert_close(outs[0][:, 0], outs[1][:, 0])       # position n ignores n+1..


@FAST
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.booleans(), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_cache_equals_no_cache(pieces, use_rope, fused, seed):
    torch.manual_seed(seed)
    N = sum(pieces)
    rope = RotaryEmbedding(4) if use_rope else None
    mha = MultiHeadAttention(16, 4, rope=rope).double().eval()
    mha.fused = fused
    x = torch.randn(2, N, 16, dtype=torch.float64)
    bias = torch.randn(4, N, N, dtype=torch.float64)                   # per-head float mask
    with torch.no_grad():
        full = mha(x, is_causal=True, mask=bias)
        cache, out, t = KVCache(), [], 0
        for n in pieces:
            out.append(mha(x[:, t:t + n], is_causal=True, mask=bias[:, t:t + n, :t + n],
                           cache=cache))
            t += n
    assert len(cache) == N
    torch.testing.assert_close(torch.cat(out, 1), full)


@FAST
@given(st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_decoder_stack_with_caches_equals_full_pass(N, seed):
    torch.manual_seed(seed)
    dec = Decoder(16, 4, 2, d_mlp=24).double().eval()
    x, mem = torch.randn(2, N, 16, dtype=torch.float64), torch.randn(2, 3, 16, dtype=torch.float64)
    with torch.no_grad():
        full = dec(x, mem)
        caches = [KVCache() for _ in dec.blocks]
        steps = [dec(x[:, i:i + 1], mem, caches=caches) for i in range(N)]
    torch.testing.assert_close(torch.cat(steps, 1), full)


@FAST
@given(st.sampled_from([(4, 2), (6, 3), (6, 1), (8, 4)]), st.booleans(), st.integers(0, 2**31 - 1))
def test_grouped_query_attention_matches_pytorch(heads, is_causal, seed):
    hq, hk = heads
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, hq, 5, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, hk, 6, 8, generator=g, dtype=torch.float64) for _ in range(2))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    for fused in (True, False):
        torch.testing.assert_close(attention(q, k, v, is_causal=is_causal, fused=fused), ref)


def test_bad_inputs_raise_value_errors():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 4)
    with pytest.raises(ValueError, match='mask of shape'): attention(q, k, v, torch.ones(5, 6) > 0)
    with pytest.raises(ValueError, match='bool tensor'):
        attention(q, k, v, torch.ones(5, 7, dtype=torch.int))
    with pytest.raises(ValueError, match='one dtype'): attention(q.half(), k, v)
    with pytest.raises(ValueError, match='floating-point'): attention(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match='divide'):
        attention(torch.randn(1, 6, 5, 8), torch.randn(1, 4, 7, 8), torch.randn(1, 4, 7, 4))


@FAST
@given(st.integers(1, 8), st.integers(1, 12), st.integers(0, 50), st.integers(0, 2**31 - 1))
def test_rope_layouts_are_one_rotation_up_to_a_permutation(half_width, N, start, seed):
    """Half-split RoPE = interleaved RoPE with the features permuted; both keep lengths and see
    offsets only"""
    Dh = 2 * half_width
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, N, Dh, generator=g, dtype=torch.float64)
    pos = torch.arange(start, start + N)
    # (2i, 2i+1) -> (i, i + Dh/2)
    perm = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)])
    half = apply_rope(x[..., perm], pos, layout='half')
    torch.testing.assert_close(half, apply_rope(x, pos)[..., perm])
    torch.testing.assert_close(half.norm(dim=-1), x.norm(dim=-1))        # a rotation keeps lengths
    q, k = x[0], x[1]                                                     # logits see offsets only
    s = apply_rope(q, pos, layout='half') @ apply_rope(k, pos, layout='half').mT
    s0 = apply_rope(q, pos - start, layout='half') @ apply_rope(k, pos - start, layout='half').mT
    torch.testing.assert_close(s, s0, atol=1e-4, rtol=1e-4)
