"""Reference solution of the Transformers assignment.

Solution code sits between `# BEGIN SOLUTION` and `# END SOLUTION`; `grade build --template`
turns every such block into a `raise NotImplementedError` for the student template, keeping the
`# TODO` comment above it, the signatures, the docstrings and all given code.
"""
