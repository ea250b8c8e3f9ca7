"""Mixed precision: the formulas of helpers.theory against torch, and the recipe's pure parts."""
import math

import pytest
import torch

from helpers import amp
from helpers import theory
from helpers.models import SimpleModel, WideMLP
from helpers.measure import saved_bytes
from helpers.models import widths
from helpers.probes import precision as mp
from helpers.recipes.mixed_precision import amp_resume
from helpers.training import train_step

CPU = torch.device("cpu")


@pytest.mark.parametrize("make", [SimpleModel, lambda: WideMLP(64, 3), lambda: WideMLP(32, 5)])
@pytest.mark.parametrize("batch", [1, 8, 100])
def test_saved_bytes_formula_matches_autograd(make, batch):
    model = make()
    w = widths(model)
    assert saved_bytes(model, batch, None, CPU) == theory.mlp_activation_bytes(batch, w, "fp32")
    assert saved_bytes(model, batch, torch.bfloat16, CPU) == theory.autocast_saved_bytes(batch, w)


def test_break_even_batch_is_where_autocast_starts_saving():
    w = [784, 1024, 1024, 1024, 10]
    b = theory.autocast_break_even_batch(w)
    assert b == 547  # copies 2 * (2 * 1024^2 + 10240) bytes over 2 * 3856 bytes saved per sample
    assert theory.autocast_saved_bytes(b, w) < theory.mlp_activation_bytes(b, w, "fp32")
    assert theory.autocast_saved_bytes(b - 1, w) >= theory.mlp_activation_bytes(b - 1, w, "fp32")


def test_first_layer_weight_copy_is_not_saved():
    assert theory.autocast_weight_copy_bytes([784, 256, 10]) == 2 * 256 * 10
    assert theory.autocast_weight_copy_bytes([784, 10]) == 0


def test_grad_scale_trace_follows_torch_gradscaler():
    """Drive a real GradScaler with chosen overflows; its scales must be the formula's."""
    found_inf = [True, True, False, False, False, True] + [False] * 7 + [True, False]
    param = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    scales = []
    for inf in found_inf:
        scales.append(scaler.get_scale())
        opt.zero_grad()
        scaler.scale(param.sum() * (math.inf if inf else 1.0)).backward()
        before = param.detach().clone()
        scaler.step(opt)
        scaler.update()
        assert torch.equal(param.detach(), before) == inf  # an overflowing step is skipped
    assert scales == theory.grad_scale_trace(2.0**10, found_inf, growth_interval=3)


def test_flushed_counts_only_entries_that_were_nonzero():
    ref = torch.tensor([0.0, 1.0, 2.0, 3.0])
    got = torch.tensor([0.0, 0.0, 2.0, 0.0])
    assert mp.flushed(ref, got) == pytest.approx(2 / 3)
    assert mp.flushed(torch.zeros(3), torch.zeros(3)) == 0


def test_float16_flushes_what_scaling_and_bfloat16_keep():
    """A trained-looking output gradient: tiny entries vanish in float16 only."""
    torch.manual_seed(0)
    model = SimpleModel()
    with torch.no_grad():  # confident logits, as after training: softmax - onehot becomes tiny
        model.fc[2].weight.mul_(60)
    x = torch.randn(256, 1, 28, 28)
    y = model(x).argmax(1)
    ref, dt = mp.output_gradient(model, x, y)
    assert dt == torch.float32
    fp16, dt16 = mp.output_gradient(model, x, y, torch.float16)
    assert dt16 == torch.float16 and mp.flushed(ref, fp16) > 0
    scaled, _ = mp.output_gradient(model, x, y, torch.float16, 2.0**16)
    assert mp.flushed(ref, scaled) < mp.flushed(ref, fp16)
    bf16, _ = mp.output_gradient(model, x, y, torch.bfloat16)
    assert mp.flushed(ref, bf16) == 0


def test_autocast_op_table_on_cpu():
    table = mp.autocast_op_table(CPU)
    assert table["linear"]["runs in"] == "bfloat16"
    assert table["cross_entropy"]["runs in"] == "float32"
    assert table["relu"]["runs in"] == "its inputs' dtype"
    assert table["softmax"]["runs in"] == "its inputs' dtype"  # on CUDA it is on the float32 list


def test_amp_step_keeps_master_weights_fp32_and_learns():
    torch.manual_seed(0)
    model = SimpleModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = amp.grad_scaler(CPU)
    assert not scaler.is_enabled() and scaler.state_dict() == {}  # bfloat16 on the CPU: no scaler
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    losses = [train_step(model, opt, x, y, scaler, torch.bfloat16) for _ in range(20)]
    assert losses[-1] < losses[0] / 2
    assert all(p.dtype == p.grad.dtype == torch.float32 for p in model.parameters())


def test_step_times_reports_each_dtype():
    times = mp.step_times([None, torch.bfloat16], steps=2, batch_size=8, device=CPU)
    assert set(times) == {"float32", "bfloat16"} and all(len(v) == 2 and min(v) > 0 for v in times.values())


def test_amp_resume_is_exact_only_with_the_scaler_state(tmp_path):
    import helpers
    res = helpers.launch(amp_resume, nprocs=2, path=str(tmp_path / "amp.pt"), epochs=2, stop_at=1,
                         show=None, timeout=120)
    a = res[0]
    assert a["saved_scaler"] == a["scaler_on_disk"] == a["loaded_scaler"] and a["saved_scaler"]["scale"] > 0
    assert a["runs"]["resumed"] == a["runs"]["straight"]
    assert all(torch.equal(a["final"]["resumed"][k], a["final"]["straight"][k]) for k in a["final"]["straight"])
    assert a["runs"]["fresh scaler"]["scale"] != a["runs"]["straight"]["scale"]


def test_the_amp_policy_for_cuda_is_float16_with_a_scaler():
    """The policy looks only at device.type, so the CUDA choice is checked here without a GPU."""
    cuda = torch.device("cuda", 0)
    assert amp.autocast_dtype(cuda) == torch.float16 and amp.needs_scaler(cuda)
    assert amp.autocast_dtype(CPU) == torch.bfloat16 and not amp.needs_scaler(CPU)
    assert not amp.grad_scaler(CPU).is_enabled()
    assert amp.dtype_name(None) == "float32" and amp.dtype_name(torch.bfloat16) == "bfloat16"
