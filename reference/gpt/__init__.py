"""Reference solution of the minGPT homework (seeds 002 and 003).

Solution code sits between `# BEGIN SOLUTION` and `# END SOLUTION`; `grade build --template`
turns every such block into a `raise NotImplementedError` for the student template, keeping the
`# TODO` comment above it, the signatures, the docstrings and all given code.
"""
