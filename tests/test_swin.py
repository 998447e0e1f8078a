"""Property and parity tests for `txbook.swin` (chapter 08), beyond the chapter's own checks.

- window_partition / window_reverse: exact inverses, and equal to an explicit `unfold` on random shapes;
- shifted_window_mask: allows exactly the pairs whose offset survives the cyclic roll (computed here from
  coordinates, without the region labels);
- SwinBlock.window_attention: equal to one global attention restricted to the naive, border-clipped
  shifted windows (no roll, no partition);
- Swin.from_hf: logits of random Hugging Face Swin models (random configurations drawn by hypothesis,
  padded stages included) within 1e-4 in float32 and 1e-10 in float64, dtype kept.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck

from txbook.swin import window_partition, window_reverse, shifted_window_mask, SwinBlock, Swin, _pair

torch.set_num_threads(1)
FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(B=st.integers(1, 3), nh=st.integers(1, 4), nw=st.integers(1, 4), M=st.integers(1, 5),
       D=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_partition_reverse(B, nh, nw, M, D, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, nh * M, nw * M, D, generator=g)
    w = window_partition(x, M)
    ref = x.unfold(1, M, M).unfold(2, M, M).permute(0, 1, 2, 4, 5, 3).reshape(-1, M * M, D)
    assert torch.equal(w, ref)
    assert torch.equal(window_reverse(w, M, nh * M, nw * M), x)
    w2 = torch.randn(B * nh * nw, M * M, D, generator=g)
    assert torch.equal(window_partition(window_reverse(w2, M, nh * M, nw * M), M), w2)


def no_wrap_pairs(H, W, M, S):
    rr, cc = torch.meshgrid(torch.arange(H), torch.arange(W), indexing='ij')
    coords = torch.stack([rr, cc], -1)
    rolled = torch.roll(coords, shifts=(-S, -S), dims=(0, 1))
    ow, hw = window_partition(rolled[None].float(), M), window_partition(coords[None].float(), M)
    return ((ow[:, :, None] - ow[:, None, :]) == (hw[:, :, None] - hw[:, None, :])).all(-1)


@FAST
@given(nh=st.integers(1, 4), nw=st.integers(1, 4), M=st.integers(1, 6), data=st.data())
def test_mask_never_crosses_a_wrapped_border(nh, nw, M, data):
    S = data.draw(st.integers(0, M - 1))
    assert torch.equal(shifted_window_mask(nh * M, nw * M, M, S), no_wrap_pairs(nh * M, nw * M, M, S))


@FAST
@given(nh=st.integers(2, 3), nw=st.integers(2, 3), M=st.integers(2, 4), heads=st.integers(1, 2),
       seed=st.integers(0, 2**31 - 1))
def test_cyclic_shift_equals_naive_shifted_windows(nh, nw, M, heads, seed):
    torch.manual_seed(seed)
    H, W, S, D = nh * M, nw * M, M // 2, 4 * heads
    blk = SwinBlock(D, heads, M, S).double().eval()
    with torch.no_grad():
        blk.attn.rel_bias.table.normal_()
        x = torch.randn(2, H, W, D, dtype=torch.float64)
        r, c = torch.arange(H).repeat_interleave(W), torch.arange(W).repeat(H)
        gr, gc = (r + M - S) // M, (c + M - S) // M
        same = (gr[:, None] == gr[None]) & (gc[:, None] == gc[None])
        idx = ((r[:, None] - r[None] + M - 1) * (2 * M - 1) + c[:, None] - c[None] + M - 1)
        bias = blk.attn.rel_bias.table[idx.clamp(0, (2 * M - 1) ** 2 - 1)].permute(2, 0, 1)
        ref = blk.attn.attn(x.reshape(2, H * W, D), mask=bias.masked_fill(~same, float('-inf')))
        torch.testing.assert_close(blk.window_attention(x), ref.view(2, H, W, D), rtol=1e-10, atol=1e-10)


@st.composite
def hf_config(draw):
    "A small random SwinConfig that Hugging Face can run and `Swin` accepts (padded stages allowed)"
    M = draw(st.integers(2, 5))
    n_stages = draw(st.integers(1, 3))
    # last stage side >= M; every merged stage even
    last = [draw(st.integers(M, M + 3)) for _ in range(2)]
    grid = [s * 2 ** (n_stages - 1) for s in last]
    P = draw(st.sampled_from([1, 2, 4]))
    heads = [draw(st.sampled_from([1, 2])) for _ in range(n_stages)]
    return dict(image_size=(grid[0] * P, grid[1] * P), patch_size=P, num_channels=draw(st.sampled_from([1, 3])),
                embed_dim=4 * draw(st.integers(1, 3)) * 2, depths=[draw(st.integers(1, 2)) for _ in heads],
                num_heads=heads, window_size=M, mlp_ratio=draw(st.sampled_from([1.0, 2.0, 4.0])),
                qkv_bias=draw(st.booleans()), use_absolute_embeddings=draw(st.booleans()),
                hidden_act=draw(st.sampled_from(['gelu', 'gelu_new', 'relu'])),
                layer_norm_eps=draw(st.sampled_from([1e-5, 1e-6])), num_labels=draw(st.integers(1, 5)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=hf_config(), dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 1000))
def test_from_hf_matches_random_configs(cfg, dtype, seed):
    transformers = pytest.importorskip('transformers')
    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    hf = transformers.SwinForImageClassification(transformers.SwinConfig(**cfg))
    with torch.no_grad():
        for p in hf.parameters(): p.add_(torch.randn_like(p) * 0.1)
    hf = hf.eval().to(dtype)
    ours = Swin.from_hf(hf).eval()
    assert ours.head.weight.dtype == dtype
    x = torch.randn(2, cfg['num_channels'], *_pair(cfg['image_size']), dtype=dtype)
    with torch.no_grad():
        d = (hf(pixel_values=x).logits - ours(x)).abs().max().item()
    assert d < (1e-4 if dtype == torch.float32 else 1e-10), (cfg, d)
