"""Checks for minGPT: the dataset, collate, the heads and generation (seeds 002 and 003).

Every callable of the contract has a differential check that compares it by value with the
reference over the argument space graders/packs/gpt/space.py declares: GPT.forward under weights
the grader chooses (seeded, larger than minGPT's init, so that logits are well apart), the
dataset and the collate function on corpora of the grader's. generate is graded apart from
forward: the student's GPT object generates with the grader's stand-in forward
(graders/packs/gpt/tasks.py), whose logits the grader computes itself, so a mistake of forward
costs nothing in generate's checks, and greedy tokens are compared with the reference's generate
over the same stand-in.
"""

import itertools
import math
import re
from typing import NamedTuple

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from graders.checks.compare import expect_close, expect_tensor, is_close
from graders.checks.framework import CheckFailed, check, describe_returned, student_line
from graders.checks.gates import DIAGNOSIS as DEGENERATE, expect_varies, sequence_gate
from graders.checks.localise import describe_difference, module_divergence
from graders.checks.weights import count_difference, is_float_entry, parameter_entries, state_shapes
from graders.oracles import OracleUnavailable
from graders.sandbox import StudentError

from ..tasks import STAND_IN, stand_in_logits, stand_in_table

MODULE = "gpt"
PAD_ID, IGNORE_INDEX = 0, -1


# ---------------------------------------------------------------- strategies


@st.composite
def gpt_configs(draw, *, min_vocab=4, max_vocab=16, min_block=3):
    n_head = draw(st.integers(1, 2))
    return {
        "vocab_size": draw(st.integers(min_vocab, max_vocab)),
        "block_size": draw(st.integers(min_block, 8)),
        "n_layer": draw(st.integers(1, 2)),
        "n_head": n_head,
        "n_embd": n_head * draw(st.integers(2, 4)),
        "n_classification_class": draw(st.integers(2, 4)),
        "weights_seed": draw(st.integers(0, 2**16)),
    }


@st.composite
def sentences(draw, *, min_len=2, max_len=7, max_count=5):
    """Lists of token ids (a corpus already encoded)."""
    count = draw(st.integers(1, max_count))
    return [draw(st.lists(st.integers(1, 30), min_size=min_len, max_size=max_len)) for _ in range(count)]


class Prompt(NamedTuple):
    """An input of generate; checks unpack it like a tuple, counterexamples name its fields."""

    config: dict
    idx: torch.Tensor  # (B, T)
    max_new_tokens: int


@st.composite
def prompts(draw, *, max_len=None, longer_than_block=False):
    """(config, prompt (B, T), max_new_tokens)."""
    config = draw(gpt_configs())
    block = config["block_size"]
    if longer_than_block:
        T = draw(st.integers(block + 1, block + 4))
        n = draw(st.integers(1, 3))
    else:
        T = draw(st.integers(1, block - 1))
        n = draw(st.integers(1, block - T))
    B = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    idx = torch.randint(0, config["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))
    return Prompt(config, idx, n)


# GPT.forward's argument space (the GPTConfig and GPT.forward docstrings): a block of one position
# or more, one to three layers and heads, heads of any width (odd too), rates each of its own (in
# eval mode they change nothing), calls of any length up to block_size on one model, with no
# targets, next-token targets with IGNORE_INDEX padding, class targets or none with
# finetune_classify, and training mode where every rate is 0 (the only training mode whose
# output a value can be compared with; gpt.dropout judges the rates).
RATES = (0.0, 0.1, 0.25, 0.5)
FORWARD_KINDS = ("logits", "next-token targets", "class logits", "class targets")


class ForwardCall(NamedTuple):
    """One call GPT.forward(idx, targets, finetune_classify) in training or eval mode."""

    idx: torch.Tensor
    targets: torch.Tensor | None
    finetune_classify: bool
    training: bool


class ForwardCase(NamedTuple):
    """A model and the calls made on it, in order."""

    config: dict
    calls: tuple


@st.composite
def forward_cases(draw):
    n_head = draw(st.integers(1, 3))
    config = {"vocab_size": draw(st.integers(2, 16)), "block_size": draw(st.integers(1, 8)),
              "n_layer": draw(st.integers(1, 3)), "n_head": n_head, "n_embd": n_head * draw(st.integers(1, 4)),
              "n_classification_class": draw(st.integers(2, 4)), "weights_seed": draw(st.integers(0, 2**16))}
    training = draw(st.booleans())  # some calls in training mode: then every rate is 0
    rates = (0.0, 0.0, 0.0) if training else draw(st.tuples(*[st.sampled_from(RATES)] * 3))
    config.update(zip(DROPOUT_RATES, rates))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        B, T = draw(st.integers(1, 3)), draw(st.integers(1, config["block_size"]))
        kind = draw(st.sampled_from(FORWARD_KINDS))
        idx = torch.randint(0, config["vocab_size"], (B, T), generator=g)
        targets = None
        if kind == "next-token targets":
            targets = torch.randint(0, config["vocab_size"], (B, T), generator=g)
            for row in range(B):  # padding at the end of a row; row 0 keeps a real target
                padded = int(torch.randint(0, T, (1,), generator=g))
                targets[row, T - padded if row else T - min(padded, T - 1):] = IGNORE_INDEX
        elif kind == "class targets":
            targets = torch.randint(0, config["n_classification_class"], (B,), generator=g)
        calls.append(ForwardCall(idx, targets, kind.startswith("class"), training and draw(st.booleans())))
    return ForwardCase(config, tuple(calls))


# GPT.generate's argument space (its docstring): prompts of one token to block_size + 3, a batch
# of one or more, max_new_tokens from 0 to beyond block_size, a temperature and top_k (1 to
# vocab_size) given or not, do_sample=False given or not, a block of one position, several calls
# on one model. Greedy: the sampling checks draw the rest.
GREEDY_TEMPERATURES = (0.01, 0.5, 2.0)


class GenerateCall(NamedTuple):
    """generate(idx, max_new_tokens, **options)."""

    idx: torch.Tensor
    max_new_tokens: int
    options: dict


class GenerateCase(NamedTuple):
    """A model (its forward the grader's stand-in) and the greedy calls made on it, in order."""

    config: dict
    calls: tuple


@st.composite
def generate_cases(draw):
    config = draw(gpt_configs(min_block=1))
    block, V = config["block_size"], config["vocab_size"]
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        B, T, n = draw(st.integers(1, 3)), draw(st.integers(1, block + 3)), draw(st.integers(0, block + 2))
        options = {}
        if draw(st.booleans()):
            options["temperature"] = draw(st.sampled_from(GREEDY_TEMPERATURES))
        if draw(st.booleans()):
            options["top_k"] = V if draw(st.booleans()) else draw(st.integers(1, V))  # all of them, or some
        if draw(st.booleans()):
            options["do_sample"] = False
        calls.append(GenerateCall(torch.randint(0, V, (B, T), generator=g), n, options))
    return GenerateCase(config, tuple(calls))


class Corpus(NamedTuple):
    """Sentences of token ids (sentences of fewer than two tokens among them), and the order in
    which the dataset's items are read (an index may come twice)."""

    sentences: list
    order: list


@st.composite
def corpora(draw):
    sentences = draw(st.lists(st.lists(st.integers(1, 30), max_size=7), min_size=1, max_size=5))
    kept = [i for i, ids in enumerate(sentences) if len(ids) >= 2]
    order = draw(st.permutations(range(len(kept)))) if kept else []
    if order and draw(st.booleans()):
        order = [*order, order[0]]
    return Corpus(sentences, list(order))


# ---------------------------------------------------------------- helpers


def build_gpt(ctx, config, *, grader_weights=True, scale=1.0):
    """The student's GPT for `config`, in eval mode, with grader-chosen weights (seeded): the
    reference layout's weights (`reference_state`) mapped onto the student's parameters
    (`student_candidates`), or, where no mapping exists, a seeded value by the student's names."""
    cfg = {k: v for k, v in config.items() if k != "weights_seed"}
    ctx.student.seed(config["weights_seed"])
    handle = ctx.student.construct(MODULE, "GPT", ctx.student.construct(MODULE, "GPTConfig", **cfg))
    ctx.student.call(handle, "eval")
    _remember(ctx, handle, config)
    if grader_weights:
        ctx.student.load_state_dict(handle, grader_weights_of(ctx, handle, config["weights_seed"], scale).loaded,
                                    strict=False)
    return handle


def _draw(g, name, shape, scale):
    """The seeded value of one parameter: LayerNorm gains near one, the rest scaled by fan-in (lm_head
    three times larger, so that logits are well apart)."""
    if name.endswith(".weight") and len(shape) == 1 and "ln" in name:
        return 1.0 + 0.1 * torch.randn(shape, generator=g)  # LayerNorm gains near one
    fan_in = shape[-1] if len(shape) > 1 else 1
    return torch.randn(shape, generator=g) * scale / math.sqrt(max(fan_in, 1)) * (3.0 if "lm_head" in name else 1.0)


def grader_state(ctx, handle, seed, scale=1.0):
    """A seeded value for every floating parameter of the student's, by its own names (not buffers:
    the causal mask stays): the weights of a model whose parameters match no reference layout."""
    g = torch.Generator().manual_seed(seed)
    return {p["name"]: _draw(g, p["name"], tuple(p["shape"]), scale)
            for p in parameter_entries(ctx, handle) if is_float_entry(p)}


def reference_layout(cfg):
    """[(name, shape)] of the reference GPT's parameters, in its order (named_parameters): the layout
    the template gives (transformer.wte / wpe / h / ln_f, c_attn, c_proj, mlp.c_fc, mlp.c_proj)."""
    V, block, E = cfg["vocab_size"], cfg["block_size"], cfg["n_embd"]
    layout = [("transformer.wte.weight", (V, E)), ("transformer.wpe.weight", (block, E))]
    for i in range(cfg["n_layer"]):
        h = f"transformer.h.{i}."
        layout += [(h + "ln_1.weight", (E,)), (h + "ln_1.bias", (E,)),
                   (h + "attn.c_attn.weight", (3 * E, E)), (h + "attn.c_attn.bias", (3 * E,)),
                   (h + "attn.c_proj.weight", (E, E)), (h + "attn.c_proj.bias", (E,)),
                   (h + "ln_2.weight", (E,)), (h + "ln_2.bias", (E,)),
                   (h + "mlp.c_fc.weight", (4 * E, E)), (h + "mlp.c_fc.bias", (4 * E,)),
                   (h + "mlp.c_proj.weight", (E, 4 * E)), (h + "mlp.c_proj.bias", (E,))]
    C = cfg.get("n_classification_class", 2)
    return layout + [("transformer.ln_f.weight", (E,)), ("transformer.ln_f.bias", (E,)), ("lm_head.weight", (V, E)),
                     ("classifier_head.weight", (C, E)), ("classifier_head.bias", (C,))]


def reference_state(cfg, seed, scale=1.0):
    """The grader's weights in the reference's layout, drawn in its order: for a student of the
    reference's names the same values `grader_state` draws."""
    g = torch.Generator().manual_seed(seed)
    return {name: _draw(g, name, shape, scale) for name, shape in reference_layout(cfg)}


class GraderWeights(NamedTuple):
    """The grader's weights for one model. `reference`: in the reference's layout (what the oracle
    runs), or the student's own names where no mapping exists; `candidates`: the same weights under
    the student's names, one per reading of an ambiguous layout (which of three separate
    projections is the query, the key, the value), the likeliest first; `problem`: why the student's
    parameters could not be matched to the reference's, or None."""

    reference: dict
    candidates: list
    problem: str | None

    @property
    def loaded(self):
        return self.candidates[0]


def grader_weights_of(ctx, handle, seed, scale=1.0):
    config = _config_of(ctx, handle)
    entries = [(p["name"], tuple(p["shape"])) for p in parameter_entries(ctx, handle) if is_float_entry(p)]
    if config is not None:
        cfg = {k: v for k, v in config.items() if k != "weights_seed"}
        reference = reference_state(cfg, seed, scale)
        candidates, problem = student_candidates(entries, reference, cfg)
        if candidates:
            return GraderWeights(reference, candidates, None)
    else:
        problem = "the model's configuration is unknown"
    own = grader_state(ctx, handle, seed, scale)
    return GraderWeights(own, [own], problem)


# ------------------------------------------------ the student's parameters, matched to the reference's
#
# The GPT docstring names only lm_head and classifier_head: any layout of the same computation is
# right (a fused c_attn or separate query / key / value projections, an Embedding or a Parameter for
# the positions, other names). The reference's weights are assigned to the student's parameters by
# name where the layouts agree, else by role: the heads by their names; outside the blocks a
# (vocab_size, E) table for the tokens, a (block_size, E) or (1, block_size, E) one for the positions
# and a LayerNorm (weight and bias of shape (E,)) for ln_f; in block i (the i-th distinct index in
# the names) its two LayerNorms in order, the (4E, E) and (E, 4E) Linears of the MLP, and either a
# (3E, E) c_attn and an (E, E) projection, or four (E, E) Linears: the query, key, value and output
# projections, in an order the names hint at (q / query, k / key, v / value, proj / out / o) and
# otherwise every order is a candidate, which the student's own forward decides between.

_ROLE_HINTS = {"q": ("q", "query", "queries"), "k": ("k", "key", "keys"), "v": ("v", "value", "values"),
               "proj": ("proj", "c_proj", "out", "out_proj", "o", "o_proj", "output", "dense")}


def _hint(module, role):
    leaf = module.rsplit(".", 1)[-1].lower()
    words = set(re.split(r"[_\W]+", leaf)) | {leaf}
    return bool(words & set(_ROLE_HINTS[role]))


def _modules(entries):
    """{module prefix: {leaf: shape}} in the parameters' order."""
    modules = {}
    for name, shape in entries:
        prefix, _, leaf = name.rpartition(".")
        modules.setdefault(prefix, {})[leaf] = shape
    return modules


def _layer_of(name):
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return None


def student_candidates(entries, reference, cfg):
    """([{student name: tensor}], None): the reference-layout weights under the student's names, one
    dict per candidate reading; or ([], why) when some parameter has no counterpart."""
    shapes = dict(entries)
    ref_shapes = {name: tuple(t.shape) for name, t in reference.items()}
    if shapes == ref_shapes:
        return [dict(reference)], None
    V, block, E, L = cfg["vocab_size"], cfg["block_size"], cfg["n_embd"], cfg["n_layer"]
    fixed, layers, outside = {}, {}, []
    for head in ("lm_head.weight", "classifier_head.weight", "classifier_head.bias"):
        if shapes.get(head) != ref_shapes[head]:
            return [], f"the reference's {head} {ref_shapes[head]} has no counterpart in yours (the docstring's name)"
        fixed[head] = reference[head]
    for name, shape in entries:
        if name in fixed:
            continue
        layer = _layer_of(name)
        (outside if layer is None else layers.setdefault(layer, [])).append((name, shape))
    if len(layers) != L:
        return [], (f"your parameters hold {len(layers)} numbered blocks where the reference has n_layer={L} "
                    f"(transformer.h.0 ... has no counterpart)")
    # outside the blocks: the token and position tables, ln_f
    remaining = list(outside)

    def take(want, what):
        for i, (name, shape) in enumerate(remaining):
            if shape in want:
                remaining.pop(i)
                return name, shape
        raise LookupError(f"the reference's {what} has no counterpart in yours")

    try:
        name, _ = take({(V, E)}, f"token embedding transformer.wte.weight {(V, E)}")
        fixed[name] = reference["transformer.wte.weight"]
        name, shape = take({(block, E), (1, block, E)}, f"position embedding transformer.wpe.weight {(block, E)}")
        fixed[name] = reference["transformer.wpe.weight"].reshape(shape)
        norms = [m for m, leaves in _modules(remaining).items() if leaves == {"weight": (E,), "bias": (E,)}]
        if len(norms) != 1:
            raise LookupError(f"the reference's final LayerNorm transformer.ln_f {(E,)} has no single counterpart "
                              f"in yours ({len(norms)} weight-and-bias pairs of shape {(E,)} outside the blocks)")
        fixed[f"{norms[0]}.weight"] = reference["transformer.ln_f.weight"]
        fixed[f"{norms[0]}.bias"] = reference["transformer.ln_f.bias"]
        remaining = [(n, s) for n, s in remaining if n.rpartition(".")[0] != norms[0]]
        if remaining:
            raise LookupError(f"your {remaining[0][0]} {remaining[0][1]} has no counterpart in the reference's")
        readings = None
        for position, layer in enumerate(sorted(layers)):
            block_fixed, separate = _match_block(layers[layer], reference, f"transformer.h.{position}.", E)
            fixed.update(block_fixed)
            if readings is None:
                readings = separate
            elif (separate is None) != (readings is None):
                raise LookupError(f"block {layer} of yours lays out its attention otherwise than block {sorted(layers)[0]}")
            elif separate is not None:
                readings = [{**r, **s} for r, s in zip(readings, separate)]
    except LookupError as error:
        return [], str(error)
    return [{**fixed, **reading} for reading in (readings or [{}])], None


def _match_block(params, reference, h, E):
    """({student name: tensor}, None or [{student name: tensor}] per reading of separate q / k / v
    projections) for one block's parameters `params`, the reference's block prefix `h`."""
    modules = _modules(params)
    norms, linears = [], {}
    for module, leaves in modules.items():
        if leaves == {"weight": (E,), "bias": (E,)}:
            norms.append(module)
        elif set(leaves) == {"weight", "bias"} and len(leaves["weight"]) == 2 and leaves["bias"] == leaves["weight"][:1]:
            linears.setdefault(leaves["weight"], []).append(module)
        else:
            leaf, shape = next(iter(leaves.items()))
            raise LookupError(f"your {module}.{leaf} {shape} has no counterpart in the reference's block")
    if len(norms) != 2:
        raise LookupError(f"the reference's {h}ln_1 and {h}ln_2 have no counterpart in yours ({len(norms)} LayerNorms "
                          "in the block)")
    out = {}

    def assign(module, ref_module):
        out[f"{module}.weight"], out[f"{module}.bias"] = reference[f"{ref_module}.weight"], reference[f"{ref_module}.bias"]

    assign(norms[0], h + "ln_1")
    assign(norms[1], h + "ln_2")
    for shape, ref_module in (((4 * E, E), h + "mlp.c_fc"), ((E, 4 * E), h + "mlp.c_proj")):
        if len(linears.get(shape, [])) != 1:
            raise LookupError(f"the reference's {ref_module} {shape} has no single counterpart in yours")
        assign(linears.pop(shape)[0], ref_module)
    square = linears.pop((E, E), [])
    fused = linears.pop((3 * E, E), [])
    if linears:
        shape, modules_left = next(iter(linears.items()))
        raise LookupError(f"your {modules_left[0]}.weight {shape} has no counterpart in the reference's block")
    if len(fused) == 1 and len(square) == 1:
        assign(fused[0], h + "attn.c_attn")
        assign(square[0], h + "attn.c_proj")
        return out, None
    if fused or len(square) != 4:
        raise LookupError(f"the reference's {h}attn.c_attn {(3 * E, E)} and {h}attn.c_proj {(E, E)} have no counterpart "
                          f"in yours ({len(fused)} Linear of {(3 * E, E)}, {len(square)} of {(E, E)})")
    weight = reference[h + "attn.c_attn.weight"].split(E, dim=0)
    bias = reference[h + "attn.c_attn.bias"].split(E, dim=0)
    readings = []
    for proj in range(4):
        others = [m for i, m in enumerate(square) if i != proj]
        for order in itertools.permutations(range(3)):  # order[j]: which of q, k, v the j-th other one is
            score = _hint(square[proj], "proj") + sum(_hint(m, "qkv"[r]) for m, r in zip(others, order))
            reading = {f"{square[proj]}.weight": reference[h + "attn.c_proj.weight"],
                       f"{square[proj]}.bias": reference[h + "attn.c_proj.bias"]}
            for module, r in zip(others, order):
                reading[f"{module}.weight"], reading[f"{module}.bias"] = weight[r].clone(), bias[r].clone()
            readings.append((-score, proj != 3, reading))
    readings.sort(key=lambda r: (r[0], r[1]))  # stable: module order (the projection last, q, k, v) first
    return out, [r[2] for r in readings]


def call_forward(ctx, handle, idx, *args, **kwargs):
    """What GPT.forward(idx, ...) returned, as it came back; a known exception explained."""
    try:
        return ctx.student.call(handle, "__call__", idx, *args, **kwargs)
    except StudentError as error:
        raise explain_error(ctx, handle, error, idx, "GPT.forward", **kwargs) from None


def _forward_text(idx, targets=None, finetune_classify=False):
    given = ("" if targets is None else f", targets of shape {tuple(targets.shape)}") \
        + (", finetune_classify=True" if finetune_classify else "")
    return f"GPT.forward(idx of shape {tuple(idx.shape)}{given})"


def returned_pair(result, idx, targets=None, finetune_classify=False):
    """(logits, loss) of what GPT.forward returned, or the failure that says it is no such pair
    (the docstring's return value: charged in gpt.forward_matches_reference and in the checks of
    the loss, which has nowhere else to be)."""
    if isinstance(result, tuple) and len(result) == 2:
        return result
    got = describe_returned(result) + (" alone" if isinstance(result, torch.Tensor) else "")
    raise CheckFailed(f"{_forward_text(idx, targets, finetune_classify)} returned {got}: it must return the pair "
                      "(logits, loss), the loss None without targets", diagnosis="returns_wrong_type")


def forward(ctx, handle, idx, *args, **kwargs):
    """GPT.forward's (logits, loss): the checks that judge the loss."""
    targets = args[0] if args else kwargs.get("targets")
    return returned_pair(call_forward(ctx, handle, idx, *args, **kwargs), idx, targets,
                         kwargs.get("finetune_classify", False))


def logits_in(result, shape):
    """The logits in what GPT.forward returned, however it returns them: the tensor of `shape` in a
    tuple or list (the pair the docstring asks for), or the tensor itself (a forward that drops the
    loss is charged where its return value is judged, not in every check of the logits)."""
    if isinstance(result, (tuple, list)):
        return next((item for item in result if isinstance(item, torch.Tensor) and tuple(item.shape) == shape),
                    result[0] if result else None)
    return result


def model_logits(ctx, handle, idx, *args, shape=None, what="logits", **kwargs):
    """GPT.forward's logits for `idx` (of `shape`, by default (B, T, vocab_size) of the model's
    configuration), however it returns them."""
    if shape is None:
        config = _config_of(ctx, handle)
        shape = (*idx.shape, config["vocab_size"]) if config is not None else None
    result = call_forward(ctx, handle, idx, *args, **kwargs)
    return expect_tensor(logits_in(result, shape), what, shape=shape)


def model_config(config):
    """GPTConfig's arguments of a drawn configuration (the weights' seed is the grader's)."""
    return {k: v for k, v in config.items() if k != "weights_seed"}


# ---------------------------------------------------------------- the student's exceptions, explained
#
# A raw "RuntimeError: selected index 5 out of range" says what torch saw, not what the student
# did. The exceptions whose cause is known from the call's input become a failure that says so, with
# that input and the student's line; any other stays the student's error (reported with its traceback).

_MODELS = "_gpt_models"  # on the context: {id(handle): (handle, config)} of the models build_gpt made


def _remember(ctx, handle, config):
    models = getattr(ctx, _MODELS, None)
    if models is None:
        models = {}
        setattr(ctx, _MODELS, models)
    models[id(handle)] = (handle, config)


def _config_of(ctx, handle):
    entry = (getattr(ctx, _MODELS, None) or {}).get(id(handle))
    return entry[1] if entry is not None and entry[0] is handle else None


def _call_text(what, idx, kwargs):
    shown = "".join(f", {k}={v!r}" for k, v in kwargs.items() if k not in ("targets",))
    return f"{what}(idx of shape {tuple(idx.shape)} holding ids up to {int(idx.max()) if idx.numel() else None}{shown})"


def _runs(ctx, handle, idx):
    try:
        ctx.student.call(handle, "__call__", idx)
    except StudentError:
        return False
    return True


def _samples_from_logits(ctx, handle, context):
    """Plain sampling (no top_k, temperature 1) raises that the probabilities hold something negative or
    infinite, as torch.multinomial does when it is given logits."""
    try:
        ctx.student.call(handle, "generate", context, 1, do_sample=True)
    except StudentError as error:
        return "probability tensor contains" in error.message
    return False


def _generates(ctx, handle, context, max_new_tokens=1, **kwargs):
    """generate runs on `context` with these arguments (one new token at least)."""
    try:
        ctx.student.call(handle, "generate", context, max(int(max_new_tokens), 1), **kwargs)
    except StudentError:
        return False
    return True


def _crops_at_block_size(ctx, config, block_size):
    """Whether the student's generate, on a model of `block_size` positions (the grader's stand-in
    forward, which raises on a longer context), runs on a prompt longer than that."""
    handle, _ = stand_in_model(ctx, {**config, "block_size": block_size})
    return _generates(ctx, handle, torch.zeros(1, block_size + 2, dtype=torch.long))


def explain_error(ctx, handle, error, idx, what, **kwargs):
    """A CheckFailed that says what the student's code did with `idx`, when the exception is a known
    consequence of a known mistake; the StudentError itself otherwise."""
    config = _config_of(ctx, handle)
    if config is None or type(idx) is not torch.Tensor or idx.dim() != 2 or not idx.numel():
        return error
    block, V = config["block_size"], config["vocab_size"]
    call, where = _call_text(what, idx, kwargs), student_line(error)
    raised = f"{call} raised {error.exc_type}: {error.message}"[:300] + where
    top_k = kwargs.get("top_k")
    context = idx[:, -block:]
    if what == "generate" and STAND_IN in error.message and "more than block_size" in error.message:
        if block == 1 and _crops_at_block_size(ctx, config, 3):
            return CheckFailed(f"{raised}. generate ran the model's forward on a context longer than block_size=1, though "
                               "at block_size=3 it crops a longer prompt: the crop goes wrong at block_size 1 only (what "
                               "does your slice keep when block_size is 1?); crop to the last block_size tokens, "
                               "idx[:, -block_size:]"[:900])
        return CheckFailed(f"{raised}. generate ran the model's forward on a context longer than block_size={block}: crop "
                           "the context to its last block_size tokens, idx[:, -block_size:], before each forward"[:900],
                           diagnosis="generate_no_crop")
    if "index out of range in self" in error.message and int(idx.max()) >= block:
        # an embedding indexed past its rows: the ids given to one of block_size rows, the position
        # embedding, run once they are below block_size
        if not _runs(ctx, handle, context) and _runs(ctx, handle, context % block):
            return CheckFailed(f"{raised}. The same model runs once every id is below block_size={block}: the token ids "
                               "are fed to the position embedding wpe, which has block_size rows; it must get the "
                               "positions 0..T-1 (torch.arange(T)), and wte the ids"[:900],
                               diagnosis="gpt_positions_from_ids")
    # (T, T) attention against the (block_size, block_size) mask: masked_fill raises, or (T = 1) broadcasts
    # the attention to the mask's size and the product with the values raises
    # (the attention's dimensions 2 and 3: a mismatch of the embeddings' sum, dimension 1, is another mistake)
    sizes = (re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
                       r"dimension [23]", error.message)
             or re.search(r"to be: \[\d+, (\d+)\] but got: \[\d+, (\d+)\]", error.message))
    if sizes:
        a, b = int(sizes.group(1)), int(sizes.group(2))
        if max(a, b) == block and min(a, b) < block:
            return CheckFailed(f"{raised}. Attention over {min(a, b)} positions met the causal mask of all block_size={block} "
                               f"positions: a sequence shorter than block_size needs the mask cropped to it, "
                               "bias[:, :, :T, :T]"[:900], diagnosis="attention_mask_not_cropped")
    target_size = re.search(r"Expected target size [(\[](\d+), (\d+)[)\]], got (?:torch\.Size\()?\[(\d+), (\d+)\]",
                            error.message)
    B, T = idx.shape
    if target_size and tuple(int(n) for n in target_size.groups()) == (B, V, B, T):
        return CheckFailed(f"{raised}. F.cross_entropy read the logits {(B, T, V)} as (batch, classes, positions), the "
                           f"classes on dimension 1, so it wanted targets {(B, V)}: flatten the logits to (B*T, vocab_size) "
                           "and the targets to (B*T,)"[:900], diagnosis="loss_class_dim")
    dims = re.search(r"Tensors must have same number of dimensions: got (\d+) and (\d+)", error.message)
    if what == "generate" and dims and {int(dims.group(1)), int(dims.group(2))} == {1, 2}:
        return CheckFailed(f"{raised}. The new token of each row must be a (B, 1) column to append to idx (B, T) with "
                           "torch.cat(..., dim=1): argmax(dim=-1, keepdim=True) (torch.multinomial already gives (B, 1))"[:900],
                           diagnosis="generate_next_token_shape")
    if kwargs.get("do_sample") and "probability tensor contains" in error.message and _samples_from_logits(ctx, handle, context):
        return CheckFailed(f"{raised}. Sampling raises the same without top_k, at temperature 1: torch.multinomial got the "
                           "logits (negative, -inf where masked), not probabilities"[:900], diagnosis="sample_from_logits")
    if top_k is not None:
        selected = re.search(r"selected index \w+ out of range", error.message)
        if selected and top_k == V and _generates(ctx, handle, context, **{**kwargs, "top_k": V - 1}):
            return CheckFailed(f"{raised}. With top_k = vocab_size = {V} torch.topk was asked for more values than the "
                               f"{V} logits hold, and with top_k = {V - 1} generate runs: keep top_k values, "
                               "torch.topk(logits, top_k).values[:, [-1]] is the k-th best"[:900],
                               diagnosis="top_k_one_too_many")
        if selected or ("out of bounds" in error.message and error.exc_type == "IndexError"):
            return CheckFailed(f"{raised}. With top_k={top_k} the top k are taken over the vocabulary: torch.topk(logits, "
                               f"top_k) on the last position's logits (B, vocab_size={V}), along their last dimension, "
                               "and values[:, [-1]] is the k-th best"[:900], diagnosis="top_k_out_of_range")
        if "probability tensor contains" in error.message and top_k == 1:
            return CheckFailed(f"{raised}. With top_k=1 every logit was set to -inf, so softmax gives NaN: the k-th best "
                               "logit itself must stay (mask logits < the k-th best, not <=)"[:900],
                               diagnosis="top_k_drops_kth")
    return error


# ---------------------------------------------------------------- gates (graders/checks/gates.py)

GATE_CONFIG = {"vocab_size": 12, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 8,
               "n_classification_class": 3, "weights_seed": 37}


def _gate_model(ctx):
    idx = torch.randint(0, GATE_CONFIG["vocab_size"], (4, 6), generator=torch.Generator().manual_seed(41))
    what = f"GPT(vocab_size={GATE_CONFIG['vocab_size']}, n_embd={GATE_CONFIG['n_embd']}) under the grader's weights"
    return build_gpt(ctx, GATE_CONFIG), idx, what


def forward_gate(ctx):
    """GPT.forward does its job, on a model and ids of the gate's own: in eval mode its logits are
    repeatable, differ over the vocabulary, and the last position reads the first."""
    handle, idx, what = _gate_model(ctx)

    def call(x):
        return model_logits(ctx, handle, x)

    def change_at(x, t):
        changed = x.clone()
        changed[:, t] = (x[:, t] + 1) % GATE_CONFIG["vocab_size"]
        return changed

    logits = sequence_gate(call, idx, change_at, f"logits of {what} (eval mode, ids of shape {tuple(idx.shape)})")
    expect_varies(logits, f"logits of {what}", dim=-1)


def generate_gate(ctx):
    """GPT.generate does its job: the tokens it generates greedily come from the model (they change
    when the model's forward changes), on prompts of the gate's own."""
    idx = torch.randint(0, GATE_CONFIG["vocab_size"], (4, 6), generator=torch.Generator().manual_seed(41))
    tokens = []
    for seed in GATE_STAND_INS:
        handle, _ = stand_in_model(ctx, GATE_CONFIG, seed=seed)
        tokens.append(generate(ctx, handle, idx, 2))
    if torch.equal(*tokens):
        raise CheckFailed(f"greedy generate on prompts of shape {tuple(idx.shape)} gives the same tokens "
                          f"{tokens[0][:, -2:].tolist()} with two different forwards: the tokens do not come from the "
                          "model's forward (self(context)), so the property earns no points", diagnosis=DEGENERATE)


def sampling_gate(ctx):
    """Sampling does its job: its draws follow the model's forward. On two forwards of the gate's own
    whose most likely tokens differ at the first and at the last position of the gate's prompt (each
    over 90% of the mass), some token's share of 2,000 draws at temperature 1 (the same seed for both) differs
    between the two by ten standard deviations of one distribution drawn twice. A uniform or a
    constant sampler fails; a sampler whose draws come from the logits of any position passes (a
    right one, and wrong ones such as a softmax taken twice or the first position's logits, charged
    by the distribution checks)."""
    prompt, stand_ins = _sampling_gate_example()
    draws, V = 2000, SAMPLING_GATE_CONFIG["vocab_size"]
    shares = []
    for stand_in in stand_ins:
        handle, _ = stand_in_model(ctx, SAMPLING_GATE_CONFIG, seed=stand_in.seed, scale=stand_in.scale)
        ctx.student.seed(ctx.seed)
        out = generate(ctx, handle, prompt.repeat(draws, 1), 1, do_sample=True)
        shares.append(torch.bincount(out[:, -1].clamp(0, V - 1), minlength=V).double() / draws)
    if float((shares[0] - shares[1]).abs().max()) < 10 * math.sqrt(2 * 0.25 / draws):  # p (1 - p) <= 1/4
        raise CheckFailed(f"sampling one token {draws} times after the prompt {prompt.tolist()} with two forwards whose "
                          f"most likely tokens differ gave the same shares ({shares[0].tolist()} and "
                          f"{shares[1].tolist()}): the draws do not follow the model's forward, so the property earns "
                          "no points", diagnosis=DEGENERATE)


GATE_STAND_INS = (37, 38)  # two stand-in forwards whose greedy tokens on the gate's prompts differ
SAMPLING_GATE_CONFIG = {"vocab_size": 4, "block_size": 6, "n_layer": 1, "n_head": 2, "n_embd": 8,
                        "n_classification_class": 2}


def _sampling_gate_example():
    """(prompt (1, 4), (stand-in, stand-in)): the first pair of seeded stand-ins of peaked logits whose
    most likely tokens hold over 90% of the mass at the prompt's first and last positions and differ
    there. The prompt is shorter than block_size - 1, so that no crop, right or wrong, changes its
    logits."""
    V = SAMPLING_GATE_CONFIG["vocab_size"]
    prompt = torch.randint(0, V, (1, 4), generator=torch.Generator().manual_seed(47))
    stand_ins = [StandIn(V, SAMPLING_GATE_CONFIG["block_size"], seed, 6.0) for seed in range(200, 240)]
    peaked = {}
    for stand_in in stand_ins:
        p = torch.softmax(stand_in.logits(prompt)[0, [0, -1]].double(), -1)  # (2, V)
        if bool((p.amax(-1) > 0.9).all()):
            peaked[stand_in] = p.argmax(-1)
    for first, second in itertools.combinations(peaked, 2):
        if bool((peaked[first] != peaked[second]).all()):
            return prompt, (first, second)
    raise AssertionError("no pair of stand-ins fits the sampling gate")  # the seeds are fixed: never at grading time


# ---------------------------------------------------------------- data


@check("gpt.dataset_is_dataset", "LanguageModelingDataset subclasses torch.utils.data.Dataset")
def dataset_is_dataset(ctx):
    # What a Dataset subclass inherits and a plain class lacks: `dataset + dataset` is a
    # ConcatDataset of both. Its length and items are checked here against the dataset's own.
    corpus = [[1, 2, 3], [4, 5, 6, 7]]
    dataset = ctx.student.construct(MODULE, "LanguageModelingDataset", corpus)
    try:
        both = ctx.student.call(dataset, "__add__", dataset)
        n = ctx.student.call(both, "__len__")
        first, again = ctx.student.call(dataset, "__getitem__", 0), ctx.student.call(both, "__getitem__", len(corpus))
    except StudentError as error:
        raise CheckFailed(f"dataset + dataset raised {error.exc_type}: {error.message}; a subclass of "
                          "torch.utils.data.Dataset concatenates (ConcatDataset): it must subclass it",
                          diagnosis="dataset_wrong_class") from None
    same = (isinstance(first, (tuple, list)) and isinstance(again, (tuple, list)) and len(first) == len(again)
            and all(type(a) is torch.Tensor and type(b) is torch.Tensor and torch.equal(a, b) for a, b in zip(first, again)))
    if n != 2 * len(corpus) or not same:
        raise CheckFailed(f"dataset + dataset has length {n!r} (expected {2 * len(corpus)}) or another item at index "
                          f"{len(corpus)} than dataset[0]: LanguageModelingDataset must subclass torch.utils.data.Dataset",
                          diagnosis="dataset_wrong_class")
    dataset_gate(ctx)


def dataset_gate(ctx):
    """LanguageModelingDataset does its job (graders/checks/gates.py): its items come from the
    sentences (two sentences give different items) and Y is not a copy of X."""
    corpus = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]
    dataset = ctx.student.construct(MODULE, "LanguageModelingDataset", corpus)
    items = [ctx.student.call(dataset, "__getitem__", i) for i in range(len(corpus))]
    pairs = [(expect_tensor(x, f"X of sentence {ids}"), expect_tensor(y, f"Y of sentence {ids}"))
             for ids, item in zip(corpus, items) for x, y in [_pair(item)]]
    (x0, y0), (x1, y1) = pairs
    if x0.shape == x1.shape and torch.equal(x0, x1) and torch.equal(y0, y1):
        raise CheckFailed(f"the sentences {corpus} give the same item {x0.tolist()}, {y0.tolist()}: the items do not come "
                          "from the sentences, so the property earns no points", diagnosis=DEGENERATE)
    if all(x.shape == y.shape and torch.equal(x, y) for x, y in pairs):
        raise CheckFailed(f"sentence {corpus[0]} gives X = Y = {x0.tolist()}: Y must be X shifted by one, or the model "
                          "learns to copy its input, so the property earns no points", diagnosis="dataset_not_shifted")


def _pair(item):
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise CheckFailed("dataset[i] must be a pair (X, Y)", diagnosis="returns_wrong_type")
    return item


@check("gpt.dataset_shifted", "LanguageModelingDataset gives the reference's items: for every sentence of two tokens or more, "
                             "in order, (X, Y) = (ids[:-1], ids[1:]) as long tensors; shorter sentences left out")
def dataset_shifted(ctx):
    @ctx.given(corpora())
    def prop(corpus):
        sentences = corpus.sentences
        kept = [ids for ids in sentences if len(ids) >= 2]
        expected = ctx.oracle.call("gpt_dataset", sentences)
        dataset = ctx.student.construct(MODULE, "LanguageModelingDataset", sentences)
        n = ctx.student.call(dataset, "__len__")
        if n != len(expected):
            short = len(sentences) - len(kept)
            keeps_short = short and n == len(sentences)
            raise CheckFailed(f"the corpus {sentences} holds {len(kept)} sentences of two tokens or more (and {short} "
                              f"shorter), but the dataset has length {n!r}" + _two_token_sentences(ctx, kept, n),
                              diagnosis="dataset_keeps_short" if keeps_short else _length_mistake(ctx, kept, n))
        for i in corpus.order:
            ids = kept[i]
            x, y = _pair(ctx.student.call(dataset, "__getitem__", i))
            x, y = expect_tensor(x, f"X of sentence {ids}"), expect_tensor(y, f"Y of sentence {ids}")
            if not (x.shape == y.shape == (len(ids) - 1,) and torch.equal(x.long(), expected[i][0])
                    and torch.equal(y.long(), expected[i][1])):
                shift = _shift_between(x, y, ids)
                seen = f": Y is X shifted by {shift}" if shift is not None else ""
                if shift is None:  # too short a sentence to show a shift: a longer one of distinct tokens may
                    shift = _shift_on_a_long_sentence(ctx)
                    seen = f"; on {LONG_SENTENCE} Y is X shifted by {shift}" if shift is not None else ""
                raise CheckFailed(
                    f"dataset[{i}], sentence {ids} of the corpus {sentences}: expected X = {ids[:-1]}, Y = {ids[1:]}; got "
                    f"X = {x.tolist()}, Y = {y.tolist()}" + seen, diagnosis="dataset_not_shifted" if shift is not None else None,
                )
            if x.dtype != torch.long or y.dtype != torch.long:
                raise CheckFailed(f"X and Y must be long tensors (token ids, torch.int64), got {x.dtype} and {y.dtype}",
                                  diagnosis="returns_wrong_type")


@check("gpt.dataset_drops_short", "LanguageModelingDataset leaves out sentences of fewer than two tokens")
def dataset_drops_short(ctx):
    @ctx.given(sentences(min_len=2), st.integers(1, 3), st.integers(0, 2**16))
    def prop(corpus, n_short, seed):
        g = torch.Generator().manual_seed(seed)
        mixed = list(corpus)
        for _ in range(n_short):  # one-token (or empty) sentences at seeded places
            short = [int(torch.randint(1, 30, (1,), generator=g))] if bool(torch.rand(1, generator=g) < 0.7) else []
            mixed.insert(int(torch.randint(0, len(mixed) + 1, (1,), generator=g)), short)
        dataset = ctx.student.construct(MODULE, "LanguageModelingDataset", mixed)
        n = ctx.student.call(dataset, "__len__")
        if n != len(corpus):
            raise CheckFailed(f"the corpus {mixed} holds {len(corpus)} sentences of two tokens or more, but the dataset "
                              f"has length {n!r}" + _two_token_sentences(ctx, corpus, n),
                              diagnosis="dataset_keeps_short" if n == len(mixed) else _length_mistake(ctx, corpus, n))
        for i, ids in enumerate(corpus):
            x, y = _pair(ctx.student.call(dataset, "__getitem__", i))
            x, y = expect_tensor(x, f"X of item {i}"), expect_tensor(y, f"Y of item {i}")
            if not (torch.equal(x.long(), torch.tensor(ids[:-1])) and torch.equal(y.long(), torch.tensor(ids[1:]))):
                raise CheckFailed(f"item {i} of the dataset of {mixed} is X = {x.tolist()}, Y = {y.tolist()}; the sentences "
                                  f"of two tokens or more, in order, give X = {ids[:-1]}, Y = {ids[1:]} there")

    dataset_gate(ctx)


def _shift_between(x, y, ids):
    """k != 1 when X and Y are the same-length runs ids[a:a+n] and ids[a+k:a+k+n] of the sentence (Y is X
    shifted by k, 0 for a copy); None otherwise."""
    if x.dim() != 1 or x.shape != y.shape or not len(x):
        return None
    n = len(x)

    def starts(run):
        return [a for a in range(len(ids) - n + 1) if ids[a:a + n] == run.long().tolist()]

    shifts = {b - a for a in starts(x) for b in starts(y)} - {1}
    return min(shifts, key=abs) if shifts else None


LONG_SENTENCE = list(range(2, 12))  # distinct tokens: any run of it is found at one place only


def _shift_on_a_long_sentence(ctx):
    """The shift between the student's X and Y of LONG_SENTENCE, or None (none, or no pair)."""
    try:
        item = ctx.student.call(ctx.student.construct(MODULE, "LanguageModelingDataset", [LONG_SENTENCE]),
                                "__getitem__", 0)
    except StudentError:
        return None
    if not isinstance(item, (tuple, list)) or len(item) != 2 or not all(isinstance(t, torch.Tensor) for t in item):
        return None
    return _shift_between(item[0], item[1], LONG_SENTENCE)


def _drops_two_tokens(ctx):
    """A sentence of two tokens, one (X, Y) pair, is left out where a longer one is kept."""
    try:
        return ctx.student.call(ctx.student.construct(MODULE, "LanguageModelingDataset", [[5, 7], [1, 2, 3]]), "__len__") == 1
    except StudentError:
        return False


def _two_token_sentences(ctx, corpus, n):
    """What the dataset's length `n` says about the sentences of exactly two tokens, or ""."""
    longer = sum(len(ids) > 2 for ids in corpus)
    if n == longer != len(corpus):
        return (f": the {len(corpus) - longer} of exactly two tokens are left out, yet a sentence of two tokens gives "
                "one (X, Y) pair")
    return ""


def _length_mistake(ctx, corpus, n):
    return "dataset_drops_two_tokens" if _two_token_sentences(ctx, corpus, n) and _drops_two_tokens(ctx) else None


def _pairs(corpus):
    return [(torch.tensor(ids[:-1]), torch.tensor(ids[1:])) for ids in corpus]


def collate(ctx, batch):
    """The student's lm_collate_fn on `batch`: a pair of (B, T_max) tensors, or the check fails."""
    result = ctx.student.call(MODULE, "lm_collate_fn", batch)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckFailed("lm_collate_fn must return a pair (X, Y)", diagnosis="returns_wrong_type")
    B, T = len(batch), max(len(x) for x, _ in batch)
    lengths = [len(x) for x, _ in batch]
    for name, got in zip("XY", result):
        if type(got) is not torch.Tensor:
            raise CheckFailed(f"{name} of a batch must be a tensor, got {type(got).__name__}", diagnosis="returns_wrong_type")
        if tuple(got.shape) != (B, T):
            shape = tuple(got.shape)
            transposed = shape == (T, B) and _along_columns(got, batch, name)
            truncated = got.dim() == 2 and shape[0] == B and shape[1] < T
            raise CheckFailed(f"{name} of a batch with lengths {lengths} should have shape {(B, T)}, got {shape}"
                              + (": (T_max, B), the sequences along the columns (pad_sequence without batch_first=True)"
                                 if transposed else f": {shape[1]} positions, fewer than the longest sequence's {T}"
                                 if truncated else ""),
                              diagnosis="collate_not_batch_first" if transposed else "collate_not_padded" if truncated else None)
        if got.dtype != torch.long:
            raise CheckFailed(f"{name} must hold token ids, a long tensor (torch.int64), got dtype {got.dtype}",
                              diagnosis="returns_wrong_type")
    return result[0], result[1]


def _along_columns(got, batch, name):
    """Column i of `got` starts with sequence i's X (or Y)."""
    return all(torch.equal(got[: len(pair[0]), i].long(), pair["XY".index(name)]) for i, pair in enumerate(batch))


def _collate_layout(X, Y, batch):
    """(what the rows of a collated batch hold instead of their sequences, its diagnosis): the padding
    put in front of each sequence, or the sequences along the columns."""
    T = X.size(1)
    if all(torch.equal(X[i, T - len(x):], x) and torch.equal(Y[i, T - len(y):], y) for i, (x, y) in enumerate(batch)):
        return ": every sequence ends the row, its padding is in front (left padding); pad after it", "collate_pads_left"
    if X.size(0) == T and all(torch.equal(X[: len(x), i], x) and torch.equal(Y[: len(y), i], y)
                              for i, (x, y) in enumerate(batch)):
        return ": the sequences run along the columns (pad_sequence without batch_first=True)", "collate_not_batch_first"
    return "", None


@check("gpt.collate_pads", "lm_collate_fn gives the reference's (X, Y): X padded with PAD_ID and Y with IGNORE_INDEX to the "
                           "longest sequence, (B, T_max) long tensors, a batch of one too")
def collate_pads(ctx):
    @ctx.given(sentences(min_len=2, max_len=8, max_count=4))
    def prop(corpus):
        batch = _pairs(corpus)
        expected = ctx.oracle.call("gpt.lm_collate_fn", batch)
        X, Y = collate(ctx, batch)
        for i, (x, y) in enumerate(batch):
            if not (torch.equal(X[i, : len(x)].long(), x) and torch.equal(Y[i, : len(y)].long(), y)):
                seen, diagnosis = _collate_layout(X, Y, batch)
                raise CheckFailed(f"row {i} of the batch does not start with its own sequence: X row {i} is {X[i].tolist()} "
                                  f"for the sequence {x.tolist()}{seen}", diagnosis=diagnosis)
            if not bool((X[i, len(x):] == PAD_ID).all()):
                raise CheckFailed(f"X must be padded with PAD_ID = {PAD_ID}, got {X[i].tolist()}", diagnosis="collate_x_pad_wrong")
            if not bool((Y[i, len(y):] == IGNORE_INDEX).all()):
                raise CheckFailed(f"Y must be padded with IGNORE_INDEX = {IGNORE_INDEX} so padding is not in the loss, "
                                  f"got {Y[i].tolist()}", diagnosis="collate_padding_counts")
        for name, got, want in zip("XY", (X, Y), expected):
            if not torch.equal(got, want):
                where = (got != want).nonzero()[0].tolist()
                raise CheckFailed(f"{name} of the batch {[x.tolist() for x, _ in batch]} differs from the reference's at "
                                  f"row {where[0]}, position {where[1]}: {got[where[0]].tolist()} where the reference has "
                                  f"{want[where[0]].tolist()}")


def padded_batch(corpus):
    """The grader's own (X, Y) of the sentences: X padded with PAD_ID, Y with IGNORE_INDEX (the loss is
    judged on a right batch; lm_collate_fn is graded in gpt.collate_pads)."""
    pairs = _pairs(corpus)
    T = max(len(x) for x, _ in pairs)
    X = torch.full((len(pairs), T), PAD_ID, dtype=torch.long)
    Y = torch.full((len(pairs), T), IGNORE_INDEX, dtype=torch.long)
    for i, (x, y) in enumerate(pairs):
        X[i, : len(x)], Y[i, : len(y)] = x, y
    return X, Y


@check("gpt.padding_not_in_loss", "The loss of a padded batch is the mean cross-entropy of its logits over the real "
                                  "targets only (IGNORE_INDEX ignored)")
def padding_not_in_loss(ctx):
    # Judged on the logits the model returns with the loss: whether padding reaches the real positions'
    # logits is causality, charged in gpt.causal and gpt.forward_matches_reference.
    @ctx.given(gpt_configs(), st.integers(0, 2**16), st.integers(2, 4))
    def prop(config, seed, B):
        block, V = config["block_size"], config["vocab_size"]
        g = torch.Generator().manual_seed(seed)
        lengths = [int(n) for n in torch.randint(2, block + 2, (B,), generator=g)]
        lengths[0] = block + 1  # X of the longest has block_size tokens; others are padded
        lengths[-1] = 2
        corpus = [torch.randint(1, V, (n,), generator=g).tolist() for n in lengths]
        handle = build_gpt(ctx, config)
        X, Y = padded_batch(corpus)
        try:
            logits, loss = forward(ctx, handle, X, Y)
        except StudentError as error:
            if _loss_runs_without_ignore_index(ctx, handle, X, Y):
                raise CheckFailed(f"GPT.forward(X, Y) raised {error.exc_type}: {error.message}; with the padded targets "
                                  f"IGNORE_INDEX = {IGNORE_INDEX} replaced by a real token it runs: the loss does not "
                                  "ignore IGNORE_INDEX"[:600], diagnosis="loss_ignore_index_wrong") from None
            raise
        logits = expect_tensor(logits, "logits", shape=(*X.shape, V)).double()
        real = Y != IGNORE_INDEX
        expected = F.cross_entropy(logits[real], Y[real]).item()
        got = float(loss) if type(loss) is torch.Tensor and loss.numel() == 1 and loss.is_floating_point() else None
        if got is not None and math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
            return
        seen = {"loss_not_mean": (got is not None and math.isclose(got, F.cross_entropy(logits[real], Y[real], reduction="sum")
                                                                   .item(), rel_tol=1e-4), ": it is their sum"),
                "loss_class_dim": (got is not None and _loss_over_positions(ctx, handle, X, Y, got),
                                   ": it is F.cross_entropy of the unflattened logits, the positions taken for classes")}
        diagnosis, said = next(((d, said) for d, (holds, said) in seen.items() if holds), (None, ""))
        raise CheckFailed(
            f"sentences of lengths {lengths}, padded by the grader: GPT.forward(X, Y) returned the loss {loss!r}"[:300]
            + f"; the mean cross-entropy of the logits it returned over the {int(real.sum())} real targets is "
            f"{expected:.6g}{said}", diagnosis=diagnosis,
            details={"numbers": {"expected": expected, "got": got}, "how": _loss_ratio(got, expected)})

    forward_gate(ctx)


def _loss_ratio(got, expected):
    """How a returned loss differs from the cross-entropy of the logits returned with it, in words."""
    if got is None:
        return "the loss returned is not a one-element float tensor"
    return (f"the loss returned is {got:.6g}, {got / expected:.4g} times the cross-entropy of the logits returned with it"
            if expected else f"the loss returned is {got:.6g} where the logits returned with it give 0")


def _loss_over_positions(ctx, handle, X, Y, got):
    """The loss is F.cross_entropy on the unflattened (B, T, vocab_size) logits, the positions taken for
    the classes: it runs when vocab_size == T."""
    logits, _ = forward(ctx, handle, X)
    if type(logits) is not torch.Tensor or logits.shape != (*X.shape, logits.size(-1)) or logits.size(-1) != X.size(1):
        return False
    return math.isclose(got, F.cross_entropy(logits.double(), Y, ignore_index=IGNORE_INDEX).item(), rel_tol=1e-4)


def _loss_runs_without_ignore_index(ctx, handle, X, Y):
    """GPT.forward(X, Y) runs once the IGNORE_INDEX targets are a real token (1)."""
    try:
        ctx.student.call(handle, "__call__", X, Y.masked_fill(Y == IGNORE_INDEX, 1))
    except StudentError:
        return False
    return True


# ---------------------------------------------------------------- model and heads


@check("gpt.heads", "lm_head is Linear(n_embd, vocab_size) without bias; classifier_head has a bias")
def heads(ctx):
    config = {"vocab_size": 11, "block_size": 6, "n_layer": 1, "n_head": 2, "n_embd": 8, "n_classification_class": 3, "weights_seed": 0}
    handle = build_gpt(ctx, config, grader_weights=False)
    shapes = state_shapes(ctx, handle, "GPT")
    try:
        reference = ctx.oracle.call("gpt_state_shapes", {k: v for k, v in config.items() if k != "weights_seed"})
    except OracleUnavailable:
        reference = None
    difference = count_difference(shapes, reference) if reference is not None else None
    by_sub_module = f"; by sub-module: {difference}" if difference else ""
    expected = {"lm_head.weight": (11, 8), "classifier_head.weight": (3, 8), "classifier_head.bias": (3,)}
    for name, shape in expected.items():
        if shapes.get(name) != shape:
            # the names are the contract's (the GPT docstring names lm_head and classifier_head): say what is there
            outside = {n: s for n, s in shapes.items() if not n.startswith("transformer.")}
            found = ", ".join(f"{n} {tuple(s)}" for n, s in outside.items()) or "none"
            raise CheckFailed(f"expected a parameter {name} of shape {shape}, got {shapes.get(name)}; the GPT docstring "
                              f"names the heads lm_head and classifier_head. Outside transformer the model's state holds: "
                              f"{found}{by_sub_module}"[:900])
    if "lm_head.bias" in shapes:
        raise CheckFailed("lm_head must have no bias (minGPT: Linear(n_embd, vocab_size, bias=False))" + by_sub_module,
                          diagnosis="parameter_count_off")
    # the constructor alone earns nothing: the model must also compute (a stubbed forward)
    forward_gate(ctx)


# The MLP's GELU may be the exact one (nn.GELU()) or its tanh approximation (karpathy's minGPT
# NewGELU): the Block docstring allows both. Under the grader's weights (larger than minGPT's init,
# so that logits are well apart) the two differ by far more than float32 rounding: over 300 inputs
# of this check's strategy the reference's logits with each flavour differed by up to 0.14 (median
# 2.8e-4), 9.6 times allclose(atol=1e-4, rtol=1e-3), and beyond it on 22% of inputs. No tolerance
# fits both without letting real mistakes through, so the logits are compared with the reference
# run with each flavour, and must match one of them tightly. Both are always asked for, so the
# self-check's golden answers hold both.
GELU_FLAVOURS = ("none", "tanh")


def reference_logits(ctx, state, cfg, idx, **variant):
    """{GELU flavour: the reference's logits} under the grader's weights."""
    return {gelu: ctx.oracle.call("gpt_forward", state, cfg, idx, **variant, **({"gelu": gelu} if gelu != "none" else {}))
            for gelu in GELU_FLAVOURS}


def closest(got, candidates):
    """The candidate tensor nearest `got` (by max abs error)."""
    return min(candidates, key=lambda e: (got.double() - e.double()).abs().max().item() if got.shape == e.shape else math.inf)


def reference_outputs(ctx, state, cfg, call):
    """{GELU flavour: the reference's (logits, loss)} for one ForwardCall under the grader's weights."""
    return {gelu: ctx.oracle.call("gpt_outputs", state, cfg, call.idx, call.targets, call.finetune_classify,
                                  **({"gelu": gelu} if gelu != "none" else {}), **({"train": True} if call.training else {}))
            for gelu in GELU_FLAVOURS}


@check("gpt.forward_matches_reference", "GPT.forward gives the reference's logits and loss under the grader's weights: "
                                        "every position's logits, or the class logits of the last, and the loss or None, "
                                        "in eval mode and in training mode with every rate 0, call after call on one model")
def forward_matches_reference(ctx):
    @ctx.given(forward_cases())
    def prop(case):
        config = case.config
        cfg = model_config(config)
        handle = build_gpt(ctx, config)
        weights = grader_weights_of(ctx, handle, config["weights_seed"])
        reading = 0
        for number, call in enumerate(case.calls):
            ctx.student.call(handle, "train" if call.training else "eval")
            try:
                _forward_call_matches(ctx, handle, weights, cfg, call)
            except (CheckFailed, StudentError) as failure:
                other = _another_reading(ctx, handle, weights, cfg, case.calls[:number + 1], reading)
                if other is not None:
                    reading = other
                    continue
                if number and _fresh_model_matches(ctx, config, call, weights.candidates[reading]):
                    lengths = sorted({earlier.idx.size(1) for earlier in case.calls[:number]})
                    raise CheckFailed(f"{_forward_text(call.idx, call.targets, call.finetune_classify)} after calls on "
                                      f"sequences of lengths {lengths} on the same model: {failure}"[:600] + "; a fresh "
                                      "model with the same weights gives the reference's answer to this call: forward "
                                      "keeps something of an earlier call", diagnosis="forward_keeps_state") from None
                raise

    forward_gate(ctx)


def _another_reading(ctx, handle, weights, cfg, calls, reading):
    """The index of another reading of the student's layout (which of three separate projections is
    the query, the key, the value: a sequence of one token cannot tell the query from the key) under
    which every one of `calls` matches the reference, replayed in order on the model; None, the
    model back under `reading`, where none does."""
    for index, candidate in enumerate(weights.candidates):
        if index == reading:
            continue
        ctx.student.load_state_dict(handle, candidate, strict=False)
        try:
            for call in calls:
                ctx.student.call(handle, "train" if call.training else "eval")
                _forward_call_matches(ctx, handle, weights, cfg, call)
        except (CheckFailed, StudentError):
            continue
        return index
    if len(weights.candidates) > 1:
        ctx.student.load_state_dict(handle, weights.candidates[reading], strict=False)
        ctx.student.call(handle, "train" if calls[-1].training else "eval")
    return None


def _fresh_model_matches(ctx, config, call, weights):
    """The call gives the reference's logits and loss on a model of `config` never called before,
    holding the same `weights` (the student's names)."""
    try:
        handle = build_gpt(ctx, config)
        ctx.student.load_state_dict(handle, weights, strict=False)
        ctx.student.call(handle, "train" if call.training else "eval")
        _forward_call_matches(ctx, handle, grader_weights_of(ctx, handle, config["weights_seed"]), model_config(config),
                              call)
    except (CheckFailed, StudentError):
        return False
    return True


def _forward_call_matches(ctx, handle, weights, cfg, call):
    """One call of GPT.forward against the reference's (logits, loss), under the weights the model holds."""
    B, T = call.idx.shape
    shape = (B, cfg["n_classification_class"]) if call.finetune_classify else (B, T, cfg["vocab_size"])
    what = ("class logits" if call.finetune_classify else "logits") + f" of {_forward_text(call.idx, call.targets, call.finetune_classify)}"
    expected = reference_outputs(ctx, weights.reference, cfg, call)
    logits, loss = returned_pair(call_forward(ctx, handle, call.idx, call.targets, finetune_classify=call.finetune_classify),
                                 call.idx, call.targets, call.finetune_classify)
    logits = expect_tensor(logits, what, shape=shape)
    matched = [gelu for gelu, (e, _) in expected.items() if is_close(logits, e, atol=1e-4, rtol=1e-3)]
    if not matched:
        nearer = closest(logits, [e for e, _ in expected.values()])
        gelu = next(flavour for flavour, (e, _) in expected.items() if e is nearer)
        located = (lambda: module_divergence(ctx, handle, ("gpt_model", [cfg, gelu], {}), weights.reference, [call.idx],
                                             {"finetune_classify": True} if call.finetune_classify else None)) \
            if set(weights.loaded) == set(weights.reference) else None
        diagnosis = None if call.finetune_classify else _forward_mistake(ctx, logits, weights.reference, cfg, call.idx)
        try:
            expect_close(logits, nearer, f"{what} (against the reference with exact and with tanh GELU, the nearer)",
                         atol=1e-4, rtol=1e-3, diagnosis=diagnosis, locate=located,
                         axes=("batch", "class") if call.finetune_classify else ("batch", "position", "vocabulary"))
        except CheckFailed as failure:
            if weights.problem is not None:
                failure.message = (f"your parameters could not be matched to the reference's: {weights.problem}; so the "
                                   f"reference ran under other weights than yours, and {failure.message}")
                failure.args = (failure.message,)
            raise
    _loss_matches(logits, loss, expected[matched[0]], call)


def _loss_matches(logits, loss, expected_outputs, call):
    """The loss GPT.forward returned with `logits` that match the reference's: None where the
    reference's is None (no targets), else the reference's loss of those logits, the mean
    cross-entropy over the real targets (computed here on the logits returned: they match the
    reference's only up to the logits' tolerance, which a loss would magnify)."""
    text = _forward_text(call.idx, call.targets, call.finetune_classify)
    if expected_outputs[1] is None:
        if loss is not None:
            raise CheckFailed(f"{text} returned the loss {loss!r}"[:300] + "; without targets the loss is None")
        return
    flat, targets = logits.double().reshape(-1, logits.size(-1)), call.targets.reshape(-1)
    if not call.finetune_classify:
        flat, targets = flat[targets != IGNORE_INDEX], targets[targets != IGNORE_INDEX]
    expected = F.cross_entropy(flat, targets).item()
    got = float(loss) if type(loss) is torch.Tensor and loss.numel() == 1 and loss.is_floating_point() else None
    if got is not None and math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
        return
    is_sum = got is not None and math.isclose(got, F.cross_entropy(flat, targets, reduction="sum").item(), rel_tol=1e-4)
    raise CheckFailed(f"{text} returned the loss {loss!r}"[:300] + f"; the mean cross-entropy of the logits it returned "
                      f"(the reference's) over the {'class targets' if call.finetune_classify else 'targets other than IGNORE_INDEX'} "
                      f"is {expected:.6g}" + (": yours is their sum" if is_sum else ""),
                      diagnosis="loss_not_mean" if is_sum else None,
                      details={"numbers": {"expected": expected, "got": got}, "how": _loss_ratio(got, expected)})


def _forward_mistake(ctx, got, state, cfg, idx):
    """The known GPT.forward mistake whose logits `got` equals, or None. The self-check's golden
    answers hold the right logits only: there the mistake goes unnamed, never unseen."""
    variants = [("gpt_no_position_embedding", {"positions": False}), ("gpt_no_final_norm", {"final_norm": False})]
    if int(idx.max()) < cfg["block_size"]:  # ids that fit the position embedding: the forward ran
        variants.append(("gpt_positions_from_ids", {"positions": "ids"}))
    for diagnosis, variant in variants:
        try:
            if any(is_close(got, e, atol=1e-4, rtol=1e-3) for e in reference_logits(ctx, state, cfg, idx, **variant).values()):
                return diagnosis
        except OracleUnavailable:
            return None
    return None


# Dropout is judged at rates of 0 and 1, where training mode is deterministic: a rate of 1 drops its
# whole path (the embeddings, the attention weights, or each block's two branches), so the logits are
# the reference's in training mode under the same weights.
DROPOUT_RATES = ("embd_pdrop", "attn_pdrop", "resid_pdrop")


# Three rates all different, yet a deterministic training mode: with resid_pdrop 1 every block's
# attention and MLP outputs are dropped whole, so the blocks pass their input on whatever attn_pdrop
# drops inside them, and embd_pdrop 0 keeps the embeddings. A rate applied to another path than its
# own (two rates swapped, one rate for all) shows.
ATTN_RATES_UNDER_FULL_RESIDUAL_DROPOUT = (0.1, 0.3, 0.6)


@check("gpt.dropout", "In training mode GPT drops at GPTConfig's rates: embd_pdrop on the embeddings' sum, attn_pdrop on "
                      "the attention weights, resid_pdrop on each block's attention and MLP outputs, each at its own rate")
def dropout(ctx):
    @ctx.given(prompts(), st.sampled_from(ATTN_RATES_UNDER_FULL_RESIDUAL_DROPOUT))
    def prop(ex, attn_pdrop):
        for rate in DROPOUT_RATES:
            _drops_at(ctx, ex, {**dict.fromkeys(DROPOUT_RATES, 0.0), rate: 1.0}, f"{rate}=1 and the other rates 0", rate)
        _drops_at(ctx, ex, {"embd_pdrop": 0.0, "attn_pdrop": attn_pdrop, "resid_pdrop": 1.0},
                  f"embd_pdrop=0, attn_pdrop={attn_pdrop}, resid_pdrop=1 (each block passes its input on)", "resid_pdrop")

    forward_gate(ctx)


def _drops_at(ctx, ex, rates, said, acting):
    """With the dropout `rates` (each 0 or 1, or any rate on a path another rate of 1 drops whole),
    training-mode logits are the reference's in training mode; judged where the eval-mode logits are
    right (a wrong forward is charged in gpt.forward_matches_reference). `acting`: the rate whose
    effect an unchanged (eval-mode) output would show ignored."""
    config, idx, _ = ex
    # LayerNorm over 2 features outputs only signs, so paths dropped or not could give the same logits
    config = {**config, **rates, "n_embd": max(config["n_embd"], 4 * config["n_head"])}
    cfg = model_config(config)
    handle = build_gpt(ctx, config)
    weights = grader_weights_of(ctx, handle, config["weights_seed"])
    in_eval = reference_logits(ctx, weights.reference, cfg, idx)
    for candidate in weights.candidates:  # the reading of the layout under which its eval forward is right
        ctx.student.load_state_dict(handle, candidate, strict=False)
        own = model_logits(ctx, handle, idx)
        if any(is_close(own, e, atol=1e-4, rtol=1e-3) for e in in_eval.values()):
            break
    else:
        return
    ctx.student.call(handle, "train")
    got = model_logits(ctx, handle, idx, what="training-mode logits")
    expected = reference_logits(ctx, weights.reference, cfg, idx, train=True)
    if any(is_close(got, e, atol=1e-4, rtol=1e-3) for e in expected.values()):
        return
    nearer = closest(got, expected.values())
    # never applied: the logits are the eval-mode ones where the rate changes every position's
    dropped_everywhere = bool(((nearer.double() - closest(nearer, in_eval.values()).double()).abs().amax(-1) > 1e-2).all())
    ignored = dropped_everywhere and is_close(got, own, atol=1e-4, rtol=1e-3)
    expect_close(got, nearer,
                 f"training-mode logits with {said} (what a rate of 1 drops must vanish"
                 + (f"; yours equal the eval-mode logits: {acting} is never applied)" if ignored else ")"),
                 atol=1e-4, rtol=1e-3, diagnosis="dropout_rate_ignored" if ignored else None,
                 axes=("batch", "position", "vocabulary"))


@check("gpt.causal", "GPT logits at position t do not depend on later tokens")
def causal(ctx):
    @ctx.given(prompts())
    def prop(ex):
        config, idx, _ = ex
        if idx.size(1) < 2:
            idx = torch.cat([idx, idx], dim=1)
        handle = build_gpt(ctx, config)
        logits = model_logits(ctx, handle, idx)
        other = idx.clone()
        other[:, -1] = (idx[:, -1] + 1) % config["vocab_size"]
        changed = model_logits(ctx, handle, other)
        if not torch.allclose(logits[:, :-1], changed[:, :-1], atol=1e-5):
            if not torch.equal(logits, model_logits(ctx, handle, idx)):  # eval-mode logits that are random
                forward_gate(ctx)  # says so (degenerate_output) where it sees it too: not causality's to name
                raise CheckFailed("two eval-mode calls on the same ids gave different logits, so whether a later token "
                                  "reaches an earlier position cannot show: is a dropout active in eval mode?")
            raise CheckFailed("changing the last token changed the logits of earlier positions", diagnosis="not_causal")

    forward_gate(ctx)


@check("gpt.classifier_last_position", "finetune_classify=True classifies from the last position's hidden state; the loss "
                                       "is the class logits' cross-entropy")
def classifier_last_position(ctx):
    @ctx.given(prompts())
    def prop(ex):
        config, idx, _ = ex
        handle = build_gpt(ctx, config)
        C = config["n_classification_class"]
        # The classifier gets the first C rows of lm_head and no bias: its logits must then equal the
        # LM logits of the first C tokens at the position it reads.
        lm_w = ctx.student.state_dict(handle).get("lm_head.weight")
        if type(lm_w) is not torch.Tensor or tuple(lm_w.shape) != (config["vocab_size"], config["n_embd"]):
            raise CheckFailed("GPT needs lm_head = Linear(n_embd, vocab_size, bias=False) (a parameter lm_head.weight "
                              f"of shape {(config['vocab_size'], config['n_embd'])})")
        ctx.student.load_state_dict(handle, {"classifier_head.weight": lm_w[:C].clone(),
                                             "classifier_head.bias": torch.zeros(C)}, strict=False)
        lm_logits = model_logits(ctx, handle, idx)
        B, T = idx.shape
        targets = torch.randint(0, C, (B,), generator=torch.Generator().manual_seed(int(idx.sum())))
        result = call_forward(ctx, handle, idx, targets, finetune_classify=True)
        got = expect_tensor(logits_in(result, (B, C)), "classification logits", shape=(B, C))
        expected = lm_logits[:, -1, :C]
        if not torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
            elsewhere = [lm_logits[:, t, :C] for t in range(T - 1)] + [lm_logits[:, :, :C].mean(1)]
            diagnosis = "classifier_not_last" if any(torch.allclose(got, other, atol=1e-4) for other in elsewhere) else None
            if diagnosis is None and _skips_final_norm(ctx, handle, config, idx, got):
                diagnosis = "classifier_skips_final_norm"
            how = describe_difference(got, expected, axes=("batch", "class"), atol=1e-4, rtol=1e-4)
            raise CheckFailed(f"on idx of shape {(B, T)} the class logits are not the classifier applied to the last "
                              "position's hidden state" + (f": {how}" if how else ""), diagnosis=diagnosis,
                              details={"expected": str(expected.tolist())[:300], "got": str(got.tolist())[:300],
                                       "how": how})
        _, loss = returned_pair(result, idx, targets, finetune_classify=True)
        _expect_class_loss(got, targets, loss)

    forward_gate(ctx)


def _expect_class_loss(logits, targets, loss):
    """The loss returned with the class logits is their mean cross-entropy against the targets, judged
    on the logits the model returned (a wrong logit is charged by the comparison before it)."""
    expected = F.cross_entropy(logits.double(), targets).item()
    got = float(loss) if type(loss) is torch.Tensor and loss.numel() == 1 and loss.is_floating_point() else None
    if got is not None and math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
        return
    summed = got is not None and math.isclose(got, F.cross_entropy(logits.double(), targets, reduction="sum").item(),
                                              rel_tol=1e-4)
    raise CheckFailed(f"GPT.forward(idx, targets {targets.tolist()}, finetune_classify=True) returned the loss {loss!r}"[:300]
                      + f"; the mean cross-entropy of the class logits it returned against those targets is {expected:.6g}"
                      + (": it is their sum" if summed else ""), diagnosis="loss_not_mean" if summed else None,
                      details={"numbers": {"expected": expected, "got": got}, "how": _loss_ratio(got, expected)})


def _skips_final_norm(ctx, handle, config, idx, got):
    """The class logits are the classifier (the first C rows of lm_head, no bias) on the last position's
    hidden state before ln_f: the reference's logits without ln_f there. None in a self-check (the
    golden answers hold no such variant)."""
    C = config["n_classification_class"]
    state = grader_weights_of(ctx, handle, config["weights_seed"]).reference
    cfg = {k: v for k, v in config.items() if k != "weights_seed"}
    try:
        variants = reference_logits(ctx, state, cfg, idx, final_norm=False).values()
    except OracleUnavailable:
        return False
    return any(is_close(got, logits[:, -1, :C], atol=1e-4, rtol=1e-3) for logits in variants)


# ---------------------------------------------------------------- generation
#
# generate runs on the student's own GPT object (its constructor's, so its block_size and whatever
# else generate reads), its forward the grader's stand-in (graders/packs/gpt/tasks.py): the
# logits of every step are the grader's, so a mistake of forward is charged in forward's checks
# only, and the expected tokens are the reference generate's with the same forward. The stand-in
# returns (logits, None) as the docstring says; where the student's generate raises with that and
# the student's own forward returns the logits alone, generate is judged with a stand-in that does
# the same (it is consistent with the student's own forward; the return value is charged in
# gpt.forward_matches_reference).


class StandIn(NamedTuple):
    """The grader's stand-in forward of a model: what the logits of any context are."""

    vocab_size: int
    block_size: int
    seed: int
    scale: float = 1.0

    def logits(self, idx):
        return stand_in_logits(stand_in_table(*self), idx)


_STAND_INS = "_gpt_stand_ins"  # on the context: {id(handle): [handle, StandIn, form]} of stand_in_model's models
_FORM = "_gpt_stand_in_form"  # on the context: the stand-in's form the student's generate was seen to need


def stand_in_model(ctx, config, *, seed=None, scale=1.0):
    """(the student's GPT for `config`, in eval mode, its forward the grader's stand-in; the stand-in),
    the stand-in seeded by `seed` (the config's weights seed by default), its logits scaled by `scale`."""
    cfg = model_config(config)
    handle = ctx.student.construct(MODULE, "GPT", ctx.student.construct(MODULE, "GPTConfig", **cfg))
    ctx.student.call(handle, "eval")
    _remember(ctx, handle, config)
    stand_in = StandIn(cfg["vocab_size"], cfg["block_size"], config.get("weights_seed", 0) if seed is None else seed,
                       float(scale))
    form = getattr(ctx, _FORM, "pair")
    ctx.student.task("gpt.stand_in_forward", handle, *stand_in, form=form)
    models = getattr(ctx, _STAND_INS, None)
    if models is None:
        models = {}
        setattr(ctx, _STAND_INS, models)
    models[id(handle)] = [handle, stand_in, form]
    return handle, stand_in


def generate(ctx, handle, idx, n, **kwargs):
    """The student's generate(idx, n, **kwargs): (B, T + n) token ids that start with the prompt, or
    the check fails; an exception explained where its cause is known."""
    try:
        out = ctx.student.call(handle, "generate", idx, n, **kwargs)
    except StudentError as error:
        out = _generate_with_own_form(ctx, handle, idx, n, kwargs, error)
    B, T = idx.shape
    expect_tensor(out, f"generate(idx of shape {(B, T)}, max_new_tokens={n})", shape=(B, T + n))
    if out.is_floating_point() or out.is_complex() or out.dtype == torch.bool:
        raise CheckFailed(f"generate must return token ids (a long tensor), got dtype {out.dtype}", diagnosis="returns_wrong_type")
    out = out.long()
    if not torch.equal(out[:, :T], idx):
        raise CheckFailed("generate must return the prompt followed by the new tokens; the prompt part changed",
                          details={"expected": str(idx.tolist()), "got": str(out[:, :T].tolist())})
    return out


def _generate_with_own_form(ctx, handle, idx, n, kwargs, error):
    """generate's output with a stand-in that returns the logits alone, where generate raised with the
    docstring's (logits, None) and the student's own forward returns the logits alone; else the
    error, explained."""
    entry = (getattr(ctx, _STAND_INS, None) or {}).get(id(handle))
    explained = explain_error(ctx, handle, error, idx, "generate", max_new_tokens=n, **kwargs)
    if (entry is None or entry[0] is not handle or entry[2] != "pair" or error.exc_type == "NotImplementedError"
            or ctx.student.task("gpt.own_forward_form", handle) != "tensor"):
        raise explained from None
    ctx.student.task("gpt.stand_in_forward", handle, *entry[1], form="tensor")
    try:
        out = ctx.student.call(handle, "generate", idx, n, **kwargs)
    except StudentError:
        ctx.student.task("gpt.stand_in_forward", handle, *entry[1], form="pair")
        raise explained from None
    entry[2] = "tensor"
    setattr(ctx, _FORM, "tensor")
    return out


def _generate_text(call):
    options = "".join(f", {k}={v!r}" for k, v in call.options.items())
    return f"generate(idx of shape {tuple(call.idx.shape)}, max_new_tokens={call.max_new_tokens}{options})"


def greedy_tokens(stand_in, prompt, n, context_of=None, position=-1):
    """The tokens greedy generation of `n` tokens gives with the stand-in's forward, each step on
    `context_of(block_size, prompt, tokens so far)` (by default their last block_size) and its argmax
    at `position`: the reference's generate, or, with another context or position, a mistake's."""
    out = prompt
    for _ in range(n):
        context = (context_of or _last_block)(stand_in.block_size, prompt, out)
        out = torch.cat([out, stand_in.logits(context)[:, position].argmax(-1, keepdim=True)], dim=1)
    return out


def _last_block(block, prompt, out):
    return out[:, -block:]


@check("gpt.greedy_follows_argmax", "Greedy generate gives the reference generate's tokens with the same forward: the argmax "
                                    "of the last position, fed back, the context cropped to its last block_size tokens "
                                    "(prompts longer than block_size, max_new_tokens beyond it or 0), whatever the "
                                    "temperature and top_k")
def greedy_follows_argmax(ctx):
    @ctx.given(generate_cases())
    def prop(case):
        handle, stand_in = stand_in_model(ctx, case.config)
        for call in case.calls:
            out = generate(ctx, handle, call.idx, call.max_new_tokens, **call.options)
            expected = ctx.oracle.call("gpt_generate", stand_in._asdict(), call.idx, call.max_new_tokens, **call.options)
            if not torch.equal(out, expected):
                raise _greedy_failure(ctx, handle, stand_in, call, out, expected)

    generate_gate(ctx)


def _greedy_failure(ctx, handle, stand_in, call, out, expected):
    T = call.idx.size(1)
    row, column = (out != expected).nonzero()[0].tolist()
    diagnosis, seen = _greedy_mistake(ctx)
    if diagnosis is None:
        diagnosis, seen = _crop_mistake(stand_in, call, out)
    if diagnosis is None:
        diagnosis, seen = _repeat_differs(ctx, handle, call)
    return CheckFailed(f"{_generate_text(call)}: new token {column - T} of row {row} is {int(out[row, column])}, where the "
                       f"reference's generate with the same forward gives {int(expected[row, column])}; the new tokens are "
                       f"{out[:, T:].tolist()}, the reference's {expected[:, T:].tolist()}"[:700] + seen,
                       diagnosis=diagnosis)


# Greedy generation mistakes, each by what generate would return with the stand-in: a mistake is
# named only where generate returns exactly its tokens and the right tokens differ from them.
GREEDY_MISTAKES = {
    "generate_no_feedback": ({"context_of": lambda block, prompt, out: prompt[:, -block:]},
                             ": on prompts of the grader's every new token is the one the prompt alone gives; the tokens "
                             "generated so far are never fed back to the model"),
    "generate_wrong_position": ({"position": 0},
                                ": on prompts of the grader's every new token is the argmax at the first position"),
}
GREEDY_PROBE = (8, 3, 3)  # prompts, their length, new tokens
PROBE_CONFIG = {"vocab_size": 12, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 8, "n_classification_class": 2}
PROBE_STAND_INS = range(101, 109)  # stand-in seeds tried until the mistakes' tokens differ from each other


def _greedy_mistake(ctx):
    """(diagnosis, what was seen) of a greedy generate that does not follow the argmax, from a probe of
    the grader's where the known mistakes give tokens different from each other and from the right
    ones (the first such stand-in of a few seeded ones): generation without feedback, the argmax at
    the first position, or a sampler (two calls differ); (None, "") when none is seen."""
    rows, T, n = GREEDY_PROBE
    V = PROBE_CONFIG["vocab_size"]
    prompt = torch.randint(0, V, (rows, T), generator=torch.Generator().manual_seed(43))
    for seed in PROBE_STAND_INS:
        stand_in = StandIn(V, PROBE_CONFIG["block_size"], seed)
        right = greedy_tokens(stand_in, prompt, n)
        mistakes = {diagnosis: (greedy_tokens(stand_in, prompt, n, **kind), said)
                    for diagnosis, (kind, said) in GREEDY_MISTAKES.items()}
        tokens = [right] + [out for out, _ in mistakes.values()]
        if all(not torch.equal(a, b) for a, b in itertools.combinations(tokens, 2)):
            break
    else:
        return None, ""
    handle, _ = stand_in_model(ctx, PROBE_CONFIG, seed=seed)
    try:
        got = generate(ctx, handle, prompt, n)
        seen = [(diagnosis, said) for diagnosis, (out, said) in mistakes.items() if torch.equal(got, out)]
        if seen:
            return seen[0]
        if not torch.equal(got, generate(ctx, handle, prompt, n)):
            return "generate_not_greedy", ": two greedy calls on the same prompts gave different tokens"
    except (StudentError, CheckFailed):
        pass
    return None, ""


def _repeat_differs(ctx, handle, call):
    """("generate_not_greedy", what was seen) where two greedy calls with the failing call's arguments,
    its prompts repeated 32 times, give different tokens; (None, "") otherwise."""
    rows, n = call.idx.repeat(32, 1), max(call.max_new_tokens, 1)
    try:
        if not torch.equal(generate(ctx, handle, rows, n, **call.options), generate(ctx, handle, rows, n, **call.options)):
            return "generate_not_greedy", ": two greedy calls with these arguments gave different tokens"
    except (StudentError, CheckFailed):
        pass
    return None, ""


@check("gpt.greedy_deterministic", "Greedy generate in eval mode gives the same tokens twice")
def greedy_deterministic(ctx):
    @ctx.given(prompts())
    def prop(ex):
        config, idx, n = ex
        handle, _ = stand_in_model(ctx, config, scale=0.3)  # flatter logits: sampling would show
        first = generate(ctx, handle, idx.repeat(8, 1), n)
        second = generate(ctx, handle, idx.repeat(8, 1), n)
        if not torch.equal(first, second):
            raise CheckFailed("two greedy generate calls on the same prompt gave different tokens",
                              diagnosis="generate_not_greedy")

    generate_gate(ctx)


@check("gpt.generate_crops_context", "A prompt longer than block_size works and equals generation from its last block_size "
                                     "tokens; a prompt of block_size tokens is used whole")
def generate_crops_context(ctx):
    @ctx.given(prompts(longer_than_block=True))
    def prop(ex):
        config, idx, n = ex
        block = config["block_size"]
        handle, stand_in = stand_in_model(ctx, config)
        out = generate(ctx, handle, idx, n)
        cropped = generate(ctx, handle, idx[:, -block:], n)
        if not torch.equal(out[:, idx.size(1):], cropped[:, block:]):
            diagnosis, seen = _crop_mistake(stand_in, GenerateCall(idx, n, {}), out)
            raise CheckFailed(f"on a prompt of length {idx.size(1)} > block_size={block}, generate gave the new tokens "
                              f"{out[:, idx.size(1):].tolist()}; from the prompt's last block_size tokens it gives "
                              f"{cropped[:, block:].tolist()}" + seen, diagnosis=diagnosis)
        _whole_block_used(ctx, handle, stand_in, idx[:, -block:])

    generate_gate(ctx)


CROP_MISTAKES = {
    "generate_crop_keeps_first": lambda block, prompt, out: out[:, :block],
    "generate_crop_too_short": lambda block, prompt, out: out if out.size(1) < block else out[:, -(block - 1):],
}


def _crop_mistake(stand_in, call, out):
    """(diagnosis, what was seen) of greedy tokens that are not the reference's: they equal greedy
    generation with the context cropped to its first block_size tokens, or to fewer than block_size,
    and the right crop gives others."""
    block = stand_in.block_size
    right = greedy_tokens(stand_in, call.idx, call.max_new_tokens)
    for diagnosis, crop in CROP_MISTAKES.items():
        if block < 2 and diagnosis == "generate_crop_too_short":
            continue
        mistake = greedy_tokens(stand_in, call.idx, call.max_new_tokens, crop)
        if torch.equal(out, mistake) and not torch.equal(mistake, right):
            said = ("the first block_size tokens" if diagnosis == "generate_crop_keeps_first"
                    else f"its last {block - 1} tokens")
            return diagnosis, f": the tokens are those of greedy generation with the context cropped to {said}"
    return None, ""


def _whole_block_used(ctx, handle, stand_in, prompt):
    """A prompt of exactly block_size tokens needs no crop: its next token is the argmax of the model's
    last-position logits on all of it. Judged where generate follows the argmax on the prompt less
    its first token (a greedy step that is wrong anyway is charged in gpt.greedy_follows_argmax)."""
    block = prompt.size(1)
    if block < 2:
        return
    shorter = prompt[:, 1:]
    if not torch.equal(generate(ctx, handle, shorter, 1)[:, -1], stand_in.logits(shorter)[:, -1].argmax(-1)):
        return
    got = generate(ctx, handle, prompt, 1)[:, -1]
    expected = stand_in.logits(prompt)[:, -1].argmax(-1)
    if torch.equal(got, expected):
        return
    short = torch.equal(got, stand_in.logits(prompt[:, -(block - 1):])[:, -1].argmax(-1))
    raise CheckFailed(f"on a prompt of exactly block_size={block} tokens {prompt.tolist()}, generate gave the next token "
                      f"{got.tolist()}; the argmax of the model's last-position logits on the whole prompt is "
                      f"{expected.tolist()}" + (f": it is the argmax from the prompt's last {block - 1} tokens" if short else ""),
                      diagnosis="generate_crop_too_short" if short else None)


def _sample_rows(stand_in, seed, rows):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, stand_in.vocab_size, (rows, draw_len(stand_in.block_size)), generator=g)


def draw_len(block_size):
    return max(1, block_size - 2)


# ---------------------------------------------------------------- sampling, as a distribution
#
# Every draw of a row is independent, so the count of token j among n draws of one prompt is
# Binomial(n, p_j), p_j the probability the right sampler gives j under the model's own logits.
# The share c_j / n must lie in the Chernoff interval {x : n KL(x || p_j) <= log(2 m / delta)},
# m the number of such comparisons the check makes: by the union bound a right sampler fails a
# check with probability below delta = 1e-9, whatever the logits, and the grading seed fixes
# the draws, so a regrade gives the same answer.

DELTA = 1e-9
DRAWS = 2000  # draws per prompt
PROMPTS = 2


def _bernoulli_kl(x, p):
    def term(a, b):
        return 0.0 if a == 0 else a * math.log(a / b)

    if p <= 0.0 or p >= 1.0:
        return 0.0 if x == p else math.inf
    return term(x, p) + term(1 - x, 1 - p)


def chernoff_interval(p, n, budget):
    """[low, high]: the shares x with n KL(x || p) <= budget."""

    def edge(inside, outside):
        for _ in range(60):
            middle = (inside + outside) / 2
            if n * _bernoulli_kl(middle, p) <= budget:
                inside = middle
            else:
                outside = middle
        return inside

    low = 0.0 if n * _bernoulli_kl(0.0, p) <= budget else edge(p, 0.0)
    high = 1.0 if n * _bernoulli_kl(1.0, p) <= budget else edge(p, 1.0)
    return low, high


def sampled_shares(ctx, handle, stand_in, seed, *, prompts=None, draws=DRAWS, **sampling):
    """(prompts (P, T), logits (P, V) of their last positions under the stand-in forward, shares (P, V)
    of `draws` draws of one new token each); the prompts are drawn from `seed` unless given."""
    V = stand_in.vocab_size
    if prompts is None:
        prompts = _sample_rows(stand_in, seed, PROMPTS)
    logits = stand_in.logits(prompts)[:, -1].double()
    ctx.student.seed(seed)
    out = generate(ctx, handle, prompts.repeat_interleave(draws, dim=0), 1, do_sample=True, **sampling)
    drawn = out[:, -1].reshape(len(prompts), draws)
    if bool(((drawn < 0) | (drawn >= V)).any()):
        raise CheckFailed(f"sampling drew token ids outside [0, {V}): {sorted(set(drawn[(drawn < 0) | (drawn >= V)].tolist()))[:8]}")
    shares = torch.stack([torch.bincount(row, minlength=V).double() / draws for row in drawn])
    return prompts, logits, shares


def shares_fit(shares, expected, comparisons, draws=DRAWS):
    """Rows of (token, share, expected, low, high) where a share of `draws` draws lies outside its
    Chernoff interval."""
    budget = math.log(2 * comparisons / DELTA)
    bad = []
    for p_row, s_row, row in zip(expected.tolist(), shares.tolist(), range(len(shares))):
        for token, (p, x) in enumerate(zip(p_row, s_row)):
            low, high = chernoff_interval(p, draws, budget)
            if not low <= x <= high:
                bad.append({"prompt": row, "token": token, "share": x, "expected": p, "low": low, "high": high})
    return bad


def _proportions(bad):
    return [{"name": f"prompt {b['prompt']}: share of token {b['token']}", "value": b["share"], "target": b["expected"],
             "low": b["low"], "high": b["high"]} for b in bad[:12]]


def top_k_probabilities(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)


def top_k_leaks(logits, k):
    """[(what the draws show, the distribution)] of top-k samplers that leak beyond the top k: the
    others' logits set to 0 instead of -inf, the top k + 1 kept, the softmax taken twice (the masked
    tokens get exp(0) again). `top_k_leaks` is named only when the draws follow one of them."""
    kth = logits.topk(k, dim=-1).values[:, -1:]
    leaks = [("the draws follow the logits below the k-th best set to 0, not -inf",
              torch.softmax(logits.masked_fill(logits < kth, 0.0), dim=-1)),
             ("the draws follow a softmax of the top-k probabilities: softmax taken twice, the masked tokens get "
              "exp(0) again", torch.softmax(top_k_probabilities(logits, k), dim=-1))]
    if k < logits.size(-1):
        leaks.append((f"the draws follow the top {k + 1}: one token too many is kept", top_k_probabilities(logits, k + 1)))
    return leaks


# A targeted example besides the drawn ones: weights so small that the model's logits are nearly
# flat, so each of the top FLAT_K tokens holds about 1 / FLAT_K of the renormalised mass. A sampler
# that keeps fewer tokens (only the best one, say) draws the best in every one of FLAT_DRAWS draws,
# about 20 half-widths of its Chernoff interval away; a right sampler stays inside it.
FLAT_CONFIG = {"vocab_size": 8, "block_size": 6, "n_layer": 1, "n_head": 2, "n_embd": 8,
               "n_classification_class": 2, "weights_seed": 53}
FLAT_SCALE, FLAT_K, FLAT_DRAWS = 0.05, 4, 8000


def flat_prompt(stand_in, k=FLAT_K):
    """Of a few seeded prompts, the one whose k-th and (k+1)-th best logits lie furthest apart, so that
    the top k is one set beyond doubt."""
    candidates = torch.randint(0, stand_in.vocab_size, (8, 4), generator=torch.Generator().manual_seed(59))
    top = stand_in.logits(candidates)[:, -1].topk(k + 1, dim=-1).values
    return candidates[int((top[:, k - 1] - top[:, k]).argmax())][None]


@check("gpt.top_k", "Sampling with top_k draws each of the k most likely tokens with its renormalised probability, and no other")
def top_k(ctx):
    examples = max(3, ctx.max_examples // 4)
    flat, flat_stand_in = stand_in_model(ctx, FLAT_CONFIG, scale=FLAT_SCALE)
    V = FLAT_CONFIG["vocab_size"]
    # top_k=1 first: every draw is the best token, a discrete property (a sampler that masks the k-th
    # best too is left with no token at all and raises)
    top_k_draws(ctx, flat, flat_stand_in, ctx.seed, 1, V, prompts=flat_prompt(flat_stand_in, 1))
    top_k_draws(ctx, flat, flat_stand_in, ctx.seed, FLAT_K, V, prompts=flat_prompt(flat_stand_in), draws=FLAT_DRAWS)

    @ctx.given(gpt_configs(min_vocab=6), st.integers(0, 2**16), max_examples=examples)
    def prop(config, seed):
        handle, stand_in = stand_in_model(ctx, config, scale=0.5)
        for k in TOP_KS:
            top_k_draws(ctx, handle, stand_in, seed, k, examples * len(TOP_KS) * PROMPTS * config["vocab_size"])

    sampling_gate(ctx)


TOP_KS = (1, 2, 4)


def never_samples(ctx, handle, stand_in, seed, prompts, draws=400):
    """do_sample=True without top_k gave the argmax in all `draws` draws of every prompt whose best
    token has a probability below 0.95 (a right sampler does so with probability below 0.95^400 ~ 1e-9)."""
    _, logits, shares = sampled_shares(ctx, handle, stand_in, seed, prompts=prompts, draws=draws)
    spread = torch.softmax(logits, -1).amax(-1) < 0.95
    on_best = shares.gather(1, logits.argmax(-1, keepdim=True))[:, 0] == 1
    return bool(spread.any()) and bool(on_best[spread].all())


def top_k_draws(ctx, handle, stand_in, seed, k, comparisons, *, prompts=None, draws=DRAWS):
    """The draws of one new token with top_k=k: none outside the top k, each of them at its
    renormalised probability (`comparisons`: how many shares the check bounds in all)."""
    prompts, logits, shares = sampled_shares(ctx, handle, stand_in, seed, prompts=prompts, draws=draws, top_k=k)
    total = len(prompts) * draws
    allowed = logits >= logits.topk(k, dim=-1).values[:, -1:]
    leaked = (shares > 0) & ~allowed
    if leaked.any():
        row = int(leaked.any(-1).nonzero()[0])
        seen = next((said for said, leak in top_k_leaks(logits, k) if not shares_fit(shares, leak, comparisons, draws)), None)
        raise CheckFailed(f"with top_k={k}, {shares[leaked].sum().item() * draws:.0f} of {total} draws fell "
                          f"outside the top {k} (prompt {prompts[row].tolist()}: drew tokens "
                          f"{leaked[row].nonzero()[:, 0].tolist()}, the top {k} are {logits[row].topk(k).indices.tolist()})"
                          + (f": {seen}" if seen else ""),
                          diagnosis="top_k_leaks" if seen else None, details={"proportions": _proportions(
                              shares_fit(shares, top_k_probabilities(logits, k), comparisons, draws))})
    expected = top_k_probabilities(logits, k)
    bad = shares_fit(shares, expected, comparisons, draws)
    if bad:
        best = logits.argmax(-1)
        only_best = k > 1 and bool((shares.gather(1, best[:, None]) == 1).all())
        diagnosis, seen = None, ""
        if k > 2 and not shares_fit(shares, top_k_probabilities(logits, k - 1), comparisons, draws):
            diagnosis, seen = "top_k_drops_kth", f": the draws follow the top {k - 1}, without the k-th best token"
        elif only_best and never_samples(ctx, handle, stand_in, seed, prompts):
            diagnosis, seen = "generate_never_samples", ": every draw was the argmax, with or without top_k"
        elif only_best:
            diagnosis, seen = "top_k_only_best", ": only the most likely token was ever drawn"
        worst = max(bad, key=lambda b: abs(b["share"] - b["expected"]))
        raise CheckFailed(
            f"with top_k={k}, token {worst['token']} of prompt {prompts[worst['prompt']].tolist()} was drawn in "
            f"{worst['share']:.1%} of {draws} draws; the model's probabilities renormalised over the top {k} give "
            f"{worst['expected']:.1%} (a right sampler lies within [{worst['low']:.1%}, {worst['high']:.1%}] "
            f"except with probability below {DELTA:g}){seen}",
            diagnosis=diagnosis, details={"proportions": _proportions(bad)})


# A targeted example besides the drawn ones: on the FLAT_CONFIG stand-in with moderately spread
# logits (scale 0.35), temperature 0.25 gives the best token about 60% of the mass, and 32,000 draws
# lie about 20 half-widths of the Chernoff interval from softmax(logits), softmax(logits * 0.25)
# and softmax(logits / 0.25**2) (a scale of 0.5 over 8,000 draws left the squared temperature 6.8).
SPREAD_SCALE, SHARP_TEMPERATURE, SHARP_DRAWS = 0.35, 0.25, 32000


@check("gpt.temperature_distribution", "Sampling at a temperature draws from softmax(logits / temperature)")
def temperature_distribution(ctx):
    examples = max(3, ctx.max_examples // 4)
    spread, spread_stand_in = stand_in_model(ctx, FLAT_CONFIG, scale=SPREAD_SCALE)
    temperature_draws(ctx, spread, spread_stand_in, ctx.seed, SHARP_TEMPERATURE, FLAT_CONFIG["vocab_size"],
                      prompts=flat_prompt(spread_stand_in), draws=SHARP_DRAWS)

    @ctx.given(gpt_configs(min_vocab=4, max_vocab=10), st.integers(0, 2**16), st.sampled_from([0.5, 2.0]),
               max_examples=examples)
    def prop(config, seed, temperature):
        handle, stand_in = stand_in_model(ctx, config, scale=1.0)
        temperature_draws(ctx, handle, stand_in, seed, temperature, examples * PROMPTS * config["vocab_size"])

    sampling_gate(ctx)


def temperature_draws(ctx, handle, stand_in, seed, temperature, comparisons, *, prompts=None, draws=DRAWS):
    """The draws of one new token at `temperature`: each token at its share of softmax(logits / temperature)
    (`comparisons`: how many shares the check bounds in all)."""
    prompts, logits, shares = sampled_shares(ctx, handle, stand_in, seed, prompts=prompts, draws=draws,
                                             temperature=temperature)
    expected = torch.softmax(logits / temperature, dim=-1)
    bad = shares_fit(shares, expected, comparisons, draws)
    if bad:
        diagnosis, seen = temperature_seen(ctx, handle, stand_in, seed, temperature, prompts, logits, shares, comparisons,
                                           draws)
        worst = max(bad, key=lambda b: abs(b["share"] - b["expected"]))
        raise CheckFailed(
            f"with temperature={temperature}, token {worst['token']} of prompt {prompts[worst['prompt']].tolist()} was "
            f"drawn in {worst['share']:.1%} of {draws} draws; softmax(logits / temperature) gives {worst['expected']:.1%} "
            f"(a right sampler lies within [{worst['low']:.1%}, {worst['high']:.1%}] except with probability below "
            f"{DELTA:g})" + seen, diagnosis=diagnosis, details={"proportions": _proportions(bad)})


def temperature_seen(ctx, handle, stand_in, seed, temperature, prompts, logits, shares, comparisons, draws):
    """(diagnosis, what was seen) of draws at `temperature` that are not softmax(logits / temperature):
    they follow softmax(logits) (the temperature has no effect), softmax(logits * temperature), or
    are always the argmax, at this temperature and without one; (None, "") otherwise."""
    if not shares_fit(shares, torch.softmax(logits, -1), comparisons, draws):
        return "temperature_ignored", ": the draws follow softmax(logits), as if the temperature were 1"
    if not shares_fit(shares, torch.softmax(logits * temperature, -1), comparisons, draws):
        return "temperature_multiplied", ": the draws follow softmax(logits * temperature)"
    on_best = bool((shares.gather(1, logits.argmax(-1, keepdim=True)) == 1).all())
    if on_best and never_samples(ctx, handle, stand_in, seed, prompts):
        return "generate_never_samples", ": every draw was the argmax, at any temperature"
    return None, ""


def temperature_evidence(ctx, handle, stand_in, seed, temperature):
    """What draws of one token at `temperature` show (temperature_seen), on the check's seeded prompts."""
    prompts, logits, shares = sampled_shares(ctx, handle, stand_in, seed, temperature=temperature)
    comparisons = PROMPTS * stand_in.vocab_size
    if not shares_fit(shares, torch.softmax(logits / temperature, -1), comparisons):
        return temperature_seen(ctx, handle, stand_in, seed, temperature, prompts, logits, shares, comparisons, DRAWS)
    return None, ""


TINY_TEMPERATURE, HUGE_TEMPERATURE = 1e-4, 1e4


@check("gpt.temperature_small_is_greedy", "Sampling at a tiny temperature picks the argmax: the logits are divided by it")
def temperature_small_is_greedy(ctx):
    @ctx.given(gpt_configs(min_vocab=6), st.integers(0, 2**16), max_examples=max(4, ctx.max_examples // 3))
    def prop(config, seed):
        handle, stand_in = stand_in_model(ctx, config, scale=0.3)
        idx = _sample_rows(stand_in, seed, 64)
        logits = stand_in.logits(idx)[:, -1]
        top2 = logits.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 0.01  # rows with a clear winner: at T=1e-4 it has all the mass
        ctx.student.seed(seed)
        out = generate(ctx, handle, idx, 1, temperature=TINY_TEMPERATURE, do_sample=True)
        differs = (out[:, -1] != logits.argmax(-1)) & clear
        if differs.any():
            from_logits = _samples_from_logits(ctx, handle, idx)
            diagnosis, seen = (("sample_from_logits", "; plain sampling (temperature 1) raises that the probabilities hold "
                                "a negative value: torch.multinomial got the logits") if from_logits else
                               temperature_evidence(ctx, handle, stand_in, seed, TINY_TEMPERATURE))
            raise CheckFailed(f"sampling with temperature={TINY_TEMPERATURE:g} drew a token other than the argmax in "
                              f"{int(differs.sum())} of {int(clear.sum())} rows: at that temperature softmax(logits / T) is "
                              "the argmax" + seen, diagnosis=diagnosis)

    sampling_gate(ctx)


@check("gpt.temperature_large_spreads", "Sampling at a huge temperature spreads draws over the whole vocabulary")
def temperature_large_spreads(ctx):
    @ctx.given(gpt_configs(min_vocab=4, max_vocab=10), st.integers(0, 2**16), max_examples=max(3, ctx.max_examples // 5))
    def prop(config, seed):
        handle, stand_in = stand_in_model(ctx, config, scale=3.0)  # peaked logits: at temperature 1 a few tokens take the mass
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, config["vocab_size"], (1, draw_len(config["block_size"])), generator=g)
        ctx.student.seed(seed)
        rows = 400
        out = generate(ctx, handle, prompt.repeat(rows, 1), 1, temperature=HUGE_TEMPERATURE, do_sample=True)
        counts = torch.bincount(out[:, -1].clamp(0, config["vocab_size"] - 1), minlength=config["vocab_size"])
        # at T=1e4 the draw is uniform: a token is missed from 400 draws with probability < 10 * 0.9^400 ~ 5e-18
        if int((counts > 0).sum()) == 1 and never_samples(ctx, handle, stand_in, seed, prompt):
            raise CheckFailed(f"with temperature={HUGE_TEMPERATURE:g} and do_sample=True, all {rows} draws were token "
                              f"{int(counts.argmax())}, the argmax: generate never samples", diagnosis="generate_never_samples",
                              details={"numbers": {"counts": counts.tolist()}})
        if bool((counts == 0).any()):
            diagnosis, seen = temperature_evidence(ctx, handle, stand_in, seed, HUGE_TEMPERATURE)
            raise CheckFailed(f"with temperature={HUGE_TEMPERATURE:g}, {rows} draws hit only {int((counts > 0).sum())} of "
                              f"{config['vocab_size']} tokens (counts {counts.tolist()}): the distribution should be "
                              "nearly uniform" + seen, diagnosis=diagnosis, details={"numbers": {"counts": counts.tolist()}})

    sampling_gate(ctx)

