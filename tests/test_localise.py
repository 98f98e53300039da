"""Localisation (graders/checks/localise.py): how a tensor differs, and where in a module.

The generic-fault test breaks every sub-module of every reference module in turn, in each of a
family of ways nobody catalogued (a factor, a sign, a transposition, a shift, another axis, a
sub-module dropped, another activation, a buffer initialised wrongly), and asks the localiser
where the output first goes wrong: it must name the broken sub-module.
"""

import copy
import importlib

import pytest
import torch
from torch import nn

from graders.checks.localise import describe_difference, first_divergence, parse_trace
from graders.checks.weights import count_difference
from graders.sandbox.tasks import trace_calls

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

# ---------------------------------------------------------------- how a tensor differs

BASE = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0))
AXES = ("batch", "head", "query", "key")


@pytest.mark.parametrize("got, words", [
    (BASE * 0.5, "1/2 times"),
    (BASE * 8 ** 0.5, "sqrt(8) times"),
    (-BASE, "sign is flipped"),
    (BASE + 0.25, "plus a constant +0.25"),
    (BASE.transpose(2, 3), "query and key are swapped"),
    (torch.cat([BASE[:, :, :1], BASE[:, :, :-1]], 2), "shifted by one position along query"),
    (BASE.flip(3), "reversed along key"),
    (torch.where(torch.arange(3)[None, :, None, None] == 1, BASE * 3, BASE), "only at head 1"),
    (torch.where(torch.arange(5)[None, None, :, None] >= 3, BASE + 1, BASE), "only at query 3, 4"),
])
def test_describes_the_pattern_of_a_difference(got, words):
    assert words in describe_difference(got, BASE, axes=AXES)


def test_names_a_normalisation_over_the_wrong_axis():
    assert "sums to one along query" in describe_difference(BASE.softmax(2), BASE.softmax(3), axes=AXES)


def test_says_nothing_of_tensors_that_agree():
    assert describe_difference(BASE + 1e-7, BASE) is None


def test_counts_the_values_of_an_unpatterned_difference():
    noisy = BASE + torch.randn(BASE.shape, generator=torch.Generator().manual_seed(1))
    assert "every index" in describe_difference(noisy, BASE)


def test_says_where_parameter_counts_differ_by_sub_module():
    E = 4
    expected = {"qkv_proj.weight": (3 * E, E), "qkv_proj.bias": (3 * E,), "o_proj.weight": (E, E), "o_proj.bias": (E,)}
    no_output = {k: v for k, v in expected.items() if not k.startswith("o_proj")}
    assert count_difference(no_output, expected) == (
        "o_proj: 0 in yours, 20 expected (missing o_proj.weight (4, 4), o_proj.bias (4,))")
    deep = {"net.0.ff.weight": (8, 4), "net.1.ff.weight": (8, 4)}
    assert count_difference({**deep, "net.1.ff.weight": (4, 4)}, deep).startswith("net.1.ff.weight: 16 in yours, 32")
    assert count_difference(expected, expected) is None


def test_a_sub_module_under_another_name_is_no_difference():
    expected = {"embedding.weight": (7, 8), "transformer_encoder.layers.0.w": (8, 8)}
    renamed = {"encoder.weight": (7, 8), "transformer_encoder.layers.0.w": (8, 8)}
    assert count_difference(renamed, expected) is None
    with_head = {**renamed, "decoder.weight": (7, 8), "decoder.bias": (7,)}
    assert count_difference(with_head, expected) == (
        "decoder: 63 in yours, 0 expected (extra decoder.weight (7, 8), decoder.bias (7,)); "
        "the same under other names: your encoder for embedding")


# ---------------------------------------------------------------- where in a module


def reference(pack, module):
    return importlib.import_module(f"reference.{pack}.{module}")


def small_bert_encoder():
    import transformers

    config = transformers.BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)
    return transformers.BertModel(config)


def gpt_config(**overrides):
    gpt = reference("gpt", "gpt")
    return gpt.GPTConfig(**{"vocab_size": 7, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 8, **overrides})


IDS = torch.randint(0, 7, (4, 4), generator=torch.Generator().manual_seed(2))
X = torch.randn(4, 4, 8, generator=torch.Generator().manual_seed(3))  # B == T: a transposition keeps the shape
PADDING = torch.tensor([[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]])

# Every nn.Module of every reference: how to build it and what to feed it.
MODULES = {
    "bert.MultiHeadAttention": (lambda: reference("bert", "attention").MultiHeadAttention(8, 2, 0.0), (X, PADDING)),
    "bert.PositionalEncoding": (lambda: reference("bert", "encoder").PositionalEncoding(8, 0.0), (X,)),
    "bert.TransformerBlock": (lambda: reference("bert", "encoder").TransformerBlock(8, 2, 0.0, 0.0), ((X, PADDING),)),
    "bert.BertModel": (lambda: reference("bert", "bert").BertModel(2, 7, 8, 2, 0.0, 0.0), (IDS, PADDING)),
    "bert.BERTGRUSentiment": (lambda: reference("bert", "sentiment").BERTGRUSentiment(small_bert_encoder(), 6, 1, 1, True, 0.0),
                              (IDS,)),
    "causal_lm.PositionalEncoding": (lambda: reference("causal_lm", "causal_lm").PositionalEncoding(8, 0.0), (X,)),
    "causal_lm.TransformerModel": (lambda: reference("causal_lm", "causal_lm").TransformerModel(7, 8, 2, 16, 2, 0.0), (IDS,)),
    "causal_lm.LMHead": (lambda: reference("causal_lm", "causal_lm").LMHead(8, 7), (X,)),
    "causal_lm.ClassificationHead": (lambda: reference("causal_lm", "causal_lm").ClassificationHead(8, 3), (X,)),
    "gpt.CausalSelfAttention": (lambda: reference("gpt", "gpt").CausalSelfAttention(gpt_config()), (X,)),
    "gpt.Block": (lambda: reference("gpt", "gpt").Block(gpt_config()), (X,)),
    "gpt.GPT": (lambda: reference("gpt", "gpt").GPT(gpt_config()), (IDS,)),
}


def _map_floats(value, fault):
    if isinstance(value, torch.Tensor):
        return fault(value) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_map_floats(v, fault) for v in value)
    return value


# A fault installs itself on the sub-module `name` of `module` and returns what undoes it, so
# that one module serves every fault (rebuilding it for each would take most of the test's time).


def _output_fault(transform):
    def install(module, name):
        return module.get_submodule(name).register_forward_hook(lambda _m, _a, output: _map_floats(output, transform)).remove
    return install


def _transpose(t):
    pairs = [(i, j) for i in range(t.dim()) for j in range(i + 1, t.dim()) if t.size(i) == t.size(j) > 1]
    return t.transpose(*pairs[0]) if pairs else t * 1.5


def _shift(t):
    axis = 1 if t.dim() >= 2 and t.size(1) > 2 else t.dim() - 1
    return torch.cat([t.narrow(axis, 0, 1), t.narrow(axis, 0, t.size(axis) - 1)], axis)


def _other_axis(t):
    return nn.functional.layer_norm(t.transpose(-1, -2), t.shape[-2:-1]).transpose(-1, -2) if t.dim() >= 2 else -t


def _dropped(module, name):
    """The sub-module hands on its input unchanged, where the shapes allow."""
    def hook(_module, args, output):
        first = args[0] if args else None
        if isinstance(output, torch.Tensor) and isinstance(first, torch.Tensor) and first.shape == output.shape:
            return first
        return output
    return module.get_submodule(name).register_forward_hook(hook).remove


ACTIVATIONS = {nn.GELU: nn.ReLU, nn.ReLU: nn.GELU, nn.Tanh: nn.Sigmoid}


def _other_activation(module, name):
    parent_name, _, attribute = name.rpartition(".")
    parent = module.get_submodule(parent_name)
    old = getattr(parent, attribute)
    setattr(parent, attribute, ACTIVATIONS[type(old)]())
    return lambda: setattr(parent, attribute, old)


def _buffer_init(module, name):
    buffers = [b for b in module.get_submodule(name).buffers(recurse=False) if b.is_floating_point()]
    saved = [b.clone() for b in buffers]
    for buffer in buffers:
        buffer.mul_(1.5).add_(0.1)

    def undo():
        for buffer, value in zip(buffers, saved):
            buffer.copy_(value)
    return undo


FAULTS = {
    "scale": _output_fault(lambda t: t * 1.5),
    "sign": _output_fault(lambda t: -t),
    "transpose": _output_fault(_transpose),
    "shift": _output_fault(_shift),
    "wrong axis": _output_fault(_other_axis),
    "dropped": _dropped,
    "activation": _other_activation,
    "buffer init": _buffer_init,
}


def _applies(fault, sub):
    if fault == "activation":
        return type(sub) in ACTIVATIONS
    if fault == "buffer init":
        return any(b.is_floating_point() for b in sub.buffers(recurse=False))
    return True


def _first_output(value):
    while isinstance(value, (tuple, list)):
        value = value[0]
    return value


@pytest.mark.parametrize("module_name", sorted(MODULES))
def test_every_generic_fault_is_localised_to_its_sub_module(module_name):
    build, inputs = MODULES[module_name]
    torch.manual_seed(0)
    right = build().eval()
    expected = parse_trace(trace_calls(right, inputs, {}))
    with torch.no_grad():
        clean = _first_output(right(*inputs))
    called = {call.name for call in expected.calls}
    tried, wrong = 0, []
    for name, sub in right.named_modules():
        if name not in called and not (name and _applies("buffer init", sub)):
            continue
        for fault, install in FAULTS.items():
            if not _applies(fault, sub):
                continue
            undo = install(right, name)
            try:
                with torch.no_grad():
                    output = _first_output(right(*inputs))
                if torch.allclose(output, clean, atol=1e-4, rtol=1e-3):
                    continue  # a fault with no effect on the output (e.g. on a dropout in eval mode)
                where = first_divergence(parse_trace(trace_calls(right, inputs, {})), expected)
            finally:
                undo()
            tried += 1
            label = f"`{name}`" if name else "the module's own forward"
            if where is None or label not in where.split(":")[0]:
                wrong.append(f"{fault} at {label}: {where}")
    assert tried > 0
    assert not wrong, f"{len(wrong)} of {tried} faults localised elsewhere:\n" + "\n".join(wrong[:10])


def test_a_sub_module_never_called_is_said():
    block = reference("bert", "encoder").TransformerBlock(8, 2, 0.0, 0.0).eval()
    expected = parse_trace(trace_calls(block, ((X, PADDING),), {}))
    skipping = copy.deepcopy(block)
    norms = [name for name, m in block.named_modules() if isinstance(m, nn.LayerNorm)]
    setattr(skipping, norms[0], nn.Identity())
    skipping.add_module(f"{norms[0]}_unused", nn.LayerNorm(8))
    where = first_divergence(parse_trace(trace_calls(skipping, ((X, PADDING),), {})), expected)
    assert where is not None and norms[0] in where


def test_other_sub_module_names_are_matched_by_class_and_order():
    class Renamed(nn.Module):
        def __init__(self, right):
            super().__init__()
            self.first, self.second = right.qkv_proj, right.o_proj
            self.right = right

        def forward(self, x, mask=None):
            return self.right(x, mask)

    mha = reference("bert", "attention").MultiHeadAttention(8, 2, 0.0).eval()
    expected = parse_trace(trace_calls(mha, (X, PADDING), {}))
    broken = copy.deepcopy(mha)
    broken.o_proj.register_forward_hook(lambda m, a, out: out * 2)
    traced = trace_calls(broken, (X, PADDING), {})
    renamed = {**traced, "calls": [{**c, "name": {"qkv_proj": "in_layer", "o_proj": "out_layer"}.get(c["name"], c["name"])}
                                    for c in traced["calls"]],
               "modules": {"": "MultiHeadAttention", "in_layer": "Linear", "out_layer": "Linear"}}
    where = first_divergence(parse_trace(renamed), expected)
    assert where.startswith("first difference in `o_proj` (Linear)") and "2 times" in where


def test_a_trace_from_the_worker_is_checked_before_use():
    assert parse_trace({"calls": [{"name": 3}], "modules": {}}) is None
    assert parse_trace(["not", "a", "trace"]) is None


def test_the_worker_traces_the_students_module_as_the_grader_traces_the_reference(tmp_path):
    import shutil

    from graders.checks.localise import module_divergence
    from graders.oracles import ReferenceOracle
    from graders.sandbox import Limits, Worker
    from tests.course import BERT as pack

    folder = tmp_path / "submission"
    shutil.copytree(pack.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    attention = folder / "attention.py"
    attention.write_text(attention.read_text().replace("return self.o_proj(", "return 2 * self.o_proj("))
    state = reference("bert", "attention").MultiHeadAttention(8, 2, 0.0).state_dict()

    class Ctx:
        oracle = ReferenceOracle(pack)

    with Worker(folder, limits=Limits(), task_modules=pack.task_modules) as worker:
        Ctx.student = worker
        handle = worker.construct("attention", "MultiHeadAttention", 8, 2, 0.0)
        worker.load_state_dict(handle, state)
        where = module_divergence(Ctx, handle, ("attention.MultiHeadAttention", [8, 2, 0.0], {}), state, [X, PADDING])
    assert where.startswith("first difference in the module's own forward (MultiHeadAttention)")
    assert "2 times the expected values" in where
