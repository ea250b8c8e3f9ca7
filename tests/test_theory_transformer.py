"""theory.transformer (chapter 8.1): each formula against its paper's own published numbers, against
helpers/gpt.py's real parameter counts, and against small cases worked by hand."""
import math

import pytest

from helpers import gpt, theory
from helpers.theory import transformer as tf
from helpers.theory.transformer import Shape

# Narayanan et al. 2021, Table 1: (parameters in billions as printed, heads, hidden, layers,
# achieved teraFLOP/s per GPU, percentage of the A100's 312 teraFLOP/s peak). V = 51200, s = 2048.
NARAYANAN_TABLE_1 = [
    (1.7, 24, 2304, 24, 137, 44), (3.6, 32, 3072, 30, 138, 44), (7.5, 32, 4096, 36, 142, 46),
    (18.4, 48, 6144, 40, 135, 43), (39.1, 64, 8192, 48, 138, 44), (76.1, 80, 10240, 60, 140, 45),
    (145.6, 96, 12288, 80, 148, 47), (310.1, 128, 16384, 96, 155, 50), (529.6, 128, 20480, 105, 163, 52),
    (1008.0, 160, 25600, 128, 163, 52)]


# --- Parameters --------------------------------------------------------------------------------

@pytest.mark.parametrize("billions, heads, hidden, layers, _tflops, _pct", NARAYANAN_TABLE_1)
def test_eq2_gives_table_1s_parameter_counts(billions, heads, hidden, layers, _tflops, _pct):
    """Narayanan et al. 2021, Eq. 2 on Table 1's rows: each count within the table's rounding."""
    p = tf.narayanan_parameters(layers, hidden, 51200, 2048)
    assert abs(p / 1e9 - billions) <= 0.05, (billions, p)
    # and our per-term count is Eq. 2 plus the final LayerNorm Eq. 2 leaves out
    shape = Shape(layers, hidden, heads, 2048, 51200)
    assert tf.parameter_count(shape) == pytest.approx(p + 2 * hidden, rel=1e-12)


@pytest.mark.parametrize("cfg", [gpt.CONFIGS["gpt-tiny"], gpt.CONFIGS["gpt-small"],
                                 gpt.GPTConfig(vocab=97, seq=33, layers=3, hidden=48, heads=6, tied=False)])
def test_parameters_equal_the_gpts_own_count(cfg):
    model = gpt.GPT(cfg)
    counted = sum(p.numel() for p in model.parameters())  # a tied weight is one parameter, counted once
    shape = Shape.of(cfg)
    assert shape == Shape(cfg.layers, cfg.hidden, cfg.heads, cfg.seq, cfg.vocab, tied=cfg.tied)
    assert tf.parameter_count(shape) == counted
    by_kind = tf.parameters(shape)
    assert by_kind["attention"] == sum(p.numel() for n, p in model.named_parameters() if ".attn." in n)
    assert by_kind["MLP"] == sum(p.numel() for n, p in model.named_parameters() if ".mlp." in n)
    if cfg.tied:
        assert counted == tf.narayanan_parameters(cfg.layers, cfg.hidden, cfg.vocab, cfg.seq) + 2 * cfg.hidden
        assert counted == theory.transformer_params(cfg.layers, cfg.hidden, cfg.vocab, cfg.seq)  # chapter 2's


def test_gqa_and_gated_mlp_parameters_by_hand():
    # h = 8, a = 4 (d = 2), 2 kv heads: wq, proj 64 + 8 each; wk, wv 8x4 + 4 each -> 144 + 2*36 = 216
    s = Shape(1, 8, 4, 4, 10, kv_heads=2)
    assert tf.parameters(s)["attention"] == 2 * (64 + 8) + 2 * (32 + 4)
    # gated, f = 12: three 8x12 matrices, biases 12 + 12 + 8
    assert tf.parameters(Shape(1, 8, 4, 4, 10, mlp_hidden=12, gated=True))["MLP"] == 3 * 96 + 32


def test_tensor_parallel_ranks_split_the_linears_and_the_vocabulary():
    shape = Shape(2, 64, 4, 16, 256)
    assert tf.parameters_per_rank(shape, 1) == tf.parameter_count(shape)
    # kept whole on each rank: per layer the 2 row-split biases and 2 LayerNorms (6h), positions, final LN
    kept = 2 * 6 * 64 + 16 * 64 + 2 * 64
    assert tf.parameters_per_rank(shape, 4) == (tf.parameter_count(shape) - kept) / 4 + kept


# --- FLOPs -----------------------------------------------------------------------------------

def test_flops_by_hand_and_narayanan_eq3_is_the_step_with_full_recomputation():
    # l = 1, h = 4, s = 2, V = 3, b = 1: forward 24*2*16 + 4*4*4 + 2*2*4*3 = 768 + 64 + 48 = 880
    shape = Shape(1, 4, 1, 2, 3)
    assert tf.flops_terms(shape, 1) == {"forward": 880.0, "backward": 1760.0, "recompute": 0.0}
    assert tf.flops_terms(shape, 1, "selective")["recompute"] == 64.0
    assert tf.flops_terms(shape, 1, True)["recompute"] == 832.0
    assert tf.flops_per_token(shape) == 2640 / 2
    for billions, heads, hidden, layers, _, _ in NARAYANAN_TABLE_1:
        s = Shape(layers, hidden, heads, 2048, 51200)
        assert tf.flops_per_step(s, 512, "full") == pytest.approx(tf.narayanan_flops(512, 2048, layers, hidden, 51200), rel=1e-12)
        # without recomputation a step is 3/4 of the layers' part plus the whole head
        assert tf.flops_per_step(s, 8) < tf.flops_per_step(s, 8, "full")


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_flops_are_what_torchs_flop_counter_counts_on_the_gpt(dropout):
    """A training step of helpers.gpt under FlopCounterMode, exactly: with dropout SDPA takes the math
    path (bmm, counted); without, the CPU flash kernel, which FlopCounterMode has no formula for."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(0)
    model, b = gpt.GPT(gpt.GPTConfig(seq=32, layers=2, hidden=64, heads=4, dropout=dropout)).train(), 3
    x, y = torch.randint(256, (b, 32)), torch.randint(256, (b, 32))
    with FlopCounterMode(display=False) as counter:
        model(x, y)[1].backward()
    shape = Shape(2, 64, 4, 32, 256)
    assert counter.get_total_flops() == tf.flops_per_step(shape, b, attention_flops=dropout > 0)
    assert tf.flops_per_step(shape, b) - tf.flops_per_step(shape, b, attention_flops=False) == 3 * 4 * b * 32**2 * 64 * 2


def test_six_n_gives_gpt3s_published_compute():
    """Brown et al. 2020, Table D.1: GPT-3 175B (174,600 M parameters, 300 B tokens) took 3.14e23 FLOPs,
    3.64e3 petaFLOP/s-days: Kaplan et al. 2020's 6N a token."""
    total = tf.six_n_flops_per_token(174.6e9) * 300e9
    assert round(total / 1e21) == 314
    assert round(total / (1e15 * 86400), -1) == 3640
    # Kaplan's attention term: 6 l s h a token beyond 6N; our full-square count has twice that
    shape = Shape(96, 12288, 96, 2048, 50257)
    assert tf.kaplan_flops_per_token(0, 96, 2048, 12288) == 6 * 96 * 2048 * 12288
    attn = 12 * 96 * 2048 * 12288
    body = 6 * 96 * 12 * 12288**2
    assert tf.flops_per_token(shape) == pytest.approx(body + attn + 6 * 12288 * 50257, rel=1e-12)


def test_palms_count_gives_its_published_mfu_and_kaplans_does_not():
    """Chowdhery et al. 2022: PaLM 540B (540.35 B parameters, 118 layers, 48 heads of 256, sequence
    2048) trained at 238.3 K tokens/s on 6144 TPU v4 chips of 275 TFLOP/s: 46.2% MFU (Appendix B).
    Its own count gives it; Kaplan's causal half gives 46.0%."""
    run = tf.PALM_540B
    palm = tf.palm_flops_per_token(run.n_params, run.layers, run.heads, run.head_dim, run.seq)
    assert palm == 6 * 540.35e9 + 12 * 118 * 48 * 256 * 2048
    assert round(100 * run.mfu_by(palm), 1) == 46.2 == 100 * run.published_mfu
    assert round(100 * tf.mfu(238.3e3 * palm, 6144 * 275e12), 1) == 46.2
    kaplan = tf.kaplan_flops_per_token(run.n_params, run.layers, run.seq, run.heads * run.head_dim)
    assert round(100 * run.mfu_by(kaplan), 1) == 46.0
    with pytest.raises(ValueError, match="head_dim"):
        tf.palm_flops_per_token(1e9, 2, 4, 0, 8)


# --- Utilization and time --------------------------------------------------------------------

def test_table_1s_percentages_of_peak_and_eq4s_training_times():
    # Table 1: achieved / 312 teraFLOP/s, to the percent (achieved counts Eq. 3's FLOPs, recomputation
    # included: in PaLM's terms a hardware FLOPs utilization)
    for *_, tflops, pct in NARAYANAN_TABLE_1:
        assert round(100 * tf.mfu(tflops * 1e12, 312e12)) == pct
    # Narayanan et al. 2021, Sec. 5.1 (Eq. 4): GPT-3, 300 B tokens on 1024 A100s at 140 teraFLOP/s: 34 days;
    # the 1T model (Table 1: 1008 B), 450 B tokens on 3072 GPUs at 163 teraFLOP/s: 84 days.
    assert round(tf.training_days(300e9, 175e9, 1024, 140e12)) == 34
    assert round(tf.training_days(450e9, 1008e9, 3072, 163e12)) == 84


def test_hfu_counts_the_recomputation():
    shape = Shape(1, 4, 1, 2, 3)  # 2640 model FLOPs a step, 832 more recomputed
    assert tf.hfu(2640.0, 5280.0, shape, "full") == pytest.approx((2640 + 832) / 5280)
    assert tf.hfu(2640.0, 5280.0, shape, "none") == tf.mfu(2640.0, 5280.0) == 0.5


# --- Model states ----------------------------------------------------------------------------

def test_the_playbooks_16_and_20_bytes_a_parameter_are_chapter_6_2s_states():
    n = 1_000_000
    assert sum(tf.model_states(n).values()) == 16 * n          # 2 + 2 + 12
    assert sum(tf.model_states(n, fp32_grad_accum=True).values()) == 20 * n
    assert sum(tf.model_states(n, mixed=False).values()) == 16 * n   # fp32: 4 + 4 + 8
    assert tf.model_states(n, "ZeRO-1", 4) == theory.sharded_state_bytes(n, 4, "ZeRO-1", "adam", "master-weights")
    assert sum(tf.model_states(n, "ZeRO-1", 4).values()) == (2 + 2 + 12 / 4) * n
    assert sum(tf.model_states(n, "ZeRO-2", 4, fp32_grad_accum=True).values()) == (2 + (2 + 4 + 12) / 4) * n
    assert sum(tf.model_states(n, "ZeRO-3", 8, fp32_grad_accum=True).values()) == 20 * n / 8


# --- Activations -----------------------------------------------------------------------------

def eq1(s, b, h, a, t=1):
    return s * b * h * (34 + 5 * a * s / h) / t


def test_korthikanti_equations_1_2_4_and_6_and_table_2():
    s, b, h, a, t = 2048, 1, 12288, 96, 8  # GPT-3 175B's layer (Korthikanti et al. 2022, Table 3)
    shape = Shape(96, h, a, s, 51200)
    sbh = s * b * h
    assert tf.activation_bytes(shape, b) == eq1(s, b, h, a)                                     # Eq. 1
    assert tf.activation_bytes(shape, b, tp=t) == sbh * (10 + 24 / t + 5 * a * s / (h * t))   # Eq. 2
    assert tf.activation_bytes(shape, b, tp=t, sp=True) == eq1(s, b, h, a, t)                # Eq. 4
    assert tf.activation_bytes(shape, b, tp=t, recompute="selective") == sbh * (10 + 24 / t)  # Table 2
    assert tf.activation_bytes(shape, b, tp=t, sp=True, recompute="selective") == sbh * 34 / t  # Eq. 6
    assert tf.activation_bytes(shape, b, tp=t, recompute="full") == 2 * sbh                  # Table 2
    # Sec. 4.1: the attention block 11 sbh + 5 a s² b, the MLP 19 sbh, the LayerNorms 4 sbh
    terms = tf.activation_terms(shape, b)
    mlp = ("MLP input", "GeLU input", "GeLU output", "MLP dropout mask")
    assert sum(terms[k] for k in mlp) == 19 * sbh and terms["LayerNorm inputs"] == 4 * sbh
    assert sum(terms.values()) - sum(terms[k] for k in mlp) - 4 * sbh == 11 * sbh + 5 * a * s * s * b
    # for GPT-3, 5as/h = 80 > 34: the s² terms are most of it
    assert 5 * a * s / h == 80
    # 8.2's reading of the 34: 32 bytes are 16 sbh-sized units of 16-bit values in 10 tensors (the
    # LayerNorms' two inputs and Q, K each one tensor), two of them the GeLU's 4h-wide input and output;
    # the other 2 bytes are two one-byte dropout masks
    kept = tf.activation_terms(shape, b, recompute="selective")  # the s² terms aside
    masks = {k: v for k, v in kept.items() if "mask" in k}
    values = {k: v for k, v in kept.items() if "mask" not in k}
    tensors = {"LayerNorm inputs": 2, "Q and K": 2}
    assert sum(values.values()) == 32 * sbh == 2 * 16 * sbh and sum(tensors.get(k, 1) for k in values) == 10
    assert [k for k, v in values.items() if v == 2 * 4 * sbh] == ["GeLU input", "GeLU output"]
    assert sorted(masks.values()) == [sbh, sbh] and sum(kept.values()) == 34 * sbh


def test_activation_options_by_hand():
    shape, b = Shape(2, 8, 2, 4, 16), 3    # sbh = 96, a s² b = 96
    # 4 bytes a value, no dropout: 16 sbh values at 4 bytes, plus softmax output 4 a s² b
    assert tf.activation_bytes(shape, b, bytes_per_value=4, dropout=False) == 16 * 96 * 4 + 96 * 4
    # flash: no s² terms; a float32 logsumexp a s b
    flash = tf.activation_terms(shape, b, bytes_per_value=4, dropout=False, attention="flash")
    assert flash["logsumexp"] == 4 * 2 * 4 * 3 and sum(flash.values()) == 16 * 96 * 4 + 96
    assert "softmax output" not in flash
    assert tf.activation_terms(shape, b, recompute="selective", attention="flash") == tf.activation_terms(
        shape, b, attention="flash")
    assert tf.activation_terms(shape, b, norm_stats=True)["LayerNorm statistics"] == 4 * 2 * 4 * 3
    assert tf.activation_terms(shape, b, mask_bytes=2)["MLP dropout mask"] == 2 * 96
    assert tf.activation_terms(shape, b, tp=2, sp=True, recompute="full") == {"layer input": 96.0}


def test_outside_the_layers_korthikanti_sec_4_3():
    shape, b, t = Shape(2, 8, 2, 4, 16), 3, 2
    out = tf.outside_layers_terms(shape, b, tp=t, sp=True, dropout=False)
    sbh = 4 * 3 * 8
    assert sum(out.values()) == 4 * sbh / t * (1 + 16 / 8)
    total = tf.model_activation_bytes(shape, b, tp=t, sp=True, dropout=False)
    assert total == 2 * tf.activation_bytes(shape, b, tp=t, sp=True, dropout=False) + sum(out.values())


def saved_bytes(cfg, batch, dtype):
    """Bytes one GPT block saves for backward (saved-tensor hooks; each storage once, parameters not)."""
    import torch
    torch.manual_seed(0)
    model = gpt.GPT(cfg).train().to(dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t
    x = torch.randn(batch, cfg.seq, cfg.hidden, dtype=dtype, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.blocks[0](x)
    return sum(seen.values())


@pytest.mark.parametrize("dropout, dtype, v", [(0.0, "float32", 4), (0.0, "bfloat16", 2), (0.1, "float32", 4)])
def test_configured_terms_are_what_torch_saves_on_this_cpu(dropout, dtype, v):
    """Without dropout SDPA runs the CPU flash kernel (q, k, v, output, logsumexp); with it, the math
    path (the s² scores, mask and dropped scores, the masks in the input's dtype). LayerNorm's mean
    and 1/std are in the input's dtype too. Exact, byte for byte."""
    import torch
    cfg = gpt.GPTConfig(seq=32, layers=1, hidden=64, heads=4, dropout=dropout)
    shape = Shape(1, 64, 4, 32, 256)
    want = tf.activation_bytes(shape, 2, bytes_per_value=v, dropout=dropout > 0, norm_stats=True, mask_bytes=v,
                               attention="flash" if dropout == 0 else "materialized")
    assert saved_bytes(cfg, 2, getattr(torch, dtype)) == want


# --- Inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: Shape(0, 8, 2, 4, 16), "Shape.layers"),
    (lambda: Shape(1, 10, 4, 4, 16), "divide into heads"),
    (lambda: Shape(1, 8, 4, 4, 16, kv_heads=3), "multiple of kv_heads"),
    (lambda: Shape(1, 8, 2, 4.5, 16), "Shape.seq"),
    (lambda: tf.narayanan_parameters(-1, 8, 16, 4), "layers"),
    (lambda: tf.flops_per_step(Shape(1, 8, 2, 4, 16), 0), "batch"),
    (lambda: tf.flops_per_step(Shape(1, 8, 2, 4, 16), 1, "some"), "recompute must be one of"),
    (lambda: tf.flops_per_step(Shape(1, 8, 2, 4, 16), 1, attention_flops=None), "attention_flops"),
    (lambda: tf.activation_terms(Shape(1, 8, 2, 4, 16), 1, tp=4), "tp"),
    (lambda: tf.activation_terms(Shape(1, 8, 2, 4, 16), 1, attention="sdpa"), "attention must be one of"),
    (lambda: tf.activation_terms(Shape(1, 8, 2, 4, 16, gated=True), 1), "standard GPT layer"),
    (lambda: tf.activation_terms(Shape(1, 8, 2, 4, 16), 1, sp="yes"), "True or False"),
    (lambda: tf.mfu(1e12, 0), "peak_flops_per_s must be > 0"),
    (lambda: tf.activation_terms(Shape(1, 8, 2, 4, 16), 1, mask_bytes=0), "mask_bytes"),
    (lambda: tf.training_days(1e9, 1e9, 0, 1e12), "gpus"),
    (lambda: tf.model_states(1e6, "ZeRO-4"), "stage must be one of"),
    (lambda: tf.model_states(1e6, "ZeRO-1", 0), "p must be"),
])
def test_bad_inputs_are_one_clear_valueerror(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_gpt3_days_are_not_a_constant():
    """The 34 days move with every input (the formula is not a constant that passes the test)."""
    base = tf.training_days(300e9, 175e9, 1024, 140e12)
    assert tf.training_days(600e9, 175e9, 1024, 140e12) == pytest.approx(2 * base)
    assert tf.training_days(300e9, 175e9, 2048, 140e12) == pytest.approx(base / 2)
    assert math.isclose(tf.training_days(300e9, 175e9, 1024, 280e12), base / 2)
