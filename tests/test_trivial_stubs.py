"""Trivial answers earn nothing: stubs of every graded function (zeros, ones, uniform, random,
input echo, the template's stub made to return something of the right shape) score 0 in their part.

A stub replaces the graded functions of one part in a copy of the reference (the constructors
stay, so parameter shapes are right); every check of the part must then fail or error, except
the few listed in CONSTRUCTION_ONLY, which grade what the stubs leave alone (a constructor's
parameters, the dataset class). A property that a constant, a random tensor or a copy of the
input satisfies (rows sum to one, padded keys get zero weight, two eval passes agree, ...)
earns its points only when the function also does its job.

The stubs run through the same checks with the in-process stand-in of the worker, like the
mutation suite (tests/test_mutation.py).
"""

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.course import PACKS, REFERENCE_DIR, pack_of
from tests.checks_inprocess import run_part

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

# ---------------------------------------------------------------- the stubs, as code appended to a module

# {target: (module file, how the stub is installed, {kind: body})}. A body is the code of a
# function with the target's signature; `INSTALL` names it `_stub` and binds it.

SDP = "def _stub(q, k, v, attn_drop_rate=0.1, mask=None):\n"
PRETRAIN = ("def _stub(model, optimizer, text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15):\n"
            "    import math, random\n")
_BLOCKED = """    B, H, T, d = q.shape
    blocked = torch.zeros(B, H, T, T, dtype=torch.bool)
    if mask is not None:
        m = mask.bool()[:, None, None, :] if mask.dim() == 2 else mask.bool()
        blocked = blocked | m
"""

STUBS = {
    "attention.scaled_dot_product": ("attention.py", "scaled_dot_product = _stub", {
        "zeros": SDP + "    return torch.zeros_like(v), torch.zeros(*q.shape[:-1], k.size(-2))\n",
        "ones": SDP + "    return torch.ones_like(v), torch.ones(*q.shape[:-1], k.size(-2))\n",
        "uniform": SDP + "    w = torch.full((*q.shape[:-1], k.size(-2)), 1.0 / k.size(-2))\n    return w @ v, w\n",
        # uniform over the keys the mask leaves open: rows sum to one, padded keys get zero weight
        "uniform_unmasked": SDP + _BLOCKED + "    w = (~blocked).float()\n    w = w / w.sum(-1, keepdim=True)\n"
                                             "    return w @ v, w\n",
        "random": SDP + _BLOCKED + "    w = torch.softmax(torch.randn(B, H, T, T).masked_fill(blocked, float('-inf')), -1)\n"
                                   "    return w @ v, w\n",
        "echo": SDP + "    T = q.size(-2)\n    return v.clone(), torch.eye(T).expand(*q.shape[:-2], T, T).clone()\n",
    }),
    "attention.MultiHeadAttention.forward": ("attention.py", "MultiHeadAttention.forward = _stub", {
        "zeros": "def _stub(self, embedding, mask=None):\n    return torch.zeros_like(embedding)\n",
        "ones": "def _stub(self, embedding, mask=None):\n    return torch.ones_like(embedding)\n",
        "uniform": "def _stub(self, embedding, mask=None):\n"
                   "    return self.o_proj(embedding.mean(1, keepdim=True).expand_as(embedding))\n",
        "random": "def _stub(self, embedding, mask=None):\n    return torch.randn_like(embedding)\n",
        "echo": "def _stub(self, embedding, mask=None):\n    return embedding.clone()\n",
    }),
    "encoder.PositionalEncoding.forward": ("encoder.py", "PositionalEncoding.forward = _stub", {
        "zeros": "def _stub(self, x):\n    return torch.zeros_like(x)\n",
        "ones": "def _stub(self, x):\n    return torch.ones_like(x)\n",
        "uniform": "def _stub(self, x):\n    return x + 0.5\n",
        "random": "def _stub(self, x):\n    return torch.randn_like(x)\n",
        "echo": "def _stub(self, x):\n    return x.clone()\n",
    }),
    "encoder.TransformerBlock.forward": ("encoder.py", "TransformerBlock.forward = _stub", {
        "zeros": "def _stub(self, inputs):\n    x, mask = inputs\n    return torch.zeros_like(x), mask\n",
        "ones": "def _stub(self, inputs):\n    x, mask = inputs\n    return torch.ones_like(x), mask\n",
        "uniform": "def _stub(self, inputs):\n    x, mask = inputs\n"
                   "    return self.norm2(x.mean(1, keepdim=True).expand_as(x)).contiguous(), mask\n",
        "random": "def _stub(self, inputs):\n    x, mask = inputs\n    return torch.randn_like(x), mask\n",
        "echo": "def _stub(self, inputs):\n    x, mask = inputs\n    return x.clone(), mask\n",
    }),
    "bert.BertModel.forward": ("bert.py", "BertModel.forward = _stub", {
        "zeros": "def _stub(self, batch_text, mask=None):\n"
                 "    return torch.zeros(*batch_text.shape, self.mask_pred.out_features)\n",
        "ones": "def _stub(self, batch_text, mask=None):\n"
                "    return torch.ones(*batch_text.shape, self.mask_pred.out_features)\n",
        "uniform": "def _stub(self, batch_text, mask=None):\n"
                   "    V = self.mask_pred.out_features\n    return torch.full((*batch_text.shape, V), 1.0 / V)\n",
        "random": "def _stub(self, batch_text, mask=None):\n"
                  "    return torch.randn(*batch_text.shape, self.mask_pred.out_features)\n",
        # the token's own embedding, read out by mask_pred: right shape, depends on the token only
        "echo": "def _stub(self, batch_text, mask=None):\n    return self.mask_pred(self.embed(batch_text))\n",
    }),
    "bert.mask_inputs": ("bert.py", "mask_inputs = _stub", {
        "zeros": "def _stub(text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15, only_mask=False):\n"
                 "    return torch.zeros_like(text), torch.zeros_like(text)\n",
        "ones": "def _stub(text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15, only_mask=False):\n"
                "    return torch.ones_like(text), torch.ones_like(text)\n",
        # every non-padding token selected and masked, whatever mask_rate says
        "uniform": "def _stub(text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15, only_mask=False):\n"
                   "    real = text != pad_ind\n"
                   "    return (torch.where(real, torch.full_like(text, mask_token_ind), text),\n"
                   "            torch.where(real, text, torch.full_like(text, IGNORE_INDEX)))\n",
        "random": "def _stub(text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15, only_mask=False):\n"
                  "    return torch.randint(vocab_size, text.shape), torch.randint(vocab_size, text.shape)\n",
        # nothing selected: the text unchanged, every label -100
        "echo": "def _stub(text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15, only_mask=False):\n"
                "    return text.clone(), torch.full_like(text, IGNORE_INDEX)\n",
    }),
    "causal_lm.generate_square_subsequent_mask": ("causal_lm.py", "generate_square_subsequent_mask = _stub", {
        "zeros": "def _stub(sz):\n    return torch.zeros(sz, sz)\n",
        "ones": "def _stub(sz):\n    return torch.ones(sz, sz)\n",
        "uniform": "def _stub(sz):\n    return torch.full((sz, sz), float('-inf'))\n",
        "random": "def _stub(sz):\n    return torch.randn(sz, sz)\n",
    }),
    "causal_lm.PositionalEncoding.forward": ("causal_lm.py", "PositionalEncoding.forward = _stub", {
        "zeros": "def _stub(self, x):\n    return torch.zeros_like(x)\n",
        "ones": "def _stub(self, x):\n    return torch.ones_like(x)\n",
        "uniform": "def _stub(self, x):\n    return x + 0.5\n",
        "random": "def _stub(self, x):\n    return torch.randn_like(x)\n",
        "echo": "def _stub(self, x):\n    return x.clone()\n",
    }),
    "causal_lm.TransformerModel.forward": ("causal_lm.py", "TransformerModel.forward = _stub", {
        "zeros": "def _stub(self, src, src_mask=None):\n    return torch.zeros(*src.shape, self.d_model)\n",
        "ones": "def _stub(self, src, src_mask=None):\n    return torch.ones(*src.shape, self.d_model)\n",
        "uniform": "def _stub(self, src, src_mask=None):\n    return torch.full((*src.shape, self.d_model), 0.5)\n",
        "random": "def _stub(self, src, src_mask=None):\n    return torch.randn(*src.shape, self.d_model)\n",
        "echo": "def _stub(self, src, src_mask=None):\n    return self.embedding(src)\n",
        # the template's steps before the encoder: every position on its own
        "template": "def _stub(self, src, src_mask=None):\n"
                    "    return self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))\n",
    }),
    "causal_lm.LMHead.forward": ("causal_lm.py", "LMHead.forward = _stub", {
        "zeros": "def _stub(self, hidden):\n    return torch.zeros(*hidden.shape[:-1], self.decoder.out_features)\n",
        "ones": "def _stub(self, hidden):\n    return torch.ones(*hidden.shape[:-1], self.decoder.out_features)\n",
        "uniform": "def _stub(self, hidden):\n"
                   "    V = self.decoder.out_features\n    return torch.full((*hidden.shape[:-1], V), 1.0 / V)\n",
        "random": "def _stub(self, hidden):\n    return torch.randn(*hidden.shape[:-1], self.decoder.out_features)\n",
        "echo": "def _stub(self, hidden):\n"
                "    return hidden.sum(-1, keepdim=True).expand(*hidden.shape[:-1], self.decoder.out_features).contiguous()\n",
    }),
    "causal_lm.ClassificationHead.forward": ("causal_lm.py", "ClassificationHead.forward = _stub", {
        "zeros": "def _stub(self, hidden):\n    return torch.zeros(hidden.size(0), self.classifier.out_features)\n",
        "ones": "def _stub(self, hidden):\n    return torch.ones(hidden.size(0), self.classifier.out_features)\n",
        "uniform": "def _stub(self, hidden):\n"
                   "    C = self.classifier.out_features\n    return torch.full((hidden.size(0), C), 1.0 / C)\n",
        "random": "def _stub(self, hidden):\n    return torch.randn(hidden.size(0), self.classifier.out_features)\n",
        # the last position's first feature, copied to every class
        "echo": "def _stub(self, hidden):\n"
                "    return hidden[:, -1, :1].expand(-1, self.classifier.out_features).contiguous()\n",
    }),
    "causal_lm.count_parameters": ("causal_lm.py", "count_parameters = _stub", {
        "zeros": "def _stub(module):\n    return 0\n",
        "ones": "def _stub(module):\n    return 1\n",
        "random": "def _stub(module):\n    import random\n    return random.randint(0, 10**6)\n",
    }),
    "causal_lm.closed_form_parameter_count": ("causal_lm.py", "closed_form_parameter_count = _stub", {
        "zeros": "def _stub(ntoken, d_model, nhead, d_hid, nlayers, n_classes=2):\n"
                 "    return {'base': 0, 'lm_head': 0, 'classification_head': 0}\n",
        "ones": "def _stub(ntoken, d_model, nhead, d_hid, nlayers, n_classes=2):\n"
                "    return {'base': 1, 'lm_head': 1, 'classification_head': 1}\n",
        "random": "def _stub(ntoken, d_model, nhead, d_hid, nlayers, n_classes=2):\n    import random\n"
                  "    return {key: random.randint(0, 10**6) for key in ('base', 'lm_head', 'classification_head')}\n",
    }),
    "gpt.GPT.forward": ("gpt.py", "GPT.forward = _stub", {
        kind: "def _stub(self, idx, targets=None, finetune_classify=False):\n"
              "    B, T = idx.shape\n"
              "    V = self.classifier_head.out_features if finetune_classify else self.lm_head.out_features\n"
              f"    logits = {logits}\n"
              "    if finetune_classify:\n"
              "        logits = logits[:, -1]\n"
              "        return logits, None if targets is None else F.cross_entropy(logits, targets)\n"
              "    loss = None if targets is None else F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),\n"
              "                                                        ignore_index=IGNORE_INDEX)\n"
              "    return logits, loss\n"
        for kind, logits in {
            "zeros": "torch.zeros(B, T, V)",
            "ones": "torch.ones(B, T, V)",
            "uniform": "torch.full((B, T, V), 1.0 / V)",
            "random": "torch.randn(B, T, V)",
            # predicts the token it reads: depends on the input, never on the context
            "echo": "F.one_hot(idx.clamp(max=V - 1), V).float() * 3",
        }.items()
    }),
    # the loss of a uniform prediction, ln(V), is what a fresh model's first step should report
    "bert.pretrain_step": ("bert.py", "pretrain_step = _stub", {
        "zeros": PRETRAIN + "    return 0.0\n",
        "ones": PRETRAIN + "    return 1.0\n",
        "uniform": PRETRAIN + "    return math.log(vocab_size)\n",
        "random": PRETRAIN + "    return math.log(vocab_size) + random.uniform(-0.5, 0.5)\n",
    }),
    "gpt.GPT.generate": ("gpt.py", "GPT.generate = _stub", {
        kind: "def _stub(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):\n"
              "    V = self.lm_head.out_features\n"
              f"    new = {new}\n"
              "    return torch.cat((idx, new.long()), dim=1)\n"
        for kind, new in {
            "zeros": "torch.zeros(idx.size(0), max_new_tokens)",
            "ones": "torch.ones(idx.size(0), max_new_tokens)",
            "uniform": "torch.randint(V, (idx.size(0), max_new_tokens))",
            "random": "torch.randint(V, (idx.size(0), max_new_tokens))",
            "echo": "idx[:, -1:].repeat(1, max_new_tokens)",
        }.items()
    }),
    "gpt.LanguageModelingDataset.__getitem__": ("gpt.py", "LanguageModelingDataset.__getitem__ = _stub", {
        "zeros": "def _stub(self, i):\n    n = len(self.token_ids[i]) - 1\n"
                 "    return torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)\n",
        "ones": "def _stub(self, i):\n    n = len(self.token_ids[i]) - 1\n"
                "    return torch.ones(n, dtype=torch.long), torch.ones(n, dtype=torch.long)\n",
        "random": "def _stub(self, i):\n    n = len(self.token_ids[i]) - 1\n"
                  "    return torch.randint(30, (n,)), torch.randint(30, (n,))\n",
        "echo": "def _stub(self, i):\n    ids = torch.tensor(self.token_ids[i])\n    return ids, ids\n",
    }),
    "gpt.lm_collate_fn": ("gpt.py", "lm_collate_fn = _stub", {
        kind: "def _stub(batch):\n    B, T = len(batch), max(len(x) for x, _ in batch)\n"
              f"    return {pair}\n"
        for kind, pair in {
            "zeros": "torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.long)",
            "ones": "torch.ones(B, T, dtype=torch.long), torch.ones(B, T, dtype=torch.long)",
            "random": "torch.randint(30, (B, T)), torch.randint(30, (B, T))",
        }.items()
    }),
    "sentiment.BERTGRUSentiment.forward": ("sentiment.py", "BERTGRUSentiment.forward = _stub", {
        kind: f"def _stub(self, text, attention_mask=None):\n    B, C = text.size(0), self.out.out_features\n    return {out}\n"
        for kind, out in {
            "zeros": "torch.zeros(B, C)",
            "ones": "torch.ones(B, C)",
            "uniform": "torch.full((B, C), 0.5)",
            "random": "torch.randn(B, C)",
            "echo": "text.float().mean(1, keepdim=True).expand(B, C).contiguous()",
            # the template's forward made to return its head's output: the output layer's bias
            "template": "self.out(torch.zeros(B, self.out.in_features))",
        }.items()
    }),
    "sentiment.binary_accuracy": ("sentiment.py", "binary_accuracy = _stub", {
        kind: f"def _stub(preds, y):\n    return {value}\n"
        for kind, value in {"zeros": "torch.tensor(0.0)", "ones": "torch.tensor(1.0)", "uniform": "torch.tensor(0.5)",
                            "random": "torch.rand(())", "echo": "preds.mean()"}.items()
    }),
    "sentiment.train": ("sentiment.py", "train = _stub", {
        kind: f"def _stub(model, iterator, optimizer, criterion):\n    import math, random\n    return {value}\n"
        for kind, value in {"zeros": "0.0, 0.0", "ones": "1.0, 1.0", "uniform": "math.log(2), 0.5",
                            "random": "random.random(), random.random()"}.items()
    }),
    "sentiment.evaluate": ("sentiment.py", "evaluate = _stub", {
        kind: f"def _stub(model, iterator, criterion):\n    import math, random\n    return {value}\n"
        for kind, value in {"zeros": "0.0, 0.0", "ones": "1.0, 1.0", "uniform": "math.log(2), 0.5",
                            "random": "random.random(), random.random()"}.items()
    }),
}

# The graded functions of each part, and the checks that grade something the stubs leave alone.
PARTS = {
    "attention": (["attention.scaled_dot_product"], {}),
    "mha": (["attention.MultiHeadAttention.forward"], {}),
    "positional_encoding": (["encoder.PositionalEncoding.forward"], {}),
    "block": (["encoder.TransformerBlock.forward"], {}),
    "bert": (["bert.BertModel.forward"], {}),
    "pretraining": (["bert.mask_inputs", "bert.pretrain_step"], {}),
    "causal_lm": (["causal_lm.generate_square_subsequent_mask", "causal_lm.PositionalEncoding.forward",
                   "causal_lm.TransformerModel.forward",
                   "causal_lm.LMHead.forward", "causal_lm.ClassificationHead.forward", "causal_lm.count_parameters",
                   "causal_lm.closed_form_parameter_count"], {}),
    "gpt": (["gpt.GPT.forward", "gpt.GPT.generate", "gpt.LanguageModelingDataset.__getitem__", "gpt.lm_collate_fn"], {}),
    "sentiment": (["sentiment.BERTGRUSentiment.forward", "sentiment.binary_accuracy", "sentiment.train",
                   "sentiment.evaluate"], {}),
}

KINDS = ["zeros", "ones", "uniform", "uniform_unmasked", "random", "echo", "template"]


def _stub_code(target, kind):
    """The code appended to the target's module, or None when the target has no stub of that kind."""
    _, install, bodies = STUBS[target]
    if kind not in bodies:
        return None
    return "\n\n# ---- trivial stub (tests/test_trivial_stubs.py)\n" + textwrap.dedent(bodies[kind]) + install + "\n"


def _cases():
    cases = []
    for part, (targets, _) in PARTS.items():
        for kind in KINDS:
            if any(kind in STUBS[t][2] for t in targets):
                cases.append((part, kind))
    return cases


def stubbed_copy(folder, targets, kind, reference_dir=REFERENCE_DIR):
    """A copy of the reference in `folder` whose `targets` are stubs of `kind` (or, for a target
    without that kind, its zeros stub)."""
    shutil.copytree(reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for target in targets:
        code = _stub_code(target, kind) or _stub_code(target, "zeros")
        path = folder / STUBS[target][0]
        path.write_text(path.read_text() + code)
    return folder


@pytest.mark.parametrize("part,kind", _cases(), ids=lambda v: v)
def test_trivial_stub_scores_zero(part, kind, tmp_path, one_torch_thread):
    targets, construction_only = PARTS[part]
    pack = pack_of(part)
    folder = stubbed_copy(tmp_path / "submission", targets, kind, pack.reference_dir)
    graded = [c.id for c in pack.registry()[part] if c.id not in construction_only]
    results = run_part(folder, part, max_examples=10, only=set(graded))
    passed = {cid: r.message for cid, r in results.items() if r.status == "passed" or r.fraction > 0}
    assert not passed, f"{kind} stubs of {', '.join(targets)} earn points in {part}: {sorted(passed)}"


def test_construction_only_checks_exist():
    ids = {c.id for pack in PACKS for checks in pack.registry().values() for c in checks}
    for part, (targets, construction_only) in PARTS.items():
        assert set(construction_only) <= ids, part
        assert all(t in STUBS for t in targets)


# ---------------------------------------------------------------- the template's own stubs

# The template's stubs made to return something of the right shape, as a student who only silenced
# the NotImplementedError hands them in: in the part's student_template module, each `raise
# NotImplementedError(...)` becomes the return below, or `pass` in a constructor.
TEMPLATE_RETURNS = {
    "scaled_dot_product": "return torch.zeros_like(v), torch.zeros(*q.shape[:-1], k.size(-2))",
    "MultiHeadAttention.forward": "return torch.zeros_like(embedding)",
    "PositionalEncoding.forward": "return x",
    "TransformerBlock.forward": "return inputs",
    "BertModel.forward": "return torch.zeros(*batch_text.shape, 2)",
    "mask_inputs": "return text.clone(), torch.full_like(text, IGNORE_INDEX)",
    "pretrain_step": "return 0.0",
}
TEMPLATE_PARTS = {"attention": "attention.py", "mha": "attention.py", "positional_encoding": "encoder.py",
                  "block": "encoder.py", "bert": "bert.py", "pretraining": "bert.py"}


def template_stub(source):
    """The template module's text with every NotImplementedError turned into a return (TEMPLATE_RETURNS)."""
    lines, owner, function = [], None, None
    for line in source.splitlines():
        stripped = line.lstrip()
        if line.startswith("class "):
            owner = line.split()[1].split("(")[0].rstrip(":")
        elif line.startswith("def "):
            owner = None
        if stripped.startswith("def "):
            function = stripped[4:].split("(")[0]
        if stripped.startswith("raise NotImplementedError("):
            name = f"{owner}.{function}" if owner else function
            line = line[: len(line) - len(stripped)] + TEMPLATE_RETURNS.get(name, "pass")
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("part", sorted(TEMPLATE_PARTS))
def test_template_stub_scores_zero(part, tmp_path, one_torch_thread):
    from tests.course import TEMPLATE_DIR
    from tests.course import REGISTRY

    folder = tmp_path / "submission"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    module = TEMPLATE_PARTS[part]
    (folder / module).write_text(template_stub((Path(TEMPLATE_DIR) / module).read_text()))
    results = run_part(folder, part, max_examples=10, only={c.id for c in REGISTRY[part]})
    passed = {cid: r.message for cid, r in results.items() if r.status == "passed" or r.fraction > 0}
    assert not passed, f"the template's stubs of {module}, returning values of the right shape, earn points in {part}: {sorted(passed)}"
