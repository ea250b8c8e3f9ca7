"""The memory model (chapter 2): formulas against real tensors, and the strategy advice."""
import pytest
import torch
import torch.nn as nn

from helpers import measure, theory
from helpers.models import SimpleModel, WideMLP


def _one_step(model, optimizer_name, autocast):
    opt = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1),
           "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
           "adam": lambda p: torch.optim.Adam(p, lr=1e-3)}[optimizer_name](model.parameters())
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return opt


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "adam"])
@pytest.mark.parametrize("precision", ["fp32", "autocast"])
def test_state_bytes_equal_the_real_tensors_after_a_step(optimizer, precision):
    model = WideMLP(64, 3)
    opt = _one_step(model, optimizer, precision == "autocast")
    n = sum(p.numel() for p in model.parameters())
    formula = theory.model_state_bytes(n, optimizer, precision, n_tensors=len(list(model.parameters())))
    measured = measure.measured_state_bytes(model, opt)
    assert measured == {k: formula[k] for k in measured}
    assert ("autocast copies" in formula) == (precision == "autocast")


def test_bytes_per_parameter_follow_the_textbook_counts():
    per_param = {(o, p): sum(theory.model_state_bytes(1, o, p).values())
                 for o in theory.OPTIMIZER_STATES for p in theory.PRECISIONS}
    assert per_param[("adam", "fp32")] == 16
    assert per_param[("adam", "master-weights")] == 16  # ZeRO's 2 + 2 + 12
    assert per_param[("sgd", "fp32")] == 8 and per_param[("sgd-momentum", "fp32")] == 12
    assert per_param[("adam", "autocast")] == 18
    with pytest.raises(ValueError):
        theory.model_state_bytes(1, "lamb")


@pytest.mark.parametrize("precision", ["fp32", "autocast"])
def test_mlp_activation_bytes_equal_what_autograd_saves(precision):
    model, x = WideMLP(96, 4), torch.randn(16, 1, 28, 28)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "autocast"):
            model(x)

    saved = measure.saved_activation_bytes(model, forward)
    assert saved["activations"] == theory.mlp_activation_bytes(16, [784, 96, 96, 96, 10], precision)
    n = sum(p.numel() for p in model.parameters())
    if precision == "autocast":  # the copies autograd keeps are a subset of autocast's cache
        assert 0 < saved["autocast copies"] <= theory.model_state_bytes(n, "sgd", "autocast")["autocast copies"]
    else:
        assert saved["autocast copies"] == 0


def test_the_articles_model_saves_its_input_and_hidden_layer():
    model, x = SimpleModel(), torch.randn(32, 1, 28, 28)
    saved = measure.saved_activation_bytes(model, lambda: model(x))
    assert saved["activations"] == 32 * (784 + 256) * 4


def test_transformer_params_count_torch_layers():
    layers, hidden, heads, vocab, seq = 2, 64, 4, 100, 16
    blocks = nn.ModuleList(nn.TransformerEncoderLayer(hidden, heads, 4 * hidden) for _ in range(layers))
    extras = [nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden), nn.LayerNorm(hidden)]
    real = sum(p.numel() for m in [blocks, *extras] for p in m.parameters())
    assert theory.transformer_params(layers, hidden, vocab, seq) == real


def korthikanti_itemized(b, s, h, a, v):
    """Korthikanti et al. (2022), section 4.1, item by item for one layer: v bytes a value, 1 a mask."""
    sbh, as2b = s * b * h, a * s * s * b
    attention = [v * sbh,                  # QKV projection's input
                 v * sbh, v * sbh,         # Q and K, for QK^T
                 v * as2b,                 # softmax output
                 as2b,                     # softmax dropout's mask
                 v * as2b, v * sbh,        # attention over values: the dropout's output, V
                 v * sbh,                  # output projection's input
                 sbh]                      # its dropout's mask
    mlp = [v * sbh, 4 * v * sbh, 4 * v * sbh, sbh]  # first Linear's input, GeLU's input, second's, mask
    layer_norms = [v * sbh, v * sbh]
    return sum(attention + mlp + layer_norms)


@pytest.mark.parametrize("precision, v", [("autocast", 2), ("fp32", 4)])
def test_transformer_activations_are_korthikantis_items(precision, v):
    b, s, h, L, a = 2, 2048, 4096, 3, 32
    expected = L * korthikanti_itemized(b, s, h, a, v)
    assert theory.transformer_activation_bytes(b, s, h, L, a, precision) == expected


def test_transformer_activations_reduce_to_korthikanti_at_16_bit():
    b, s, h, L, a = 2, 2048, 4096, 3, 32
    expected = L * s * b * h * (34 + 5 * a * s / h)
    assert theory.transformer_activation_bytes(b, s, h, L, a, "autocast") == pytest.approx(expected)


def test_strategy_memory_splits_states_over_stages_and_activations_over_everything():
    states = {"parameters": 400.0, "gradients": 400.0}
    one = theory.strategy_memory(states, 10.0, batch=8)
    assert one == {"parameters": 400, "gradients": 400, "activations": 80}
    hybrid = theory.strategy_memory(states, 10.0, batch=8, pp=2, dp=2)
    assert hybrid == {"parameters": 200, "gradients": 200, "activations": 20}


@pytest.mark.parametrize("n_params, act, batch, memory, devices, fits_one, strategy, pp, dp", [
    (10**6, 1e3, 8, 1e9, 1, True, "one device", 1, 1),     # 16 MB of states: fits
    (10**6, 1e3, 8, 1e9, 4, True, "DDP", 1, 4),            # fits on one, so DDP for speed
    (10**6, 1e8, 8, 5e8, 4, False, "DDP", 1, 4),           # activations too big for one, split by 4
    (10**9, 1e6, 8, 5e9, 4, False, "pipeline", 4, 1),      # 16 GB of states: 4 stages
    (10**9, 1e6, 8, 9e9, 4, False, "hybrid", 2, 2),        # 8 GB per half: 2 stages x 2 replicas
    (10**10, 1e6, 8, 1e9, 4, False, None, 4, 1),           # 160 GB over 4 devices: no
])
def test_advise_picks_the_simplest_layout_that_fits(n_params, act, batch, memory, devices, fits_one,
                                                     strategy, pp, dp):
    advice = theory.advise(n_params, act, batch, memory, devices, "adam", "fp32")
    assert (advice.fits_one_device, advice.strategy, advice.pp, advice.dp) == (fits_one, strategy, pp, dp)


def test_advise_needs_a_sample_per_replica():
    # 8 devices but a batch of 2: DDP over 8 is impossible, so 4 stages x 2 replicas.
    advice = theory.advise(10**6, 1e9, 2, 1.5e9, 8, "adam", "fp32")
    assert (advice.strategy, advice.pp, advice.dp) == ("hybrid", 4, 2)


def test_a_batch_sliced_from_the_data_set_counts_as_the_slice():
    model, data_set = SimpleModel(), torch.randn(500, 1, 28, 28)
    saved = measure.saved_activation_bytes(model, lambda: model(data_set[:32]))
    assert saved["activations"] == 32 * (784 + 256) * 4
