"""Autograder for the Transformers assignment.

The grading process never imports a submission: student code runs in a sandboxed worker
(`graders.sandbox`), checks (`graders.checks`) compare what it returns with an oracle, and
every report is rendered from one `results.json` (`graders.results`).
"""

import os

__version__ = "0.1.0"

# Hypothesis loads every installed plugin when it is first imported (its "hypothesis" entry
# points): a third-party plugin could change the inputs the checks draw, which the golden
# answers were recorded for, and its imports cost every grade time (trio's pulls in pytest).
os.environ["HYPOTHESIS_NO_PLUGINS"] = "1"
