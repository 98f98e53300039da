"""The causal language-model homework (seeds 000 and 001) as an assignment pack: see assignment.toml."""
