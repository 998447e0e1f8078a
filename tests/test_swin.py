"""Property and parity tests for `txbook.windows` and `txbook.swin` (chapters 11 and 12), beyond the
chapters' own checks.

- window_partition / window_reverse: exact inverses, and equal to an explicit `unfold` on random
  shapes;
- shifted_window_mask: allows exactly the pairs whose offset survives the cyclic roll (computed here
  from coordinates, without the region labels);
- SwinBlock.window_attention: equal to one global attention restricted to the naive, border-clipped
  shifted windows (no roll, no partition);
- Swin.no_weight_decay: the tensors Swin's recipe keeps out of weight decay, found through Hugging
  Face's names;
- Swin.from_hf: logits of random Hugging Face Swin models (random configurations drawn by
  hypothesis, padded stages included) within 1e-4 in float32 and 1e-10 in float64, dtype kept; every
  tensor of a state dict removed in turn is a ValueError naming it (not a KeyError), and so is an
  unknown one.
"""
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck

from txbook.foreign import pair
from txbook.windows import window_partition, window_reverse, shifted_window_mask, SwinBlock
from txbook.swin import Swin

torch.set_num_threads(1)
FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(B=st.integers(1, 3), nh=st.integers(1, 4), nw=st.integers(1, 4), G=st.integers(1, 5),
       D=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_partition_reverse(B, nh, nw, G, D, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, nh * G, nw * G, D, generator=g)
    w = window_partition(x, G)
    ref = x.unfold(1, G, G).unfold(2, G, G).permute(0, 1, 2, 4, 5, 3).reshape(-1, G * G, D)
    assert torch.equal(w, ref)
    assert torch.equal(window_reverse(w, G, nh * G, nw * G), x)
    w2 = torch.randn(B * nh * nw, G * G, D, generator=g)
    assert torch.equal(window_partition(window_reverse(w2, G, nh * G, nw * G), G), w2)


def no_wrap_pairs(h, w, G, s):
    rr, cc = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    coords = torch.stack([rr, cc], -1)
    rolled = torch.roll(coords, shifts=(-s, -s), dims=(0, 1))
    ow, hw = window_partition(rolled[None].float(), G), window_partition(coords[None].float(), G)
    return ((ow[:, :, None] - ow[:, None, :]) == (hw[:, :, None] - hw[:, None, :])).all(-1)


@FAST
@given(nh=st.integers(1, 4), nw=st.integers(1, 4), G=st.integers(1, 6), data=st.data())
def test_mask_never_crosses_a_wrapped_border(nh, nw, G, data):
    s = data.draw(st.integers(0, G - 1))
    assert torch.equal(shifted_window_mask(nh * G, nw * G, G, s),
                       no_wrap_pairs(nh * G, nw * G, G, s))


@FAST
@given(nh=st.integers(2, 3), nw=st.integers(2, 3), G=st.integers(2, 4), heads=st.integers(1, 2),
       seed=st.integers(0, 2**31 - 1))
def test_cyclic_shift_equals_naive_shifted_windows(nh, nw, G, heads, seed):
    torch.manual_seed(seed)
    h, w, s, D = nh * G, nw * G, G // 2, 4 * heads
    blk = SwinBlock(D, heads, G, s).double().eval()
    with torch.no_grad():
        blk.attn.rel_bias.table.normal_()
        x = torch.randn(2, h, w, D, dtype=torch.float64)
        r, c = torch.arange(h).repeat_interleave(w), torch.arange(w).repeat(h)
        gr, gc = (r + G - s) // G, (c + G - s) // G
        same = (gr[:, None] == gr[None]) & (gc[:, None] == gc[None])
        idx = ((r[:, None] - r[None] + G - 1) * (2 * G - 1) + c[:, None] - c[None] + G - 1)
        bias = blk.attn.rel_bias.table[idx.clamp(0, (2 * G - 1) ** 2 - 1)].permute(2, 0, 1)
        ref = blk.attn.attn(x.reshape(2, h * w, D), mask=bias.masked_fill(~same, float('-inf')))
        torch.testing.assert_close(blk.window_attention(x), ref.view(2, h, w, D), rtol=1e-10,
                                   atol=1e-10)


@st.composite
def hf_config(draw):
    "A small random SwinConfig that Hugging Face can run and `Swin` accepts (padded stages allowed)"
    G = draw(st.integers(2, 5))
    n_stages = draw(st.integers(1, 3))
    # last stage side >= G (the window); every merged stage even
    last = [draw(st.integers(G, G + 3)) for _ in range(2)]
    grid = [s * 2 ** (n_stages - 1) for s in last]
    S = draw(st.sampled_from([1, 2, 4]))
    heads = [draw(st.sampled_from([1, 2])) for _ in range(n_stages)]
    return dict(image_size=(grid[0] * S, grid[1] * S), patch_size=S,
                num_channels=draw(st.sampled_from([1, 3])),
                embed_dim=4 * draw(st.integers(1, 3)) * 2,
                depths=[draw(st.integers(1, 2)) for _ in heads],
                num_heads=heads, window_size=G, mlp_ratio=draw(st.sampled_from([1.0, 2.0, 4.0])),
                qkv_bias=draw(st.booleans()), use_absolute_embeddings=draw(st.booleans()),
                hidden_act=draw(st.sampled_from(['gelu', 'gelu_new', 'relu'])),
                layer_norm_eps=draw(st.sampled_from([1e-5, 1e-6])),
                num_labels=draw(st.integers(1, 5)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=hf_config(), dtype=st.sampled_from([torch.float32, torch.float64]),
       seed=st.integers(0, 1000))
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
    x = torch.randn(2, cfg['num_channels'], *pair(cfg['image_size']), dtype=dtype)
    with torch.no_grad():
        d = (hf(pixel_values=x).logits - ours(x)).abs().max().item()
    assert d < (1e-4 if dtype == torch.float32 else 1e-10), (cfg, d)


def test_from_hf_names_every_missing_or_unknown_tensor():
    transformers = pytest.importorskip('transformers')
    transformers.logging.set_verbosity_error()
    from txbook.swin import swin_hf_state_dict
    cfg = transformers.SwinConfig(image_size=16, patch_size=2, embed_dim=8, depths=[2, 1],
                                  num_heads=[1, 2],
                                  window_size=4, use_absolute_embeddings=True, num_labels=3)
    sd = transformers.SwinForImageClassification(cfg).state_dict()
    keys = [k for k in sd if not k.endswith('relative_position_index')]
    swin_hf_state_dict(sd, cfg)                          # the whole state dict: every tensor used
    for key in keys:
        with pytest.raises(ValueError, match=f"no tensor '{key}'"):
            swin_hf_state_dict({k: v for k, v in sd.items() if k != key}, cfg)
    with pytest.raises(ValueError, match=r"does not know these tensors: \['swin.extra'\]"):
        swin_hf_state_dict({**sd, 'swin.extra': torch.zeros(1)}, cfg)


@pytest.mark.parametrize("abs_pos,rel_pos",
                         [(True, True), (False, True), (True, False), (False, False)])
def test_no_weight_decay_names_the_tables_the_official_recipe_exempts(abs_pos, rel_pos):
    """Swin's recipe keeps `absolute_pos_embed` and every `relative_position_bias_table` out of
    weight decay (its `no_weight_decay` and `no_weight_decay_keywords`); ours names the same
    tensors, as `named_parameters` spells them. The tensors are found through the Hugging Face names
    (the official code's) and the loader's mapping, not through our names."""
    transformers = pytest.importorskip('transformers')
    transformers.logging.set_verbosity_error()
    from txbook.swin import swin_hf_state_dict
    cfg = transformers.SwinConfig(image_size=32, patch_size=2, embed_dim=8, depths=[2, 3],
                                  num_heads=[1, 2],
                                  window_size=4, use_absolute_embeddings=abs_pos, num_labels=3)
    sd = transformers.SwinForImageClassification(cfg).state_dict()
    exempt = {t.data_ptr() for k, t in sd.items()
              if 'relative_position_bias_table' in k
              or k.endswith('embeddings.position_embeddings')}
    ours = swin_hf_state_dict(sd, cfg)                    # our name -> the same tensor
    want = {k for k, t in ours.items() if t.data_ptr() in exempt}
    m = Swin(img_size=32, patch_size=2, in_chans=3, n_classes=3, d_model=8, depths=(2, 3),
             n_heads=(1, 2), window=4, abs_pos=abs_pos, rel_pos=rel_pos)
    names = m.no_weight_decay()
    assert names <= dict(m.named_parameters()).keys()
    assert len(names) == abs_pos + rel_pos * (2 + 3)
    if rel_pos:
        # Hugging Face's Swin always has the tables
        assert names == want
    else:
        assert names == {k for k in want if 'rel_bias' not in k}
