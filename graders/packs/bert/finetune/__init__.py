"""The GPU fine-tuning check: the student's BERT + GRU sentiment model trained on IMDB over a frozen encoder.

The encoder is frozen, so it runs once per dataset, not once per step of every submission:

    grader                                          worker (untrusted, sandboxed)
    ------                                          -----------------------------
    data.load_imdb / load_small_sentiment
    data.split_train_valid          (17,500 / 7,500)
    encoder.load_encoder            (offline only)
    cache.build_features            (once; reused)
      or record.read_record         (a job of grade batch: what its batch prepared once)
    training.validate_hyperparameters   <- HYPERPARAMETERS, read as data
    training.epochs_granted             (n_epochs, at most MAX_EPOCHS)
                                                    cache.open_features (read-only memmaps)
                                                    training.Training(student, those hyper-parameters,
                                                        train features + train labels,
                                                        valid and test features, no labels)
    sentiment.expect_frozen_under_a_step           (one step of the model around a tiny BERT;
      BERT's weights read back, compared here)       the harness reports nothing)
    training.drive_training, an epoch a request,    .next_epoch() -> record, validation logits,
      every request alike:                                           test logits
      accuracy on validation; keeps the best
      epoch's test logits itself
      at the end                                    .finish() -> what it saw (JSON)
    training.accuracy / score_accuracy  <- logits
    training.diagnose                   <- what it saw (names mistakes, never scores)

docs/finetune.md says how to set up a GPU runner; benchmarks/bench_finetune.py measures the gain.
"""
