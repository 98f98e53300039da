"""The check framework: what an assignment's checks are written with (framework.py, the contract,
comparisons, gates, weights). The checks themselves are in the assignment's pack; importing its
check modules registers them (graders/assignment.py)."""

import os

# Hypothesis loads every installed plugin when it is first imported (its "hypothesis" entry
# points): a third-party plugin could change the inputs the checks draw, which the golden
# answers were recorded for, and its imports cost every grade time (trio's pulls in pytest).
# Set here, where the grading process first imports hypothesis; a worker never imports it.
os.environ["HYPOTHESIS_NO_PLUGINS"] = "1"
