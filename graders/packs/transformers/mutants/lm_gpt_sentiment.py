"""Mutants and alternatives of causal_lm.py, gpt.py and sentiment.py (parts causal_lm, gpt, sentiment)."""

from graders.mutants import Alternative, Edit, Mutant

LM, GPT, SENT = "causal_lm.py", "gpt.py", "sentiment.py"

# causal_lm.py
MASK = 'return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)'
LAYER = "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)"
ENCODER = "self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)"
RUN_ENCODER = "return self.transformer_encoder(x, mask=src_mask)"
SCALE = "x = self.embedding(src) * math.sqrt(self.d_model)  # (B, T, d_model)"
CLS_FORWARD = "return self.classifier(hidden[:, -1])"
COUNT = "return sum(p.numel() for p in module.parameters() if p.requires_grad)"
ATTENTION_FORMULA = "attention = (3 * d_model * d_model + 3 * d_model) + (d_model * d_model + d_model)"
FF_FORMULA = "feed_forward = (d_model * d_hid + d_hid) + (d_hid * d_model + d_model)"

LM_HEAD = "self.decoder = nn.Linear(d_model, ntoken)"
LAYER_NORMS = "layer_norms = 2 * (2 * d_model)"
BASE = "base = ntoken * d_model + nlayers * (attention + feed_forward + layer_norms)"
CAUSAL_DEFAULT = "src_mask = generate_square_subsequent_mask(src.size(1)).to(src.device)"

# gpt.py
CLS_LOGITS = "logits = self.classifier_head(x[:, -1, :])  # (B, n_classes)"
CROP = "context = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size :]"
TEMPERATURE = "logits = logits[:, -1, :] / temperature  # (B, vocab_size)"
TOP_K_FILL = 'logits = logits.masked_fill(logits < kth_best, float("-inf"))'
TOP_K = """                kth_best = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1)
                logits = logits.masked_fill(logits < kth_best, float("-inf"))"""
GREEDY = "next_id = logits.argmax(dim=-1, keepdim=True)"
GETITEM = "return ids[:-1], ids[1:]"
COLLATE = """    xs, ys = zip(*batch)
    X = nn.utils.rnn.pad_sequence(xs, batch_first=True, padding_value=PAD_ID)
    Y = nn.utils.rnn.pad_sequence(ys, batch_first=True, padding_value=IGNORE_INDEX)
    return X, Y"""
PAD_Y = "Y = nn.utils.rnn.pad_sequence(ys, batch_first=True, padding_value=IGNORE_INDEX)"
DATASET_CLASS = "class LanguageModelingDataset(Dataset):"
KEEP_SENTENCES = "self.token_ids = [list(ids) for ids in token_ids if len(ids) >= 2]"
PAD_X = "X = nn.utils.rnn.pad_sequence(xs, batch_first=True, padding_value=PAD_ID)"
LM_LOSS = "loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX)"
SAMPLE = "next_id = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)"
LM_HEAD_GPT = "self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)"

# sentiment.py
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


def one(id, part, file, find, replace, diagnosis):
    return Mutant(id, part, (Edit(file, find, replace),), diagnosis)


MUTANTS = [
    # ---- causal_lm
    one("lm_mask_zero_one", "causal_lm", LM, MASK,
        "return torch.triu(torch.ones(sz, sz), diagonal=1)", "square_mask_boolean"),
    one("lm_mask_boolean", "causal_lm", LM, MASK,
        "return torch.triu(torch.ones(sz, sz, dtype=torch.bool), diagonal=1)", "square_mask_boolean"),
    one("lm_mask_diagonal_masked", "causal_lm", LM, MASK,
        'return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=0)', "square_mask_diagonal"),
    one("lm_mask_polarity", "causal_lm", LM, MASK,
        'return torch.tril(torch.full((sz, sz), float("-inf")), diagonal=-1)', "square_mask_polarity"),
    one("lm_no_batch_first", "causal_lm", LM, LAYER,
        "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)", "not_batch_first"),
    one("lm_embedding_not_scaled", "causal_lm", LM, SCALE, "x = self.embedding(src)", "lm_embedding_not_scaled"),
    one("lm_no_positional_encoding", "causal_lm", LM, "x = self.pos_encoder(x)", "pass", "lm_no_positional_encoding"),
    one("lm_no_causal_mask", "causal_lm", LM, RUN_ENCODER,
        "return self.transformer_encoder(x)", "not_causal"),
    one("lm_head_first_position", "causal_lm", LM, CLS_FORWARD,
        "return self.classifier(hidden[:, 0])", "head_wrong_position"),
    one("lm_head_mean_pool", "causal_lm", LM, CLS_FORWARD,
        "return self.classifier(hidden.mean(dim=1))", "head_wrong_position"),
    one("lm_count_all_parameters", "causal_lm", LM, COUNT,
        "return sum(p.numel() for p in module.parameters())", "parameter_count_off"),
    one("lm_count_with_buffers", "causal_lm", LM, COUNT,
        "return sum(t.numel() for t in module.state_dict().values())", "parameter_count_off"),
    one("lm_closed_form_no_biases", "causal_lm", LM, FF_FORMULA,
        "feed_forward = (d_model * d_hid) + (d_hid * d_model)", "closed_form_wrong"),
    one("lm_closed_form_times_nhead", "causal_lm", LM, ATTENTION_FORMULA,
        "attention = nhead * (3 * d_model * d_model + 3 * d_model) + (d_model * d_model + d_model)", "closed_form_wrong"),
    Mutant(
        "lm_template_layer_kept",
        "causal_lm",
        (Edit(LM, LAYER + "\n", LAYER.replace("layer = ", "self.layer = ") + "\n        layer = self.layer\n"),),
        "extra_layer_copy",
    ),
    one("lm_embedding_scaled_by_d_model", "causal_lm", LM, SCALE, "x = self.embedding(src) * self.d_model",
        "lm_embedding_wrong_scale"),
    one("lm_embedding_scaled_by_vocab", "causal_lm", LM, SCALE,
        "x = self.embedding(src) * math.sqrt(self.embedding.num_embeddings)", "lm_embedding_wrong_scale"),
    # seq-first tutorial code moved to batch-first: the mask is sized by the batch
    one("lm_mask_from_batch_size", "causal_lm", LM, CAUSAL_DEFAULT,
        "src_mask = generate_square_subsequent_mask(src.size(0)).to(src.device)", "causal_mask_wrong_size"),
    one("lm_src_mask_ignored", "causal_lm", LM, CAUSAL_DEFAULT.join(["if src_mask is None:\n            ", ""]),
        CAUSAL_DEFAULT, "src_mask_ignored"),
    one("lm_head_no_bias", "causal_lm", LM, LM_HEAD, "self.decoder = nn.Linear(d_model, ntoken, bias=False)",
        "parameter_count_off"),
    one("lm_head_log_softmax", "causal_lm", LM, "return self.decoder(hidden)",
        "return torch.log_softmax(self.decoder(hidden), dim=-1)", "head_returns_probabilities"),
    one("lm_classifier_softmax", "causal_lm", LM, CLS_FORWARD,
        "return torch.softmax(self.classifier(hidden[:, -1]), dim=-1)", "head_returns_probabilities"),
    one("lm_count_tensors", "causal_lm", LM, COUNT, "return len([p for p in module.parameters() if p.requires_grad])",
        "parameter_count_off"),
    one("lm_shared_layers", "causal_lm", LM, ENCODER,
        ENCODER + "\n        self.transformer_encoder.layers = nn.ModuleList([layer] * nlayers)", "parameter_count_off"),
    one("lm_closed_form_no_layer_norm", "causal_lm", LM, LAYER_NORMS, "layer_norms = 0", "closed_form_wrong"),
    one("lm_closed_form_no_out_proj", "causal_lm", LM, ATTENTION_FORMULA,
        "attention = 3 * d_model * d_model + 3 * d_model", "closed_form_wrong"),
    one("lm_closed_form_counts_positional_table", "causal_lm", LM, BASE, BASE + " + 5000 * d_model",
        "closed_form_wrong"),
    one("lm_closed_form_lm_head_no_bias", "causal_lm", LM, '"lm_head": d_model * ntoken + ntoken,',
        '"lm_head": d_model * ntoken,', "closed_form_wrong"),
    # ---- gpt
    one("gpt_forward_no_position_embedding", "gpt", GPT,
        "x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)",
        "x = self.transformer.drop(self.transformer.wte(idx))", "gpt_no_position_embedding"),
    one("gpt_forward_no_final_norm", "gpt", GPT, "x = self.transformer.ln_f(x)", "pass", "gpt_no_final_norm"),
    one("gpt_dataset_not_shifted", "gpt", GPT, GETITEM, "return ids, ids", "dataset_not_shifted"),
    one("gpt_dataset_no_drop_last", "gpt", GPT, GETITEM, "return ids[:-1], ids[:-1]", "dataset_not_shifted"),
    one("gpt_dataset_plain_class", "gpt", GPT, DATASET_CLASS, "class LanguageModelingDataset:", "dataset_wrong_class"),
    one("gpt_collate_pads_y_with_pad", "gpt", GPT, PAD_Y,
        "Y = nn.utils.rnn.pad_sequence(ys, batch_first=True, padding_value=PAD_ID)", "collate_padding_counts"),
    one("gpt_classifier_first_position", "gpt", GPT, CLS_LOGITS,
        "logits = self.classifier_head(x[:, 0, :])", "classifier_not_last"),
    one("gpt_greedy_samples", "gpt", GPT, GREEDY,
        "next_id = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)", "generate_not_greedy"),
    one("gpt_no_crop", "gpt", GPT, CROP, "context = idx", "generate_no_crop"),
    one("gpt_top_k_zero_fill", "gpt", GPT, TOP_K_FILL,
        "logits = logits.masked_fill(logits < kth_best, 0.0)", "top_k_leaks"),
    one("gpt_top_k_off_by_one", "gpt", GPT, "kth_best = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1)",
        "kth_best = torch.topk(logits, top_k + 1).values[:, [-1]]", "top_k_leaks"),
    one("gpt_top_k_keeps_only_best", "gpt", GPT, "kth_best = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1)",
        "kth_best = torch.topk(logits, top_k).values[:, [0]]", "top_k_only_best"),
    one("gpt_temperature_ignored", "gpt", GPT, TEMPERATURE, "logits = logits[:, -1, :]", "temperature_ignored"),
    one("gpt_temperature_multiplied", "gpt", GPT, TEMPERATURE,
        "logits = logits[:, -1, :] * temperature", "temperature_ignored"),
    one("gpt_dataset_off_by_two", "gpt", GPT, GETITEM, "return ids[:-2], ids[2:]", "dataset_not_shifted"),
    one("gpt_dataset_keeps_short", "gpt", GPT, KEEP_SENTENCES, "self.token_ids = [list(ids) for ids in token_ids]",
        "dataset_keeps_short"),
    one("gpt_collate_pads_x_with_ignore_index", "gpt", GPT, PAD_X,
        "X = nn.utils.rnn.pad_sequence(xs, batch_first=True, padding_value=IGNORE_INDEX)", "collate_x_pad_wrong"),
    one("gpt_collate_truncates_to_shortest", "gpt", GPT, COLLATE,
        "    xs, ys = zip(*batch)\n    T = min(len(x) for x in xs)\n"
        "    return torch.stack([x[:T] for x in xs]), torch.stack([y[:T] for y in ys])", "collate_not_padded"),
    one("gpt_loss_default_ignore_index", "gpt", GPT, LM_LOSS,
        "loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))", "loss_ignore_index_wrong"),
    one("gpt_loss_ignores_pad_id", "gpt", GPT, LM_LOSS, LM_LOSS.replace("IGNORE_INDEX)", "PAD_ID)"),
        "loss_ignore_index_wrong"),
    one("gpt_loss_summed", "gpt", GPT, LM_LOSS, LM_LOSS.replace("IGNORE_INDEX)", 'IGNORE_INDEX, reduction="sum")'),
        "loss_not_mean"),
    one("gpt_lm_head_with_bias", "gpt", GPT, LM_HEAD_GPT, "self.lm_head = nn.Linear(config.n_embd, config.vocab_size)",
        "parameter_count_off"),
    one("gpt_classifier_mean", "gpt", GPT, CLS_LOGITS, "logits = self.classifier_head(x.mean(dim=1))",
        "classifier_not_last"),
    one("gpt_generate_first_position", "gpt", GPT, TEMPERATURE, "logits = logits[:, 0, :] / temperature",
        "generate_wrong_position"),
    one("gpt_crop_keeps_first", "gpt", GPT, CROP, "context = idx if idx.size(1) <= self.block_size else idx[:, : self.block_size]",
        "generate_no_crop"),
    Mutant(
        "gpt_temperature_after_softmax",
        "gpt",
        (Edit(GPT, TEMPERATURE, "logits = logits[:, -1, :]"),
         Edit(GPT, SAMPLE, "next_id = torch.multinomial(F.softmax(logits, dim=-1) / temperature, num_samples=1)")),
        "temperature_ignored",
    ),
    one("gpt_top_k_softmax_twice", "gpt", GPT, SAMPLE,
        "next_id = torch.multinomial(F.softmax(F.softmax(logits, dim=-1), dim=-1), num_samples=1)", "top_k_leaks"),
    one("gpt_never_samples", "gpt", GPT, SAMPLE, "next_id = logits.argmax(dim=-1, keepdim=True)", "generate_never_samples"),
    # ---- sentiment
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
            Edit(SENT, "self.out = nn.Linear(hidden_dim * 2 if bidirectional else hidden_dim, output_dim)",
                 "self.out = nn.Linear(hidden_dim, output_dim)"),
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
    one("sent_evaluate_with_grad", "sentiment", SENT, EVAL_NO_GRAD,
        EVAL_NO_GRAD.replace("    with torch.no_grad():\n", "    if True:\n"), "evaluate_grad_enabled"),
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
    one("sent_hyperparameters_string", "sentiment", SENT, '"hidden_dim": 256,', '"hidden_dim": "256",',
        "hyperparameters_invalid"),
]

ALTERNATIVES = [
    Alternative(
        "lm_mask_masked_fill_bool",
        ("causal_lm",),
        (Edit(LM, MASK, "blocked = torch.triu(torch.ones(sz, sz, dtype=torch.bool), diagonal=1)\n"
                        '    return torch.zeros(sz, sz).masked_fill(blocked, float("-inf"))'),),
        "the mask from a boolean triu and masked_fill",
    ),
    Alternative(
        "lm_count_named_parameters",
        ("causal_lm",),
        (Edit(LM, COUNT, "total = 0\n    for _, p in module.named_parameters():\n        if p.requires_grad:\n"
                         "            total += p.numel()\n    return total"),),
        "a loop over named_parameters",
    ),
    Alternative(
        "lm_layer_list",
        ("causal_lm",),
        (Edit(LM, ENCODER, ENCODER + "\n        del layer"),),
        "the template layer is a local, deleted after use",
    ),
    Alternative(
        "gpt_topk_scatter",
        ("gpt",),
        (Edit(GPT, TOP_K, """                values, indices = torch.topk(logits, top_k)
                logits = torch.full_like(logits, float("-inf")).scatter(1, indices, values)"""),),
        "top-k with torch.topk + scatter into a -inf tensor",
    ),
    Alternative(
        "gpt_sample_inverse_cdf",
        ("gpt",),
        (Edit(GPT, "next_id = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)",
              "cdf = F.softmax(logits, dim=-1).cumsum(dim=-1)  # (B, V)\n"
              "                u = torch.rand(cdf.size(0), 1) * cdf[:, -1:]\n"
              "                next_id = (cdf < u).sum(dim=-1, keepdim=True)"),),
        "sampling by inverting the cumulative distribution instead of torch.multinomial",
    ),
    Alternative(
        "gpt_collate_manual_loops",
        ("gpt",),
        (Edit(GPT, COLLATE, """    longest = max(len(x) for x, _ in batch)
    X = torch.full((len(batch), longest), PAD_ID, dtype=torch.long)
    Y = torch.full((len(batch), longest), IGNORE_INDEX, dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        X[i, : len(x)] = x
        Y[i, : len(y)] = y
    return X, Y"""),),
        "padding with explicit loops",
    ),
    Alternative(
        "gpt_crop_always_slice",
        ("gpt",),
        (Edit(GPT, CROP, "context = idx[:, -self.block_size :]"),),
        "the crop as an unconditional slice",
    ),
    Alternative(
        "lm_mask_tutorial",
        ("causal_lm",),
        (Edit(LM, MASK, "mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)\n"
                        '    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))'),),
        "the PyTorch tutorial's mask: a lower-triangular boolean, filled with -inf and 0",
    ),
    Alternative(
        "lm_mask_nn_transformer",
        ("causal_lm",),
        (Edit(LM, MASK, "return nn.Transformer.generate_square_subsequent_mask(sz)"),),
        "torch's own nn.Transformer.generate_square_subsequent_mask",
    ),
    Alternative(
        "lm_mask_ones_times_inf",
        ("causal_lm",),
        (Edit(LM, MASK, 'return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)'),),
        "triu of a matrix of -inf (triu writes the zeros itself)",
    ),
    Alternative(
        "gpt_sample_categorical",
        ("gpt",),
        (Edit(GPT, SAMPLE, "next_id = torch.distributions.Categorical(logits=logits).sample().unsqueeze(-1)"),),
        "sampling with torch.distributions.Categorical on the logits",
    ),
    Alternative(
        "gpt_sample_gumbel_max",
        ("gpt",),
        (Edit(GPT, SAMPLE, "gumbel = -torch.log(-torch.log(torch.rand_like(logits)))\n"
                           "                next_id = (logits + gumbel).argmax(dim=-1, keepdim=True)"),),
        "the Gumbel-max trick: argmax of the logits plus Gumbel noise",
    ),
    Alternative(
        "gpt_top_k_on_probabilities",
        ("gpt",),
        (Edit(GPT, TOP_K, """                probs = F.softmax(logits, dim=-1)
                kth_best = torch.topk(probs, top_k).values[:, [-1]]
                logits = torch.log(probs.masked_fill(probs < kth_best, 0.0))"""),),
        "top-k on the probabilities, zeroing the others (multinomial renormalises)",
    ),
    Alternative(
        "gpt_dataset_pairs_in_init",
        ("gpt",),
        (Edit(GPT, KEEP_SENTENCES, KEEP_SENTENCES + "\n        self.pairs = [(torch.tensor(ids[:-1]), torch.tensor(ids[1:])) "
                                                    "for ids in self.token_ids]"),
         Edit(GPT, "ids = torch.tensor(self.token_ids[i], dtype=torch.long)\n        " + GETITEM, "return self.pairs[i]")),
        "the (X, Y) pairs built once in __init__",
    ),
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
