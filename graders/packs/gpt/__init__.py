"""The minGPT homework (seeds 002 and 003) as an assignment pack: see assignment.toml."""
