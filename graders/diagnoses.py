"""The engine's own diagnoses: mistakes any assignment's checks can name. An assignment adds
its catalogue in its pack (`diagnoses` in assignment.toml), loaded into this one with its checks.
Each text is one line a student can act on."""

DIAGNOSES = {
    "returns_wrong_type": "The function returns the wrong kind of value; check the return statement against the docstring.",
    "wrong_shape": "The output has the wrong shape; compare with the docstring.",
    "degenerate_output": "The output does not depend on the input the way the function must (a constant, random values, or each position computed on its own): properties it happens to satisfy earn no points until it does its job.",
    "nondeterministic": "The same input gave different outputs on two runs: look for dropout or randomness that is not switched off.",
    "hangs": "Your code did not finish within the time limit: look for an infinite loop or very slow code.",
    # graders/checks/questions.py: a numeric answer of a questions file
    "numeric_answer_wrong": "The number differs from the expected count; recount with the closed-form formula.",
}
