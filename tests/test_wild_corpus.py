"""The wild corpus: public implementations of the assignment's components, written by others for
their own tutorials and libraries (fixtures/wild/, each folder with its PROVENANCE.md), adapted to
the template's layout and names only, graded with the real checks.

Every point such code loses was judged by hand against the template's docstrings. A loss the
contract justifies is listed in JUSTIFIED with the docstring's words; a part graded must lose
points exactly when its PROVENANCE.md records a breach: a loss the contract does not justify (a
false accusation) fails the test, and so does a breach no check charges. Every loss names a
catalogued mistake or says where the code differs. (The first grading found one false
accusation, one uncharged breach and five failures that did not say where; each PROVENANCE.md
tells how the checks were fixed.)

The checks run in-process (tests/checks_inprocess.py, as test_mutation.py does): the corpus is
public tutorial code read here, not untrusted hand-ins. Fine-tuning is out of scope. The figures
per part are in docs/checks.md, "The wild corpus".
"""

import functools
from pathlib import Path

import pytest

from graders.checks.localise import is_pattern
from tests.checks_inprocess import run_part
from tests.course import BERT, CAUSAL_LM, GPT

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it. Each
# grade (graded(), cached) is read by two tests: one process runs them all.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_wild_corpus.py")]

WILD = Path(__file__).resolve().parent.parent / "fixtures" / "wild"
PACKS = {"bert": BERT, "causal_lm": CAUSAL_LM, "gpt": GPT}
# Examples a check: a grade's 10 for the parts that are cheap to run; the minGPT and sentiment
# parts, the slow ones, with 2 and 3 (their statistical checks draw their targeted examples anyway).
EXAMPLES = {"gpt": 2, "sentiment": 2, "pretraining": 3}

# The parts graded per submission: those where the public code lives (the rest of each
# submission is the reference's code).
PARTS = {
    ("gpt", "mingpt"): ("gpt",),
    ("gpt", "mingpt_2020"): ("gpt",),
    ("gpt", "sampling_loop"): ("gpt",),
    ("bert", "uvadlc_tutorial6"): ("attention", "mha", "positional_encoding", "block"),
    ("bert", "annotated_transformer"): ("attention", "mha", "positional_encoding", "block"),
    ("bert", "hf_mlm_masking"): ("pretraining",),
    ("bert", "loop_masking"): ("pretraining",),
    ("bert", "bentrevett_sentiment"): ("sentiment",),
    ("causal_lm", "pytorch_tutorial"): ("causal_lm",),
    ("causal_lm", "word_language_model"): ("causal_lm",),
}

_MASK_POLARITY = ("fills where mask == 0; the docstring: '(B, T) key-padding mask where 1 marks padding ... "
                  "nonzero / True blocks query i -> key j'")
_MASK_SQUARE = ("a (B, T) mask is broadcast straight onto the (B, H, T, T) logits, i.e. read as a (T, T) "
                "square; the docstring: 'a (B, T) key-padding mask where 1 marks padding: no query may "
                "attend to that key'")
_PE_ODD = "pe[:, 1::2] = cos(...) raises for an odd size; the docstring: 'embed_dim may be odd'"
_NO_HEAD = ("the model ends in its own Linear over the vocabulary; the docstring: '-> hidden states "
            "(B, T, d_model). No head.'")
_SEQ_FIRST_PE = "a (max_len, 1, d) table sliced by x.size(0); the docstring: 'Input and output are batch-first'"

# (pack, submission, part) -> {check id: why the contract justifies losing it}. Any loss outside
# this table is an unjudged loss and fails the test.
JUSTIFIED = {
    ("gpt", "mingpt", "gpt"): {},
    ("gpt", "sampling_loop", "gpt"): {},
    ("gpt", "mingpt_2020", "gpt"): {
        "gpt.padding_not_in_loss": "cross_entropy without ignore_index; docstring: 'targets ... (IGNORE_INDEX at "
                                   "padding)', lm_collate_fn: 'padding never counts in the loss'",
    },
    ("bert", "uvadlc_tutorial6", "attention"): {
        "attention.rows_sum_to_one": _MASK_SQUARE,
        "attention.matches_reference": _MASK_POLARITY,
        "attention.padded_keys_get_zero_weight": _MASK_POLARITY,
        "attention.ignores_padded_content": _MASK_POLARITY,
        "attention.batch_size_vs_length": _MASK_POLARITY,
        "attention.four_d_mask": _MASK_POLARITY,
        "attention.dropout": "no dropout; the docstring: 'with dropout on the attention weights'",
    },
    # the mask polarity lives in scaled_dot_product: charged once, in part attention
    ("bert", "uvadlc_tutorial6", "mha"): {
        "mha.eval_deterministic": "the module never passes its attn_drop_rate: scaled_dot_product(q, k, v, mask=mask) "
                                  "takes the function's default 0.1 in eval mode too; the template: 'attention dropout "
                                  "only in training mode' (seen around the grader's dropping scaled_dot_product)",
    },
    ("bert", "uvadlc_tutorial6", "positional_encoding"): {
        "positional_encoding.buffer": "the table is registered with persistent=False, absent from the state_dict; "
                                      "the docstring: 'is saved in the state_dict'",
        "positional_encoding.values": _PE_ODD,
        "positional_encoding.sequence_axis": _PE_ODD,
        "positional_encoding.dropout": "no dropout; the template's PositionalEncoding takes dropout and adds "
                                       "'then dropout'",
    },
    ("bert", "uvadlc_tutorial6", "block"): {
        "block.feed_forward": "Linear, Dropout, ReLU, Linear; the docstring: 'linear_net = Linear, GELU, Linear, Dropout'",
    },
    ("bert", "annotated_transformer", "attention"): {
        "attention.rows_sum_to_one": _MASK_SQUARE,
        "attention.matches_reference": _MASK_POLARITY,
        "attention.padded_keys_get_zero_weight": _MASK_POLARITY,
        "attention.ignores_padded_content": _MASK_POLARITY,
        "attention.batch_size_vs_length": _MASK_POLARITY,
        "attention.four_d_mask": _MASK_POLARITY,
    },
    ("bert", "annotated_transformer", "mha"): {
        "mha.matches_reference": "four Linear(E, E) in self.linears; the docstring: 'qkv_proj: Linear(E, 3E) ... "
                                 "o_proj: Linear(E, E)'",
        "mha.padding": "no qkv_proj / o_proj, and the source's (B, 1, T) keep-mask convention",
        "mha.output_projection_applied": "no attribute o_proj (the docstring names it)",
    },
    ("bert", "annotated_transformer", "positional_encoding"): {
        "positional_encoding.values": _PE_ODD,
        "positional_encoding.sequence_axis": _PE_ODD,
    },
    ("bert", "annotated_transformer", "block"): {
        "block.post_ln": "pre-LN, norms in sublayer[i].norm; the docstring: 'Post-LN ... the grader calls the "
                         "sub-modules by these names: self_attn, linear_net, norm1, norm2'",
        "block.wiring": "the same: no norm1 / norm2, pre-LN",
        "block.separate_norms": "no norm1 / norm2",
        "block.attention_dropout": "no norm1 / norm2 (the checks build the block from the sub-modules the docstring names)",
        "block.dropout_rates": "no norm1 / norm2 (the checks build the block from the sub-modules the docstring names)",
        "block.feed_forward": "ReLU; the docstring: 'linear_net = Linear, GELU, Linear, Dropout'",
    },
    ("bert", "hf_mlm_masking", "pretraining"): {
        "pretraining.labels": "the collator masks its inputs in place (inputs = text); mask_inputs: 'text: (B, T) "
                              "long, left unchanged'",
    },
    ("bert", "loop_masking", "pretraining"): {},
    ("bert", "bentrevett_sentiment", "sentiment"): {
        "sentiment.attention_mask": "BERT runs without the mask; forward: 'attention_mask: (B, T), 1 at real "
                                    "tokens', TODO: 'passing attention_mask'",
    },
    ("causal_lm", "pytorch_tutorial", "causal_lm"): {
        "causal_lm.causal": _NO_HEAD,
        "causal_lm.rows_independent": _NO_HEAD,
        "causal_lm.batch_first_shape": _NO_HEAD,
        "causal_lm.model_matches_reference": _NO_HEAD,
        "causal_lm.positional_table": _SEQ_FIRST_PE,
        "causal_lm.src_mask_argument": "sequence-first encoder layers meet (B, T) ids; 'src: (B, T) ids; src_mask: "
                                       "(T, T) additive mask, the causal one when None'",
        "causal_lm.model_parameters": "10 parameters of the decoder head ('No head')",
        "causal_lm.dropout": _NO_HEAD + " (the check's gate runs the whole model; its dropout is right)",
    },
    ("causal_lm", "word_language_model", "causal_lm"): {
        "causal_lm.causal": _NO_HEAD,
        "causal_lm.rows_independent": _NO_HEAD,
        "causal_lm.batch_first_shape": _NO_HEAD,
        "causal_lm.model_matches_reference": _NO_HEAD,
        "causal_lm.positional_table": _SEQ_FIRST_PE,
        "causal_lm.src_mask_argument": "the second argument is a flag (has_mask): 'src_mask: (T, T) additive mask, "
                                       "the causal one when None'",
        "causal_lm.model_parameters": "the decoder head (10) and nn.Transformer's final encoder norm (8): 'No head'",
        "causal_lm.dropout": "nn.Transformer built without the model's dropout (its default 0.1): 'dropout is the rate of "
                             "the positional encoding and of every encoder layer'",
    },
}

# Parts whose PROVENANCE.md records a breach: they must lose points; the others must not.
BREACHED = {key for key, losses in JUSTIFIED.items() if losses}

# Losses the contract does not justify: (pack, submission, part, check id) -> why the contract
# allows the code. Asserted to pass.
@functools.cache
def graded(pack, submission, part):
    return run_part(WILD / pack / submission, part, pack=PACKS[pack], max_examples=EXAMPLES.get(part, 10))


def lost(results):
    return {cid for cid, r in results.items() if r.status in ("failed", "error")}


def test_the_corpus_is_what_the_table_says():
    folders = {(p.parent.name, p.name) for p in WILD.glob("*/*") if p.is_dir() and not p.name.startswith("__")}
    assert folders == set(PARTS), "fixtures/wild/ and PARTS disagree"
    assert {(pack, sub, part) for (pack, sub), parts in PARTS.items() for part in parts} == set(JUSTIFIED)
    for pack, submission in PARTS:
        folder = WILD / pack / submission
        provenance = (folder / "PROVENANCE.md").read_text()
        for word in ("Source", "commit", "Licence", "Public code", "Adapted", "Expected losses"):
            assert word in provenance, f"{submission}/PROVENANCE.md says nothing of {word!r}"
        assert (folder / "LICENSE.txt").exists(), f"{submission} keeps no licence text"
        judged = {cid for (pk, sub, _), losses in JUSTIFIED.items() if (pk, sub) == (pack, submission) for cid in losses}
        unrecorded = sorted(cid for cid in judged if f"`{cid}`" not in provenance)
        assert not unrecorded, f"{submission}/PROVENANCE.md does not record {unrecorded}"


@pytest.mark.parametrize("key", sorted(JUSTIFIED), ids="/".join)
def test_only_judged_losses(key):
    """Every point lost is one judged by hand to breach the contract, and a part loses points
    exactly when its code breaches the contract."""
    results = graded(*key)
    losses = lost(results)
    unjudged = {cid: (results[cid].status, results[cid].diagnosis, (results[cid].message or "")[:300])
                for cid in losses - set(JUSTIFIED[key])}
    assert not unjudged, f"{'/'.join(key)} loses points the contract was not judged to justify: {unjudged}"
    assert bool(losses) == (key in BREACHED), f"{'/'.join(key)}: {sorted(losses)}"


def says_where(result):
    """A failure names a catalogued mistake, or says where the code differs: the sub-module
    (graders/checks/localise.py, details["where"]) or the pattern of the difference (a factor, a
    region of the output: details["how"], or "only at" in the message)."""
    details = result.details or {}
    return (result.diagnosis is not None or bool(details.get("where")) or is_pattern(details.get("how"))
            or "only at " in (result.message or ""))


@pytest.mark.parametrize("key", sorted(k for k, losses in JUSTIFIED.items() if losses), ids="/".join)
def test_every_loss_says_where(key):
    results = graded(*key)
    silent = {cid: (results[cid].message or "")[:300] for cid in lost(results) if not says_where(results[cid])}
    assert not silent, f"{'/'.join(key)}: failures that neither name a mistake nor say where: {silent}"
