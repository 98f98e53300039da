"""Your implementation of the assignment: Transformers: attention, BERT, a causal LM and minGPT.

Fill in every function that raises NotImplementedError; the TODO comments say what to do.
Check your work with `grade check` (or `pytest`) in this folder.
"""
