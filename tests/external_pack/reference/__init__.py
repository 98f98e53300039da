"""Reference solution of the external example course (docs/authoring.md): RMSNorm and SwiGLU."""
