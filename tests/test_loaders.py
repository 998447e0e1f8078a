"""Weight loaders refuse or match: `GPT.from_hf` and `ViT.from_hf` against random Hugging Face
models.

For every option the loaders support, our model must give Hugging Face's logits (float32 to 1e-4;
float64 to 1e-12), hold bit-identical weights (`torch.equal`) in the source dtype (float32, float64,
bfloat16), and an option they cannot express must raise `ValueError` naming it. The configurations
include those of Hugging Face's own model testers (`GPT2ModelTester`, `ViTModelTester` in
transformers' test suite). Nothing is downloaded.
"""
import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, ViTConfig, ViTForImageClassification
from transformers.utils import logging as hf_logging

from txbook.gpt import GPT, gpt2_config
from txbook.vit import ViT

hf_logging.set_verbosity_error()

# -------------------------------------------------------------------------------------------- GPT-2

GPT2_BASE = dict(vocab_size=61, n_positions=24, n_embd=32, n_layer=3, n_head=4, bos_token_id=0,
                 eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
# transformers' GPT2ModelTester: vocab 99, width 32, 2 layers, 4 heads, MLP 37, exact GELU, dropout
# 0.1
GPT2_TESTER = dict(vocab_size=99, n_positions=512, n_embd=32, n_layer=2, n_head=4, n_inner=37,
                   activation_function='gelu', resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                   initializer_range=0.02, bos_token_id=98, eos_token_id=98, pad_token_id=98)

GPT2_SUPPORTED = {
    'defaults': {},
    'untied head': dict(tie_word_embeddings=False),
    'no 1/sqrt(Dh)': dict(scale_attn_weights=False),
    'inverse layer idx': dict(scale_attn_by_inverse_layer_idx=True),
    'both scales off/on': dict(scale_attn_weights=False, scale_attn_by_inverse_layer_idx=True),
    'n_inner 40': dict(n_inner=40),
    'gelu': dict(activation_function='gelu'),
    'relu': dict(activation_function='relu'),
    'gelu_pytorch_tanh': dict(activation_function='gelu_pytorch_tanh'),
    'layer_norm_epsilon': dict(layer_norm_epsilon=1e-2),
    'reorder_and_upcast fp32': dict(reorder_and_upcast_attn=True),
    'eager attention': dict(attn_implementation='eager'),
    'eager + reorder_and_upcast': dict(attn_implementation='eager', reorder_and_upcast_attn=True),
    'dropout (eval mode)': dict(resid_pdrop=0.3, embd_pdrop=0.2, attn_pdrop=0.1),
    'everything at once': dict(tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=True,
                               n_inner=48, activation_function='relu', layer_norm_epsilon=1e-4),
}


def random_gpt2(seed=0, dtype=torch.float32, **cfg):
    torch.manual_seed(seed)
    attn = cfg.pop('attn_implementation', None)
    config = GPT2Config(**cfg)
    if attn: config._attn_implementation = attn
    hf = GPT2LMHeadModel(config).eval()
    with torch.no_grad():   # non-trivial LayerNorm parameters, so that every copied tensor matters
        for name, p in hf.named_parameters():
            if '.ln_' in name or 'ln_f' in name: p.add_(torch.randn_like(p) * 0.1)
    return hf.to(dtype)


def assert_same_gpt2_weights(ours, hf):
    sd = {k.removeprefix('transformer.'): v for k, v in hf.state_dict().items()}
    assert torch.equal(ours.tok_emb.weight, sd['wte.weight'])
    assert torch.equal(ours.pos_emb.weight, sd['wpe.weight'])
    assert torch.equal(ours.head.weight, sd['lm_head.weight'])
    for i, blk in enumerate(ours.blocks):
        assert torch.equal(blk.attn.to_qkv.weight, sd[f'h.{i}.attn.c_attn.weight'].T)
        assert torch.equal(blk.mlp.fc2.bias, sd[f'h.{i}.mlp.c_proj.bias'])
        assert torch.equal(blk.norm1.weight, sd[f'h.{i}.ln_1.weight'])
    for p in ours.parameters(): assert p.dtype == sd['wte.weight'].dtype


@pytest.mark.parametrize('name', list(GPT2_SUPPORTED))
def test_gpt2_supported_options_match(name):
    hf = random_gpt2(**{**GPT2_BASE, **GPT2_SUPPORTED[name]})
    ours = GPT.from_hf(hf).eval()
    assert_same_gpt2_weights(ours, hf)
    ids = torch.randint(0, 61, (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(): diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff < 1e-4, (name, diff)


def test_gpt2_untied_head_is_separate():
    hf = random_gpt2(**GPT2_BASE, tie_word_embeddings=False)
    ours = GPT.from_hf(hf)
    assert ours.head.weight is not ours.tok_emb.weight and not ours.cfg.tie_weights
    tied = GPT.from_hf(random_gpt2(**GPT2_BASE))
    assert tied.head.weight is tied.tok_emb.weight and tied.cfg.tie_weights


def test_gpt2_per_layer_scale():
    cfg = gpt2_config(GPT2Config(**GPT2_BASE, scale_attn_by_inverse_layer_idx=True))
    ours = GPT(cfg)
    assert [blk.attn.scale for blk in ours.blocks] == [8 ** -0.5 / (l + 1) for l in range(3)]
    cfg = gpt2_config(GPT2Config(**GPT2_BASE, scale_attn_weights=False))
    assert all(blk.attn.scale == 1.0 for blk in GPT(cfg).blocks)


def test_gpt2_hf_tester_config_and_generate():
    hf = random_gpt2(**GPT2_TESTER, scale_attn_by_inverse_layer_idx=True)
    ours = GPT.from_hf(hf).eval()
    # tester's B, N
    ids = torch.randint(0, 99, (14, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(): diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff < 1e-4, diff
    out = hf.generate(ids[:2, :4], max_new_tokens=12, do_sample=False, pad_token_id=98)
    assert torch.equal(ours.generate(ids[:2, :4], 12, temperature=0), out)


@pytest.mark.parametrize('extra',
                         [{}, dict(tie_word_embeddings=False, scale_attn_by_inverse_layer_idx=True,
                                            n_inner=40, activation_function='gelu')])
def test_gpt2_float64_bit_exact(extra):
    hf = random_gpt2(dtype=torch.float64, **GPT2_BASE, **extra)
    ours = GPT.from_hf(hf).eval()
    assert_same_gpt2_weights(ours, hf)
    ids = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(): diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff < 1e-12, diff


def test_gpt2_bfloat16_keeps_dtype():
    hf = random_gpt2(dtype=torch.bfloat16, **GPT2_BASE, tie_word_embeddings=False)
    ours = GPT.from_hf(hf).eval()
    assert_same_gpt2_weights(ours, hf)
    ids = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = GPT.from_hf(hf.float()).eval()(ids)         # the same weights, computed in float32
        assert ours(ids).dtype == torch.bfloat16
        assert (ours(ids).float() - ref).abs().max().item() < 0.25   # bf16 rounding only


GPT2_REFUSED = {
    "activation_function='silu'": dict(activation_function='silu'),
    "activation_function='quick_gelu'": dict(activation_function='quick_gelu'),
    'add_cross_attention=True': dict(add_cross_attention=True),
}


@pytest.mark.parametrize('msg', list(GPT2_REFUSED))
def test_gpt2_refused_options_raise(msg):
    hf = random_gpt2(**GPT2_BASE, **GPT2_REFUSED[msg])
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace(')', r'\)')):
        GPT.from_hf(hf)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_gpt2_upcast_attention_in_half_precision_is_refused(dtype):
    hf = random_gpt2(dtype=dtype, **GPT2_BASE, reorder_and_upcast_attn=True)
    with pytest.raises(ValueError, match='reorder_and_upcast_attn=True'):
        GPT.from_hf(hf)


def test_gpt2_pruned_heads_refused():
    hf = random_gpt2(**GPT2_BASE)
    hf.config.pruned_heads = {0: [1]}
    with pytest.raises(ValueError, match='pruned_heads'):
        GPT.from_hf(hf)


def test_gpt2_unknown_tensor_refused():
    hf = random_gpt2(**GPT2_BASE)
    sd = hf.state_dict()
    sd['transformer.h.0.attn.q_attn.weight'] = torch.zeros(32, 32)   # e.g. a cross-attention weight
    from txbook.gpt import gpt2_state_dict
    with pytest.raises(ValueError, match='q_attn'):
        gpt2_state_dict(sd, gpt2_config(hf.config))


# ---------------------------------------------------------------------------------------------- ViT

VIT_BASE = dict(image_size=(24, 32), patch_size=8, num_channels=3, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, num_labels=5)
# transformers' ViTModelTester: image 30, patch 2, width 32, 2 layers, 4 heads, MLP 37, 10 labels
VIT_TESTER = dict(image_size=30, patch_size=2, num_channels=3, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=37, hidden_act='gelu',
                  hidden_dropout_prob=0.1,
                  attention_probs_dropout_prob=0.1, initializer_range=0.02, encoder_stride=2,
                  num_labels=10)

VIT_SUPPORTED = {
    'defaults': {},
    'no qkv bias': dict(qkv_bias=False),
    'patch pair': dict(patch_size=(8, 8)),
    'image pair + patch pair': dict(image_size=[16, 24], patch_size=[4, 4]),
    'gelu_new': dict(hidden_act='gelu_new'),
    'gelu_pytorch_tanh': dict(hidden_act='gelu_pytorch_tanh'),
    'relu': dict(hidden_act='relu'),
    'layer_norm_eps': dict(layer_norm_eps=1e-3),
    'one channel': dict(num_channels=1),
    'encoder_stride / pooler options': dict(encoder_stride=4, pooler_output_size=7,
                                            pooler_act='relu'),
    'eager attention': dict(attn_implementation='eager'),
    'dropout (eval mode)': dict(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.2),
}


def random_vit(seed=0, dtype=torch.float32, **cfg):
    torch.manual_seed(seed)
    attn = cfg.pop('attn_implementation', None)
    config = ViTConfig(**cfg)
    if attn: config._attn_implementation = attn
    hf = ViTForImageClassification(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if 'layernorm' in name or name.endswith('bias'): p.add_(torch.randn_like(p) * 0.1)
    return hf.to(dtype)


def pixels(hf, batch=2, dtype=torch.float32, seed=1):
    c = hf.config
    H, W = (c.image_size, c.image_size) if isinstance(c.image_size, int) else c.image_size
    return torch.randn(batch, c.num_channels, H, W,
                       generator=torch.Generator().manual_seed(seed)).to(dtype)


def hf_vit_layers(hf):
    """Each layer's (query, key, value, first MLP) Linear modules, under transformers >= 5.9's names
    or older ones"""
    if hasattr(hf.vit, 'layers'):                                     # transformers >= 5.9
        return [(l.attention.q_proj, l.attention.k_proj, l.attention.v_proj, l.mlp.fc1)
                for l in hf.vit.layers]
    return [(l.attention.attention.query, l.attention.attention.key, l.attention.attention.value,
             l.intermediate.dense) for l in hf.vit.encoder.layer]      # 4.x up to 5.8


def assert_same_vit_weights(ours, hf):
    emb = hf.vit.embeddings
    assert torch.equal(ours.pos_emb.weight, emb.position_embeddings[0])
    assert torch.equal(ours.cls_token, emb.cls_token)
    assert torch.equal(ours.patch_embed.proj.weight,
                       emb.patch_embeddings.projection.weight.flatten(1))
    assert torch.equal(ours.head.weight, hf.classifier.weight)
    layers = hf_vit_layers(hf)
    assert len(layers) == len(ours.encoder.blocks)
    for blk, (q, k, v, fc1) in zip(ours.encoder.blocks, layers):
        assert torch.equal(blk.attn.to_qkv.weight, torch.cat([q.weight, k.weight, v.weight]))
        assert torch.equal(blk.mlp.fc1.weight, fc1.weight)
    for p in ours.parameters(): assert p.dtype == hf.classifier.weight.dtype


@pytest.mark.parametrize('name', list(VIT_SUPPORTED))
def test_vit_supported_options_match(name):
    hf = random_vit(**{**VIT_BASE, **VIT_SUPPORTED[name]})
    ours = ViT.from_hf(hf).eval()
    assert_same_vit_weights(ours, hf)
    px = pixels(hf)
    with torch.no_grad(): diff = (ours(px) - hf(pixel_values=px).logits).abs().max().item()
    assert diff < 1e-4, (name, diff)


def test_vit_hf_tester_config():
    hf = random_vit(**VIT_TESTER)
    ours = ViT.from_hf(hf).eval()
    px = pixels(hf, batch=13)                                    # the tester's batch size
    with torch.no_grad(): diff = (ours(px) - hf(pixel_values=px).logits).abs().max().item()
    assert diff < 1e-4, diff


def test_vit_float64_bit_exact():
    hf = random_vit(dtype=torch.float64, **VIT_BASE, qkv_bias=False)
    ours = ViT.from_hf(hf).eval()
    assert_same_vit_weights(ours, hf)
    px = pixels(hf, dtype=torch.float64)
    with torch.no_grad(): diff = (ours(px) - hf(pixel_values=px).logits).abs().max().item()
    assert diff < 1e-12, diff


def test_vit_bfloat16_keeps_dtype():
    hf = random_vit(dtype=torch.bfloat16, **VIT_BASE)
    ours = ViT.from_hf(hf).eval()
    assert_same_vit_weights(ours, hf)
    with torch.no_grad(): assert ours(pixels(hf, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_vit_resize_matches_hf_interpolation():
    "Our resampled table = Hugging Face's `interpolate_pos_encoding` (same bicubic resampling)"
    hf = random_vit(**{**VIT_BASE, 'image_size': 32})
    ours = ViT.from_hf(hf).eval().resize(48)
    px = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = hf(pixel_values=px, interpolate_pos_encoding=True).logits
        diff = (ours(px) - ref).abs().max().item()
    assert diff < 1e-4, diff


VIT_REFUSED = {
    'only square patches': dict(patch_size=(8, 4)),
    "hidden_act='silu'": dict(hidden_act='silu'),
    "hidden_act='quick_gelu'": dict(hidden_act='quick_gelu'),
}


@pytest.mark.parametrize('msg', list(VIT_REFUSED))
def test_vit_refused_options_raise(msg):
    hf = random_vit(**{**VIT_BASE, **VIT_REFUSED[msg]})
    with pytest.raises(ValueError, match=msg.replace('(', r'\(').replace(')', r'\)')):
        ViT.from_hf(hf)


def test_vit_other_refusals():
    hf = random_vit(**VIT_BASE)
    hf.config.pruned_heads = {0: [1]}
    with pytest.raises(ValueError, match='pruned_heads'): ViT.from_hf(hf)
    hf = random_vit(**VIT_BASE)
    hf.config.head_dim = 4                                      # 4 heads x 4 != hidden_size 32
    with pytest.raises(ValueError, match='head_dim=4'): ViT.from_hf(hf)
    with pytest.raises(ValueError, match='num_labels=0'):
        ViT.from_hf(random_vit(**{**VIT_BASE, 'num_labels': 0}))
