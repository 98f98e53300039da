"""The GPU fine-tuning check: the student's BERT + GRU sentiment model trained on IMDB over a frozen encoder.

The encoder is frozen, so it runs once per dataset, not once per step of every submission:

    grader                                          worker (untrusted, sandboxed)
    ------                                          -----------------------------
    data.load_imdb / load_small_sentiment
    data.split_train_valid          (17,500 / 7,500)
    encoder.load_encoder            (offline only)
    cache.build_features            (once; reused)  cache.open_features (read-only memmaps)
                                                    training.Training(student, HYPERPARAMETERS,
                                                        train features + train labels,
                                                        valid and test features, no labels)
    training.drive_training, an epoch a request:    .next_epoch() -> record, validation logits
      accuracy on validation; the best so far?      .keep_latest()   (a copy of its weights)
      at the end                                    .finish() -> test logits of the kept weights
                                                       + what it saw (JSON)
    training.accuracy / score_accuracy  <- logits
    training.diagnose                   <- what it saw
    training.check_frozen (in the worker, with the real encoder: the stand-in cannot show it)

docs/finetune.md says how to set up a GPU runner; benchmarks/bench_finetune.py measures the gain.
"""
