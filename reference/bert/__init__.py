"""Reference solution of the BERT homework (seed 004): attention, the encoder, BERT and its
pre-training, and the frozen-BERT sentiment classifier.

Solution code sits between `# BEGIN SOLUTION` and `# END SOLUTION`; `grade build --template`
turns every such block into a `raise NotImplementedError` for the student template, keeping the
`# TODO` comment above it, the signatures, the docstrings and all given code.
"""
