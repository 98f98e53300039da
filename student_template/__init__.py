"""Your implementation of the Transformers assignment.

Fill in every function that raises NotImplementedError; the TODO comments say what to do.
Check your work with `grade check` (or `pytest`) in this folder.
"""
