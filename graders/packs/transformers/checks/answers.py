"""Numeric answers graded automatically; written answers shown to a grader (pending_manual)."""

import re

from graders.checks.framework import HIDDEN, CheckFailed, CheckOutcome, CheckSkipped, check

SEED_000 = "ntokens 50,001, d_model 200, nhead 2, d_hid 200, nlayers 4"

# The expected numbers are the reference's answers.toml: they never ship to students.
NUMERIC = {
    "base_parameters": ("causal_lm_base_parameters", "Trainable parameters of the base causal LM"),
    "classification_head_parameters": ("causal_lm_classification_head_parameters", "Trainable parameters of the 2-class head"),
    "lm_head_parameters": ("causal_lm_lm_head_parameters", "Trainable parameters of the LM head"),
}

WRITTEN = {
    "residual_connection": "Why is the residual connection crucial in the Transformer architecture?",
    "layer_norm": "Why is Layer Normalization important in the Transformer architecture?",
    "scaling_factor": "Why scale by 1/sqrt(d_k) in scaled dot-product attention, and what happens without it?",
    "square_mask_and_positional_encoding": "What is the role of the square mask? Of the positional encoding?",
    "head_replacement": "Why replace the classification head; how do language modelling and classification differ?",
    "lm_objective_limitation": "A limitation of the left-to-right LM objective compared to BERT's masked LM?",
}


def parse_count(value):
    """1234567, "1,234,567", "1 234 567" and "1_234_567" all read as 1234567."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        digits = re.sub(r"[\s,_']", "", value)
        if re.fullmatch(r"\d+", digits):
            return int(digits)
    return None


def _answers(ctx, section):
    if ctx.answers is None:
        raise CheckSkipped("answers.toml is missing or could not be read")
    return ctx.answers.get(section, {})


def _numeric_check(key):
    def run(ctx):
        expected = parse_count(ctx.reference_answers["numeric"][key])
        given = _answers(ctx, "numeric").get(key, "")
        if given in ("", None):
            raise CheckFailed(f"no answer given for {key} ({SEED_000})")
        count = parse_count(given)
        if count is None:
            raise CheckFailed(f"{key} = {given!r} is not a whole number")
        if count != expected:
            raise CheckFailed(f"{key} = {count:,}, expected a different count ({SEED_000})", diagnosis="numeric_answer_wrong",
                              details={"got": f"{count:,}"})

    return run


def _written_check(key, question):
    def run(ctx):
        text = _answers(ctx, "written").get(key, "")
        if not isinstance(text, str) or not text.strip():
            raise CheckFailed(f"no answer written for: {question}")
        details = {"answer": text.strip()[:5000], "question": question}
        if ctx.oracle.kind == "reference":
            details["rubric"] = ctx.reference_answers.get("written", {}).get(key, "").strip()
        return CheckOutcome(fraction=None, message="waiting for a grader", details=details)

    return run


for _name, (_key, _title) in NUMERIC.items():
    check(f"answers.{_name}", f"{_title} ({SEED_000})", visibility=HIDDEN)(_numeric_check(_key))

for _key, _question in WRITTEN.items():
    check(f"answers.{_key}", _question, manual=True)(_written_check(_key, _question))
