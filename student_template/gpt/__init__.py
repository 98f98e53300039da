"""Your implementation of the assignment: minGPT: data, heads and generation.

Fill in every function that raises NotImplementedError; the TODO comments say what to do.
Check your work with `grade check` (or `pytest`) in this folder.
"""
