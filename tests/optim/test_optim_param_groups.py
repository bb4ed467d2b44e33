"""Exclusion rules shared by LARS/LAMB/NovoGrad, `named_param_groups`, and the package's imports."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
import torch
from torch import nn

import trainer.optim
from trainer.optim import LAMB, LARS, NovoGrad, exclude_1d, named_param_groups

pytestmark = pytest.mark.timeout(60)

REPO = pathlib.Path(__file__).resolve().parents[2]


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 5)
        self.head.weight = self.embed.weight  # tied: must appear once
        self.scale = nn.Parameter(torch.ones(()))  # 0-d: excluded by the 1-D rule too
        self.frozen = nn.Parameter(torch.ones(3, 3), requires_grad=False)


def test_exclude_1d():
    assert exclude_1d("w", torch.zeros(3, 3)) is False
    assert exclude_1d("b", torch.zeros(3)) is True
    assert exclude_1d("s", torch.zeros(())) is True


def test_named_param_groups_default_split():
    groups = named_param_groups(_Net())
    assert [g["excluded"] for g in groups] == [False, True]
    assert groups[0]["param_names"] == ["embed.weight", "proj.weight"]
    assert groups[1]["param_names"] == ["scale", "proj.bias", "norm.weight", "norm.bias", "head.bias"]
    assert all("weight_decay" not in g for g in groups)


def test_named_param_groups_weight_decay_and_options_for_plain_torch_optimizers():
    groups = named_param_groups(_Net(), exclude=["norm", "bias"], weight_decay=0.05, lr=0.1)
    summary = [(g["excluded"], g["weight_decay"], g["lr"]) for g in groups]
    assert summary == [(False, 0.05, 0.1), (True, 0.0, 0.1)]
    assert groups[0]["param_names"] == ["scale", "embed.weight", "proj.weight"]
    # torch.optim optimizers keep the extra keys and use the per-group weight decay.
    opt = torch.optim.AdamW(groups, lr=1.0)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.05, 0.0]


def test_named_param_groups_accepts_pairs_and_drops_empty_groups():
    net = _Net()
    groups = named_param_groups(list(net.named_parameters()), exclude=None)
    assert len(groups) == 1 and groups[0]["excluded"] is False and len(groups[0]["params"]) == 7


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(exclude=42), TypeError, "exclude must be None, a callable"),
        (dict(exclude=["norm", 3]), TypeError, "exclude name substrings must be str, got int"),
        (dict(weight_decay=-1.0), ValueError, "weight_decay must be a finite number >= 0"),
        (dict(params=[]), ValueError, "named_param_groups sets 'params' itself"),
        (dict(excluded=True), ValueError, "named_param_groups sets 'excluded' itself"),
    ],
)
def test_named_param_groups_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        named_param_groups(_Net(), **kwargs)


@pytest.mark.parametrize("cls", [LARS, LAMB, NovoGrad])
def test_every_optimizer_shares_the_exclusion_rules(cls):
    net = _Net()
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    params = [p for p in net.parameters() if p.requires_grad]
    expected = [n not in ("embed.weight", "proj.weight") for n in names]
    assert cls(params, lr=0.1).param_groups[0]["excluded"] == expected
    opt = cls(net.named_parameters(), lr=0.1, exclude="proj")
    assert opt.param_groups[0]["excluded"] == [n.startswith("proj") for n, _ in net.named_parameters()]
    opt = cls([{"params": params, "excluded": True}], lr=0.1, exclude=None)
    assert opt.param_groups[0]["excluded"] == [True] * len(params)
    with pytest.raises(ValueError, match=f"{cls.__name__}: exclude=.* given without names"):
        cls(params, lr=0.1, exclude=["proj"])
    # An empty name list needs no names and excludes nothing.
    assert cls(params, lr=0.1, exclude=[]).param_groups[0]["excluded"] == [False] * len(params)


@pytest.mark.parametrize("cls", [LARS, LAMB, NovoGrad])
def test_buckets_of_mixed_dtypes_match_one_optimizer_per_tensor(cls):
    # Tensors are stepped in (device, dtype, excluded) buckets; that grouping must not matter.
    gen = torch.Generator().manual_seed(0)
    f32, f64 = torch.float32, torch.float64
    shapes_dtypes = [((3, 3), f32), ((3,), f64), ((2, 4), f64), ((4,), f32)]
    together = [nn.Parameter(torch.randn(s, generator=gen, dtype=dt)) for s, dt in shapes_dtypes]
    alone = [nn.Parameter(p.detach().clone()) for p in together]
    opt = cls(together, lr=0.1, weight_decay=0.01)
    singles = [cls([p], lr=0.1, weight_decay=0.01) for p in alone]
    for _ in range(3):
        for p, q in zip(together, alone):
            g = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            p.grad, q.grad = g, g.clone()
        opt.step()
        for single in singles:
            single.step()
    for p, q in zip(together, alone):
        assert torch.equal(p, q)


def test_state_dict_without_exclusion_mask_gets_it_recomputed():
    net = _Net()
    opt = LAMB(net.named_parameters(), lr=0.1)
    state = opt.state_dict()
    for group in state["param_groups"]:
        del group["excluded"]  # e.g. a checkpoint written before the mask existed
    opt.load_state_dict(state)
    for p in net.parameters():
        p.grad = torch.ones_like(p) if p.requires_grad else None
    opt.step()
    assert opt.param_groups[0]["excluded"] == [exclude_1d(n, p) for n, p in net.named_parameters()]


def test_mixed_named_and_unnamed_parameters_are_an_error():
    a, b = nn.Parameter(torch.zeros(2, 2)), nn.Parameter(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="give every parameter of a group a name, or none of them"):
        LARS([{"params": [("a", a), b]}], lr=0.1)
    with pytest.raises(TypeError, match="not a set"):
        LARS({a, b}, lr=0.1)
    with pytest.raises(TypeError, match="not a set"):
        LAMB([{"params": {a, b}}], lr=0.1)


@pytest.mark.launches
def test_import_adds_no_heavy_modules():
    # torch itself may import tqdm: only count what `import trainer.optim` adds to `import torch`.
    code = (
        "import sys, torch; before = set(sys.modules); import trainer.optim; "
        "heavy = ('tensorboard', 'torchvision', 'tqdm', 'torch.utils.tensorboard'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy and m not in before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_optim_modules_import_only_stdlib_torch_and_themselves():
    # The subpackage must not depend on the rest of `trainer`, whatever `trainer/__init__` does:
    # only on the contracts floor (its argument checks), which imports nothing but stdlib and torch.
    allowed_roots = {"torch", "trainer", "__future__"} | set(sys.stdlib_module_names)
    for path in sorted((REPO / "trainer" / "optim").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                assert module.split(".")[0] in allowed_roots, (path.name, module)
                if module.startswith("trainer"):
                    assert module.startswith(("trainer.optim", "trainer.contracts")), (path.name, module)


def test_public_api():
    for name in trainer.optim.__all__:
        assert getattr(trainer.optim, name) is not None
