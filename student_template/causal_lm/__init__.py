"""Your implementation of the assignment: A causal language model on nn.TransformerEncoder.

Fill in every function that raises NotImplementedError; the TODO comments say what to do.
Check your work with `grade check` (or `pytest`) in this folder.
"""
