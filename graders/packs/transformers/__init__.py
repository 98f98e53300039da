"""The Transformers course (seeds 000-004) as one assignment pack: see assignment.toml."""
