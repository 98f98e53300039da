"""Seeds 000 and 001's questions: parameter counts graded automatically, written answers shown to
a grader (pending_manual)."""

from graders.checks.questions import numeric_question, written_question

SEED_000 = "ntokens 50,001, d_model 200, nhead 2, d_hid 200, nlayers 4"

# The expected numbers are the reference's answers.toml: they never ship to students.
NUMERIC = {
    "base_parameters": ("causal_lm_base_parameters", "Trainable parameters of the base causal LM"),
    "classification_head_parameters": ("causal_lm_classification_head_parameters", "Trainable parameters of the 2-class head"),
    "lm_head_parameters": ("causal_lm_lm_head_parameters", "Trainable parameters of the LM head"),
}

WRITTEN = {
    "square_mask_and_positional_encoding": "What is the role of the square mask? Of the positional encoding?",
    "head_replacement": "Why replace the classification head; how do language modelling and classification differ?",
    "lm_objective_limitation": "A limitation of the left-to-right LM objective compared to BERT's masked LM?",
}

for _name, (_key, _title) in NUMERIC.items():
    numeric_question(__name__, f"answers.{_name}", _key, _title, context=SEED_000)

for _key, _question in WRITTEN.items():
    written_question(__name__, f"answers.{_key}", _key, _question)
