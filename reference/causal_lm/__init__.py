"""Reference solution of the causal language-model homework (seeds 000 and 001).

Solution code sits between `# BEGIN SOLUTION` and `# END SOLUTION`; `grade build --template`
turns every such block into a `raise NotImplementedError` for the student template, keeping the
`# TODO` comment above it, the signatures, the docstrings and all given code.
"""
