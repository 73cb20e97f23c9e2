"""CompiledAdam against torch.optim.Adam: the same parameters and state after many steps
(float64 to 1e-12, float32 to rounding), with weight decay, a lerp weight of 0.5 or more,
several groups and parameters without a gradient; its state_dict is torch's (either loads the
other's and goes on as if never stopped); what it does not compile runs torch's own step."""

from __future__ import annotations

import pytest
import torch

from basketgnn.engine.compiled_adam import CompiledAdam


def _params(dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(37, 5), (5,), (3, 4, 2), ()]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def _run(opt_cls, dtype, steps: int, options: dict, groups: bool = False, seed: int = 1, params=None):
    params = params or _params(dtype)
    spec = [{"params": params[:2]}, {"params": params[2:], "lr": 3e-3}] if groups else params
    opt = opt_cls(spec, lr=1e-2, **options)
    g = torch.Generator().manual_seed(seed)
    for k in range(steps):
        for i, p in enumerate(params):
            # the last parameter gets no gradient on odd steps (torch skips it then)
            p.grad = None if (i == len(params) - 1 and k % 2) else torch.randn(p.shape, generator=g, dtype=dtype)
        opt.step()
    return params, opt


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.05}, {"betas": (0.3, 0.95)}, {"eps": 1e-3}])
@pytest.mark.parametrize("groups", [False, True])
def test_float64_steps_equal_torchs(options, groups):
    ref, ref_opt = _run(torch.optim.Adam, torch.float64, 40, options, groups)
    got, got_opt = _run(CompiledAdam, torch.float64, 40, options, groups)
    for a, b in zip(ref, got):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(got_opt.state[b][key], ref_opt.state[a][key], rtol=1e-12, atol=1e-15)


def test_float32_steps_equal_torchs_to_rounding():
    ref, _ = _run(torch.optim.Adam, torch.float32, 40, {"weight_decay": 0.01})
    got, _ = _run(CompiledAdam, torch.float32, 40, {"weight_decay": 0.01})
    for a, b in zip(ref, got):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("first", "second"), [(CompiledAdam, torch.optim.Adam), (torch.optim.Adam, CompiledAdam)])
def test_state_dict_is_torchs_and_resumes(first, second):
    straight, _ = _run(torch.optim.Adam, torch.float64, 20, {})
    params = _params(torch.float64)
    _, opt = _run(first, torch.float64, 12, {}, params=params)
    saved = opt.state_dict()
    resumed = second(params, lr=1e-2)
    resumed.load_state_dict(saved)
    g = torch.Generator().manual_seed(1)  # replay the gradient stream: 12 steps drawn, 8 to go
    draws = []
    for k in range(20):
        draws.append([None if (i == len(params) - 1 and k % 2) else torch.randn(p.shape, generator=g, dtype=torch.float64)
                      for i, p in enumerate(params)])  # fmt: skip
    for k in range(12, 20):
        for p, grad in zip(params, draws[k]):
            p.grad = grad
        resumed.step()
    for a, b in zip(straight, params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def test_what_it_does_not_compile_runs_torchs_step():
    ref, _ = _run(torch.optim.Adam, torch.float64, 15, {"amsgrad": True})
    got, _ = _run(CompiledAdam, torch.float64, 15, {"amsgrad": True})
    for a, b in zip(ref, got):
        assert torch.equal(a, b)
    opt = CompiledAdam(_params(torch.float64), lr=1e-2, maximize=True)
    assert not opt._compiled_applies(opt.param_groups[0])


def test_a_compiled_step_counts_as_an_in_place_change_of_the_parameter():
    """The step writes through NumPy; the parameter's version moves as under torch's own step,
    so what is keyed on versions (the GCN's folded inference) sees the new values."""
    p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
    opt = CompiledAdam([p], lr=0.1)
    before, values = p._version, p.detach().clone()
    p.grad = torch.ones_like(p)
    opt.step()
    assert not torch.equal(p.detach(), values) and p._version > before
