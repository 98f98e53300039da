"""Seed 004's written questions, shown to a grader (pending_manual)."""

from graders.checks.questions import written_question

WRITTEN = {
    "residual_connection": "Why is the residual connection crucial in the Transformer architecture?",
    "layer_norm": "Why is Layer Normalization important in the Transformer architecture?",
    "scaling_factor": "Why scale by 1/sqrt(d_k) in scaled dot-product attention, and what happens without it?",
}

for _key, _question in WRITTEN.items():
    written_question(__name__, f"answers.{_key}", _key, _question)
