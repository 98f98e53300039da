"""Mutants and alternatives of sentiment.py (part sentiment)."""

from graders.mutants import Alternative, Edit, Mutant, one_edit as one

SENT = "sentiment.py"
NO_GRAD_BERT = """        with torch.no_grad():
            embedded = self.bert(text, attention_mask=attention_mask)[0]  # (B, T, H_bert)"""
BERT_CALL = "embedded = self.bert(text, attention_mask=attention_mask)[0]  # (B, T, H_bert)"
BIDI = "hidden = torch.cat((hidden[-2], hidden[-1]), dim=1)  # (B, 2 * hidden_dim)"
GRU_RUN = "_, hidden = self.rnn(embedded)  # hidden: (n_layers * n_directions, B, hidden_dim)"
UNI = "hidden = hidden[-1]  # (B, hidden_dim)"
ACCURACY = "return (rounded == y).float().mean()"
ROUND = "rounded = torch.round(torch.sigmoid(preds))"
STEP = """        loss.backward()
        optimizer.step()"""
TRAIN_MODE = """    epoch_loss, epoch_acc = 0.0, 0.0
    model.train()"""
EVAL_MODE = """    epoch_loss, epoch_acc = 0.0, 0.0
    model.eval()"""
GRU_BIDI = "bidirectional=bidirectional,"
LINEAR = "self.out = nn.Linear(hidden_dim * 2 if bidirectional else hidden_dim, output_dim)"
EVAL_ACCURACY = "epoch_acc += binary_accuracy(predictions, batch.label).item()"
OUT = "return self.out(self.dropout(hidden))"
ZERO_GRAD = "        optimizer.zero_grad()\n"
TRAIN_LOSS = "loss = criterion(predictions, batch.label)"
TRAIN_RETURN = """        epoch_acc += acc.item()
    return epoch_loss / len(iterator), epoch_acc / len(iterator)"""
EVAL_RETURN = """            epoch_acc += binary_accuracy(predictions, batch.label).item()
    return epoch_loss / len(iterator), epoch_acc / len(iterator)"""
EVAL_NO_GRAD = """    with torch.no_grad():
        for batch in iterator:
            predictions = _forward_batch(model, batch)
            epoch_loss += criterion(predictions, batch.label).item()
            epoch_acc += binary_accuracy(predictions, batch.label).item()"""


MUTANTS = [
    # the epoch's means weighted by the batches' sizes, not over the batches as the docstring says
    Mutant("sent_epoch_mean_over_examples", "sentiment",
           (Edit(SENT, TRAIN_MODE, TRAIN_MODE + "\n    seen = 0"),
            Edit(SENT, "        epoch_loss += loss.item()\n" + TRAIN_RETURN,
                 "        epoch_loss += loss.item() * len(batch.label)\n        epoch_acc += acc.item() * len(batch.label)\n"
                 "        seen += len(batch.label)\n    return epoch_loss / seen, epoch_acc / seen")),
           "epoch_mean_over_examples"),
    # the predictions squeezed whole: a batch of one becomes a scalar the loss cannot take
    one("sent_train_squeezes_the_batch", "sentiment", SENT,
        "        predictions = _forward_batch(model, batch)\n        loss = criterion(predictions, batch.label)",
        "        predictions = model(batch.text, attention_mask=batch.attention_mask).squeeze()\n"
        "        loss = criterion(predictions, batch.label)", None),
    # the attention mask assumed given: the docstring's default None breaks the model
    one("sent_forward_needs_a_mask", "sentiment", SENT, BERT_CALL,
        "embedded = self.bert(text, attention_mask=attention_mask.long())[0]", None),
    one("sent_bert_not_frozen", "sentiment", SENT, NO_GRAD_BERT,
        "        embedded = self.bert(text, attention_mask=attention_mask)[0]", "bert_not_frozen"),
    one("sent_no_attention_mask", "sentiment", SENT, BERT_CALL,
        "embedded = self.bert(text)[0]", "no_attention_mask"),
    one("sent_hidden_last_only", "sentiment", SENT, BIDI, "hidden = torch.cat((hidden[-1], hidden[-1]), dim=1)",
        "gru_wrong_hidden"),
    one("sent_hidden_first_layer", "sentiment", SENT, BIDI, "hidden = torch.cat((hidden[0], hidden[1]), dim=1)",
        "gru_wrong_hidden"),
    Mutant(
        "sent_hidden_minus_one_small_linear",
        "sentiment",
        (
            Edit(SENT, LINEAR, "self.out = nn.Linear(hidden_dim, output_dim)"),
            Edit(SENT, BIDI, "hidden = hidden[-1]"),
        ),
        "gru_wrong_hidden",
    ),
    Mutant(  # no known mistake: the check must say what differs and name none
        "sent_gru_mean_of_outputs",
        "sentiment",
        (Edit(SENT, GRU_RUN, "output, hidden = self.rnn(embedded)"),
         Edit(SENT, BIDI, "hidden = output.mean(dim=1)"),
         Edit(SENT, UNI, "hidden = output.mean(dim=1)")),
        None,
    ),
    one("sent_accuracy_count", "sentiment", SENT, ACCURACY, "return (rounded == y).float().sum()", "accuracy_not_fraction"),
    one("sent_accuracy_no_sigmoid", "sentiment", SENT, ROUND, "rounded = torch.round(preds)", "accuracy_no_sigmoid"),
    one("sent_train_no_step", "sentiment", SENT, STEP, "        loss.backward()", "train_no_step"),
    one("sent_train_no_train_mode", "sentiment", SENT, TRAIN_MODE, "    epoch_loss, epoch_acc = 0.0, 0.0",
        "train_no_train_mode"),
    one("sent_evaluate_no_eval_mode", "sentiment", SENT, EVAL_MODE, "    epoch_loss, epoch_acc = 0.0, 0.0",
        "evaluate_no_eval_mode"),
    one("sent_gru_not_bidirectional", "sentiment", SENT, GRU_BIDI, "", "gru_not_bidirectional"),
    one("sent_hidden_swapped", "sentiment", SENT, BIDI, "hidden = torch.cat((hidden[-1], hidden[-2]), dim=1)",
        "gru_wrong_hidden"),
    one("sent_dropout_in_eval", "sentiment", SENT, OUT, "return self.out(nn.functional.dropout(hidden, self.dropout.p))",
        "dropout_in_eval"),
    one("sent_sigmoid_output", "sentiment", SENT, OUT, "return torch.sigmoid(self.out(self.dropout(hidden)))",
        "head_returns_probabilities"),
    one("sent_train_no_zero_grad", "sentiment", SENT, ZERO_GRAD, "", "zero_grad_missing"),
    one("sent_train_sigmoid_before_loss", "sentiment", SENT, TRAIN_LOSS,
        "loss = criterion(torch.sigmoid(predictions), batch.label)", "double_sigmoid"),
    one("sent_train_returns_sums", "sentiment", SENT, TRAIN_RETURN,
        "        epoch_acc += acc.item()\n    return epoch_loss, epoch_acc", "epoch_sum_not_mean"),
    one("sent_evaluate_returns_sums", "sentiment", SENT, EVAL_RETURN,
        "            epoch_acc += binary_accuracy(predictions, batch.label).item()\n    return epoch_loss, epoch_acc",
        "epoch_sum_not_mean"),
    # Pairs: each failing the check of a diagnosis above without the behaviour that defines it, so the
    # failure must say what differs and name nothing.
    one("sent_train_step_before_backward", "sentiment", SENT, STEP, "        optimizer.step()\n        loss.backward()",
        None),  # optimizer.step() is called: not train_no_step
    one("sent_accuracy_floor_division", "sentiment", SENT, ACCURACY, "return (rounded == y).sum() // len(y)",
        None),  # the sigmoid is there: not accuracy_no_sigmoid
    one("sent_output_layer_one_direction_wide", "sentiment", SENT, LINEAR, "self.out = nn.Linear(hidden_dim, output_dim)",
        None),  # the summary is both directions' states: not gru_wrong_hidden
    one("sent_evaluate_accuracy_broadcast", "sentiment", SENT, EVAL_ACCURACY,
        "epoch_acc += binary_accuracy(model(batch.text, attention_mask=batch.attention_mask), batch.label).item()",
        "accuracy_broadcast"),  # (B, 1) outputs against (B,) labels: the accuracy of every pair of a batch
    one("sent_hyperparameters_string", "sentiment", SENT, '"hidden_dim": 256,', '"hidden_dim": "256",',
        "hyperparameters_invalid"),
]

ALTERNATIVES = [
    Alternative(
        "sent_summary_from_outputs",
        ("sentiment",),
        (Edit(SENT, GRU_RUN, "output, hidden = self.rnn(embedded)"),
         Edit(SENT, BIDI, "H = self.rnn.hidden_size\n"
                          "            hidden = torch.cat((output[:, -1, :H], output[:, 0, H:]), dim=1)"),
         Edit(SENT, UNI, "hidden = output[:, -1]")),
        "the final states read from the GRU's outputs: forward at the last step, backward at the first",
    ),
    Alternative(
        "sent_zero_grad_after_step",
        ("sentiment",),
        (Edit(SENT, ZERO_GRAD, ""), Edit(SENT, STEP, STEP + "\n        optimizer.zero_grad()")),
        "gradients cleared after each step instead of before each backward",
    ),
    Alternative(
        "sent_frozen_by_requires_grad",
        ("sentiment",),
        (
            Edit(SENT, "        self.bert = bert\n", "        self.bert = bert\n        for p in self.bert.parameters():\n"
                                                       "            p.requires_grad = False\n"),
            Edit(SENT, NO_GRAD_BERT, "        embedded = self.bert(text, attention_mask=attention_mask)[0]"),
        ),
        "BERT frozen by requires_grad=False instead of torch.no_grad()",
    ),
    Alternative(
        "sent_packed_gru",
        ("sentiment",),
        (Edit(SENT, GRU_RUN,
              "lengths = (attention_mask.sum(1) if attention_mask is not None\n"
              "                   else torch.full((text.size(0),), text.size(1))).cpu()\n"
              "        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)\n"
              "        _, hidden = self.rnn(packed)"),),
        "the GRU over the real tokens only (pack_padded_sequence), as in bentrevett's earlier notebooks",
    ),
    Alternative(
        "sent_accuracy_threshold",
        ("sentiment",),
        (Edit(SENT, ROUND, "rounded = (preds > 0).float()"),),
        "preds > 0 is round(sigmoid(preds)) for logits away from 0",
    ),
]
