"""Synthetic results.json documents for the renderers' tests and benchmark.

Each builder returns a dict that validates against graders/schemas/results.schema.json. They
cover what a report must survive: full marks, the untouched template (everything "not
implemented"), realistic bugs with diagnoses and pictures, written answers, hidden checks, a
rejected upload, a hostile student, and a full-size result for timing.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import graders
from graders.scoring import totals

RESULTS_SCHEMA = Path(graders.__file__).parent / "schemas" / "results.schema.json"
GRADESCOPE_SCHEMA = Path(graders.__file__).parent / "schemas" / "gradescope.schema.json"

SCRIPT = "<script>alert(1)</script>"
HUGE_OUTPUT_CHARS = 2_000_000


# --------------------------------------------------------------------------- building blocks


def check(
    check_id,
    title,
    status,
    max_score,
    score=None,
    *,
    visibility="public",
    message=None,
    diagnosis=None,
    counterexample=None,
    details=None,
):
    if score is None:
        score = max_score if status == "passed" else 0
    result = {
        "id": check_id,
        "title": title,
        "status": status,
        "score": score,
        "max_score": max_score,
        "visibility": visibility,
        "message": message,
        "diagnosis": None if diagnosis is None else {"id": diagnosis[0], "text": diagnosis[1]},
        "counterexample": counterexample,
    }
    if details is not None:
        result["details"] = details
    return result


def part(part_id, title, checks, *, provisional=False, note=None):
    return {
        "id": part_id,
        "title": title,
        "score": sum(c["score"] for c in checks),
        "max_score": sum(c["max_score"] for c in checks),
        "provisional": provisional,
        "note": note,
        "checks": checks,
    }


def result(parts, *, mode="instructor", name="student-42.zip", status="graded", reason=None, notes=()):
    return {
        "schema_version": 1,
        "status": status,
        "reason": reason,
        "mode": mode,
        **totals(parts),
        "submission": {
            "sha256": "3f" * 32,
            "name": name,
            "kind": "zip",
            "notes": list(notes),
        },
        "versions": {"grader": "0.1.0", "python": "3.11.7", "torch": "2.13.0", "rubric": "a1b2c3d4"},
        "timings": {
            "total_s": 41.7,
            "worker_start_s": 0.8,
            "parts": {p["id"]: round(2.5 + i, 1) for i, p in enumerate(parts)},
        },
        "parts": parts,
    }


def visible_bytes(export):
    """Everything of a Gradescope export that a student sees before the due date."""
    shown = {key: value for key, value in export.items() if key not in ("tests", "execution_time")}
    return json.dumps([shown, [t for t in export["tests"] if t["visibility"] == "visible"]], sort_keys=True)


def softmax_rows(scores):
    rows = []
    for row in scores:
        finite = [s for s in row if s != -math.inf]
        top = max(finite)
        weights = [0.0 if s == -math.inf else math.exp(s - top) for s in row]
        total = sum(weights)
        rows.append([w / total for w in weights])
    return rows


def attention_maps(size, seed=0, *, unscaled=False, mask_queries=False):
    """A causal attention map and a buggy one: scaling forgotten, or padding applied to queries."""
    rng = random.Random(seed)
    d_k = 16
    logits = [[rng.gauss(0, 1) * math.sqrt(d_k) for _ in range(size)] for _ in range(size)]
    causal = [[s if j <= i else -math.inf for j, s in enumerate(row)] for i, row in enumerate(logits)]
    expected = softmax_rows([[s / math.sqrt(d_k) for s in row] for row in causal])
    if unscaled:
        got = softmax_rows(causal)
    elif mask_queries:
        padded = size - max(1, size // 4)
        got = [row if i < padded else [1.0 / size] * size for i, row in enumerate(expected)]
    else:
        got = expected
    return {"expected": expected, "got": got}


def training_curve(epochs, *, diverge_at=None, final_acc=0.88):
    curve = {"epoch": [], "train_loss": [], "train_acc": [], "valid_loss": [], "valid_acc": []}
    for e in range(1, epochs + 1):
        progress = 1 - math.exp(-e / 2)
        diverged = diverge_at is not None and e >= diverge_at
        curve["epoch"].append(e)
        curve["train_loss"].append(math.nan if diverged else round(0.69 - 0.45 * progress, 4))
        curve["valid_loss"].append(math.nan if diverged else round(0.7 - 0.38 * progress, 4))
        curve["train_acc"].append(0.5 if diverged else round(0.5 + (final_acc + 0.05 - 0.5) * progress, 4))
        curve["valid_acc"].append(0.5 if diverged else round(0.5 + (final_acc - 0.5) * progress, 4))
    return curve


def masking_proportions(*, selected=0.15, mask_token=0.8, random_token=0.1, unchanged=0.1):
    def row(name, value, target, width):
        return {"name": name, "value": value, "target": target, "low": target - width, "high": target + width}

    return [
        row("selected for prediction", selected, 0.15, 0.01),
        row("of selected: mask token", mask_token, 0.8, 0.03),
        row("of selected: random token", random_token, 0.1, 0.02),
        row("of selected: unchanged", unchanged, 0.1, 0.02),
    ]


TRACEBACK = """Traceback (most recent call last):
  File "submission/attention.py", line 31, in scaled_dot_product
    attention = attention.masked_fill(mask[:, None, :, None] == 1, float("-inf"))
RuntimeError: The size of tensor a (8) must match the size of tensor b (5) at non-singleton dimension 3"""

# Known mistakes and the line a student acts on (graders/diagnoses.py has the real catalogue).
UNSCALED = (
    "unscaled",
    "Attention is not scaled by 1/sqrt(d_k): divide q·kᵀ by sqrt(d_k) before the softmax.",
)
MASK_ON_QUERIES = (
    "mask-on-queries",
    "The padding mask is applied to queries, not keys: mask the last axis of the scores.",
)
DROPOUT_IN_EVAL = (
    "dropout-in-eval",
    "Dropout is active in eval mode: use self.training (or nn.Dropout) so eval() turns it off.",
)
MASK_BROADCAST = (
    "mask-broadcast",
    "The (B, T) key-padding mask is broadcast on the wrong axis: index it as mask[:, None, None, :].",
)
NO_RANDOM_REPLACEMENT = (
    "no-random-replacement",
    "All selected tokens become the mask token: 10% should become a random token and 10% stay unchanged.",
)
LR_TOO_HIGH = (
    "lr-too-high",
    "The loss becomes NaN after epoch 3: the learning rate is likely too high for the GRU head.",
)
PARAMS_NO_EMBEDDING = (
    "params-no-embedding",
    "The count leaves out the embedding table (ntokens × d_model).",
)

SMOKE_NOTE = "Smoke mode: trained on the small shipped set without a GPU; regraded on the GPU runner."

WRITTEN_RUBRIC = """5 points: explains that attention cost grows as O(T^2) in sequence length.
3 points: mentions memory of the attention matrix but not time.
0 points: off-topic."""


# --------------------------------------------------------------------------- the assignment's parts


def passing_parts():
    return [
        part("attention", "Scaled dot-product and multi-head attention", [
            check("sdp-values", "scaled_dot_product returns the right values", "passed", 4),
            check("sdp-mask", "padding keys get zero weight", "passed", 2),
            check("mha-shapes", "MultiHeadAttention output shape", "passed", 2),
        ]),
        part("encoder", "Positional encoding and Transformer block", [
            check("pe-buffer", "positional encoding is a buffer", "passed", 0),
            check("block-post-ln", "Transformer block is post-LN", "passed", 8),
        ]),
        part("bert", "BERT masking and pre-training", [
            check("mask-rates", "mask_inputs selects 15% with 80/10/10", "passed", 4,
                  details={"proportions": masking_proportions(selected=0.151, mask_token=0.797,
                                                              random_token=0.102, unchanged=0.101)}),
            check("bert-step", "one pre-training step lowers the loss", "passed", 4),
        ]),
        part("sentiment", "Sentiment fine-tuning", [
            check("finetune-accuracy", "validation accuracy over a frozen encoder", "passed", 8,
                  message="validation accuracy 0.91 (full marks from 0.90)",
                  details={"training_curve": training_curve(5, final_acc=0.91)}),
        ]),
        part("answers", "Written and numeric answers", [
            check("params-total", "parameter count of the seed-000 model", "passed", 2,
                  message="10,968,200 parameters"),
        ]),
    ]


def full_marks():
    return result(passing_parts(), name="perfect-student.zip")


def self_check_all_passing():
    return result(passing_parts(), mode="self-check", name="my-homework")


def template_not_implemented():
    parts = [
        part(p["id"], p["title"], [
            check(c["id"], c["title"], "error", c["max_score"], visibility=c["visibility"],
                  message=f"not implemented: {c['id'].replace('-', '_')}",
                  details={"traceback": 'Traceback (most recent call last):\n  File "submission/attention.py", '
                                        'line 12, in scaled_dot_product\n    raise NotImplementedError\n'
                                        "NotImplementedError"})
            for c in p["checks"]
        ])
        for p in passing_parts()
    ]
    return result(parts, mode="self-check", name="student_template")


def buggy():
    parts = [
        part("attention", "Scaled dot-product and multi-head attention", [
            check("sdp-values", "scaled_dot_product returns the right values", "failed", 4,
                  message="values differ from the reference on a (1, 1, 6, 4) input",
                  diagnosis=UNSCALED,
                  counterexample="q = k = v of shape (1, 1, 6, 4), seed 3, mask=None",
                  details={
                      "numbers": {"max_abs_error": 0.4213, "max_rel_error": 3.2, "first_mismatch_index": [0, 0, 1, 0],
                                  "expected_shape": [1, 1, 6, 6], "got_shape": [1, 1, 6, 6],
                                  "expected_dtype": "float32", "got_dtype": "float32"},
                      "attention_maps": attention_maps(6, seed=3, unscaled=True),
                      "expected": "tensor([[0.31, 0.12, 0.57], ...])",
                      "got": "tensor([[0.02, 0.01, 0.97], ...])",
                      "elapsed_s": 0.41,
                  }),
            check("sdp-mask", "padding keys get zero weight", "failed", 2,
                  message="keys marked as padding receive non-zero weight",
                  diagnosis=MASK_ON_QUERIES,
                  counterexample="T = 8, the last 2 positions padded",
                  details={"attention_maps": attention_maps(8, seed=5, mask_queries=True)}),
            check("mha-dropout", "no attention dropout in eval mode", "failed", 2, visibility="hidden",
                  message="two calls in eval mode gave different outputs",
                  diagnosis=DROPOUT_IN_EVAL),
        ]),
        part("encoder", "Positional encoding and Transformer block", [
            check("pe-buffer", "positional encoding is a buffer", "passed", 0),
            check("block-shapes", "Transformer block keeps (B, T, E)", "error", 8,
                  message="RuntimeError in TransformerBlock.forward",
                  diagnosis=MASK_BROADCAST,
                  details={
                      "traceback": TRACEBACK,
                      "output": "debug: scores shape torch.Size([2, 4, 5, 5])\n" * 3,
                      "numbers": {"expected_shape": [2, 5, 32], "got_shape": None},
                  }),
        ]),
        part("bert", "BERT masking and pre-training", [
            check("mask-rates", "mask_inputs selects 15% with 80/10/10", "failed", 4,
                  message="the mask token replaced 100% of the selected tokens",
                  diagnosis=NO_RANDOM_REPLACEMENT,
                  details={"proportions": masking_proportions(selected=0.149, mask_token=1.0,
                                                              random_token=0.0, unchanged=0.0)}),
            check("bert-step", "one pre-training step lowers the loss", "skipped", 4,
                  message="skipped: BertModel could not be built because mask_inputs failed"),
        ]),
        part("sentiment", "Sentiment fine-tuning", [
            check("finetune-accuracy", "validation accuracy over a frozen encoder", "failed", 8, score=2.4,
                  message="validation accuracy 0.62 (0 points at 0.50, full marks at 0.90)",
                  diagnosis=LR_TOO_HIGH,
                  details={"training_curve": training_curve(6, diverge_at=4)}),
        ], provisional=True, note=SMOKE_NOTE),
        part("answers", "Written and numeric answers", [
            check("params-total", "parameter count of the seed-000 model", "failed", 2,
                  message="answered 10,050,201; expected 10,968,200",
                  diagnosis=PARAMS_NO_EMBEDDING),
            check("q-complexity", "Why is self-attention expensive for long sequences?", "pending_manual", 5,
                  details={"answer": "Because every token attends to every other token, so the score matrix is T×T.",
                           "rubric": WRITTEN_RUBRIC}),
        ]),
    ]
    return result(parts, name="buggy-student.zip", notes=["scaled_dot_product taken from notebook cell 7"])


def rejected():
    reason = "not a zip file: the upload is a RAR archive. Zip the folder with your modules and upload that."
    return result([], status="rejected", name="homework.rar", reason=reason)


def hostile():
    huge = ("A" * 99 + "\n") * (HUGE_OUTPUT_CHARS // 100)
    parts = [
        part("attention", f"Attention {SCRIPT}", [
            check("sdp-values", f"values {SCRIPT}", "failed", 4,
                  message=f"{SCRIPT}</style><img src=x onerror=alert(2)> \x1b[2J\x1b[31mred\x1b[0m [bold]markup[/bold]",
                  diagnosis=("unscaled", f"Diagnosis with {SCRIPT} inside"),
                  counterexample=f"</pre>{SCRIPT}",
                  details={
                      "traceback": f'File "x.py", line 1\n{SCRIPT}\n</style>',
                      "output": huge,
                      "expected": "<b>expected</b>",
                      "got": "```\n</pre><script>alert(3)</script>",
                      "numbers": {"expected_dtype": SCRIPT, "got_dtype": "float32", "expected_shape": ["<i>", 2]},
                      "attention_maps": {"expected": [[0.5, 0.5], [1.0, 0.0]],
                                         "got": [[SCRIPT, None], [math.nan, math.inf]]},
                      "proportions": [{"name": SCRIPT, "value": "high", "target": 0.15, "low": 0.1, "high": 0.2},
                                      "junk"],
                      "training_curve": {"epoch": [1, 2], "train_loss": [SCRIPT, 0.3], "valid_acc": "nope"},
                  }),
            check("sdp-mask", "padding keys get zero weight", "error", 2,
                  message="[bold red]loud[/bold red] \x1b[2J\x1b]0;pwned\x07 <script>alert(4)</script>"),
        ]),
        part("answers", "Written answers", [
            check("q-complexity", "Why is self-attention expensive?", "pending_manual", 5,
                  details={"answer": f"{SCRIPT} <a href=\"https://evil.example/x\">click</a> "
                                     "<link rel=stylesheet href=\"http://evil.example/a.css\">",
                           "rubric": WRITTEN_RUBRIC}),
        ]),
    ]
    return result(parts, name=f"{SCRIPT}.zip", notes=[f"{SCRIPT}</style>"])


def full_size(parts_count=8, checks_per_part=10, maps=6, map_size=32):
    """8 parts, 80 checks, a third failing, several 32x32 attention maps and two curves."""
    parts, maps_left = [], maps
    for p in range(parts_count):
        checks = []
        for c in range(checks_per_part):
            check_id = f"check-{p}-{c}"
            if c % 3:
                checks.append(check(check_id, f"property {c} of part {p}", "passed", 2, message="ok"))
                continue
            details = {"numbers": {"max_abs_error": 0.25, "max_rel_error": 1.5, "first_mismatch_index": [0, 1, 2],
                                   "expected_shape": [2, 4, 32, 32], "got_shape": [2, 4, 32, 32]},
                       "traceback": TRACEBACK, "output": "step output line\n" * 120}
            if maps_left:
                details["attention_maps"] = attention_maps(map_size, seed=p * 100 + c, unscaled=True)
                maps_left -= 1
            if c == 3 and p < 2:
                details["training_curve"] = training_curve(20)
            if c == 6:
                details["proportions"] = masking_proportions(mask_token=0.7)
            checks.append(check(check_id, f"property {c} of part {p}", "failed", 2,
                                message="values differ from the reference",
                                diagnosis=(f"bug-{c}", "Attention is not scaled by 1/sqrt(d_k)."),
                                counterexample="q = k = v of shape (2, 4, 32, 8), seed 0", details=details))
        parts.append(part(f"part-{p}", f"Part {p + 1}", checks))
    return result(parts, name="full-size.zip")


MASK_ON_QUERIES = ("mask_on_query_axis", "The padding mask is applied to queries, not keys: mask the last axis of the scores.")


def notebook_handin():
    """A notebook hand-in as a TA meets it: one mistake failing three checks in two parts, a part
    never attempted (a TODO stub), a module the notebook does not define, and a timing per check."""
    traceback = ('Traceback (most recent call last):\n  File "bert.py", line 9, in mask_inputs\n'
                 '    raise NotImplementedError("mask_inputs is not implemented yet. TODO: ...")\nNotImplementedError')
    parts = [
        part("attention", "Scaled dot-product attention", [
            check("attention.padding", "masked keys get zero weight", "failed", 3, message="weights differ",
                  diagnosis=MASK_ON_QUERIES, counterexample="q, k, v of shape (1, 1, 2, 1), padding mask [[0, 1]]"),
            check("attention.values", "values match the reference", "passed", 3),
        ]),
        part("mha", "Multi-head attention", [
            check("mha.padding", "padding keys are ignored", "failed", 2, message="outputs change with padding",
                  diagnosis=MASK_ON_QUERIES),
            check("mha.mask_broadcast", "a (B, T) mask broadcasts", "failed", 2, score=0.5, message="weights differ",
                  diagnosis=MASK_ON_QUERIES),
        ]),
        part("pretraining", "Masking and pre-training", [
            check(f"pretraining.{name}", f"mask_inputs {name.replace('_', ' ')}", "error", 2,
                  message="not implemented: mask_inputs is not implemented yet. TODO: select 15% of the tokens",
                  details={"traceback": traceback})
            for name in ("rate", "mask_token", "random_token", "padding")
        ]),
        part("answers", "Written answers", [
            {**check("answers.layer_norm", "Why Layer Normalization?", "pending_manual", 5,
                     message="waiting for a grader", details={"answer": "It keeps activations in range."}),
             "graded_by_hand": True},
            *({**check(f"answers.{key}", f"Why {key}?", "failed", 5, message=f"no answer written for: Why {key}?"),
               "graded_by_hand": True} for key in ("residual_connection", "scaling_factor")),
        ]),
        part("gpt", "minGPT", [
            check(f"gpt.{name}", f"GPT {name}", "skipped", 2,
                  message="the notebook 'hw.ipynb' defines none of gpt.py's names (GPTConfig, GPT, ...)")
            for name in ("shapes", "causal", "generate")
        ]),
    ]
    results = result(parts, name="hw.ipynb", notes=[
        "scaled_dot_product: cell 6 -> attention.py", "MultiHeadAttention: cell 7 -> attention.py",
        "answers.toml layer_norm: answered in cell 12", "cell 23: top-level code not run: 2 loops"])
    results["submission"]["kind"] = "notebook"
    results["submission"]["origin"] = {
        "notebook": "hw.ipynb",
        "definitions": [{"name": "scaled_dot_product", "cell": 6, "module": "attention.py"},
                        {"name": "MultiHeadAttention", "cell": 7, "module": "attention.py"}],
        "answers": [{"key": "layer_norm", "cell": 12}],
    }
    results["timings"]["checks"] = {f"check_{i}": 0.25 for i in range(75)}
    return results


SAMPLES = {
    "full_marks": full_marks,
    "self_check_all_passing": self_check_all_passing,
    "template_not_implemented": template_not_implemented,
    "buggy": buggy,
    "rejected": rejected,
    "hostile": hostile,
    "full_size": full_size,
    "notebook_handin": notebook_handin,
}


def failing_checks(results):
    """Checks that did not pass and are not waiting for a person: their diagnosis must show."""
    return [
        c
        for p in results["parts"]
        for c in p["checks"]
        if c["status"] in ("failed", "error", "skipped")
    ]


def shown_summary_line(check):
    """What the report must show for a failing check: its diagnosis or message, or for a check
    that shows nothing of the student's work (an untouched function, a missing module, a blank
    written answer), the one line that says so."""
    from graders.reports.html import not_attempted_label, visible_text
    from graders.reports.summary import check_summary_line

    # as written on the page: a control character the student's code put there shows as U+FFFD
    return visible_text(not_attempted_label(check) or check_summary_line(check))
