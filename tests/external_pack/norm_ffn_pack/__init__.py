"""An assignment pack outside the grader's repository: RMSNorm and SwiGLU (docs/authoring.md)."""
