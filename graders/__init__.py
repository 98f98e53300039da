"""An autograder engine for deep-learning assignments; each assignment is a pack (graders/packs/).

The grading process never imports a submission: student code runs in a sandboxed worker
(`graders.sandbox`), checks (`graders.checks`) compare what it returns with an oracle, and
every report is rendered from one `results.json` (`graders.results`).
"""

__version__ = "0.1.0"
