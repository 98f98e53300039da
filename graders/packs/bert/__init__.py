"""The BERT homework (seed 004): attention, the encoder, BERT and its pre-training, the frozen-BERT sentiment classifier and its fine-tuning, as an assignment pack: see assignment.toml."""
