"""Your implementation of the assignment: BERT from scratch and frozen-BERT sentiment.

Fill in every function that raises NotImplementedError; the TODO comments say what to do.
Check your work with `grade check` (or `pytest`) in this folder.
"""
