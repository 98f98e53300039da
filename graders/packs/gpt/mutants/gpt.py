"""Mutants and alternatives of gpt.py (part gpt)."""

from graders.mutants import Alternative, Edit, Mutant, one_edit as one

GPT = "gpt.py"
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
EMBED = "x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)"
ATT_MASK = 'att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))'
LM_HEAD_GPT = "self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)"


MUTANTS = [
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
    # at top_k = vocab_size torch.topk has no top_k + 1-th value: greedy generate raises there
    one("gpt_top_k_off_by_one", "gpt", GPT, "kth_best = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1)",
        "kth_best = torch.topk(logits, top_k + 1).values[:, [-1]]", "top_k_leaks", also=("top_k_one_too_many",)),
    one("gpt_top_k_keeps_only_best", "gpt", GPT, "kth_best = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1)",
        "kth_best = torch.topk(logits, top_k).values[:, [0]]", "top_k_only_best"),
    one("gpt_temperature_ignored", "gpt", GPT, TEMPERATURE, "logits = logits[:, -1, :]", "temperature_ignored"),
    one("gpt_temperature_multiplied", "gpt", GPT, TEMPERATURE,
        "logits = logits[:, -1, :] * temperature", "temperature_multiplied"),
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
        "generate_crop_keeps_first"),
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
    # mistakes that raise (or not) depending on the input: the failure names the mistake and the input
    one("gpt_top_k_less_or_equal", "gpt", GPT, TOP_K_FILL,
        'logits = logits.masked_fill(logits <= kth_best, float("-inf"))', "top_k_drops_kth"),
    one("gpt_positions_from_ids", "gpt", GPT, EMBED, EMBED.replace("wpe(pos)", "wpe(idx)"), "gpt_positions_from_ids"),
    one("gpt_attention_mask_not_cropped", "gpt", GPT, ATT_MASK, ATT_MASK.replace("self.bias[:, :, :T, :T]", "self.bias"),
        "attention_mask_not_cropped"),
    Mutant(
        "gpt_classifier_skips_final_norm",
        "gpt",
        (Edit(GPT, "x = self.transformer.ln_f(x)", "hidden, x = x, self.transformer.ln_f(x)"),
         Edit(GPT, CLS_LOGITS, "logits = self.classifier_head(hidden[:, -1, :])")),
        "classifier_skips_final_norm",
    ),
    # an off-by-one in the length filter: a sentence of two tokens gives one (X, Y) pair
    one("gpt_dataset_drops_two_token_sentences", "gpt", GPT, KEEP_SENTENCES, KEEP_SENTENCES.replace(">= 2", "> 2"),
        "dataset_drops_two_tokens"),
    one("gpt_collate_pads_left", "gpt", GPT, COLLATE, """    xs, ys = zip(*batch)
    T = max(len(x) for x in xs)
    X = torch.stack([torch.cat([torch.full((T - len(x),), PAD_ID, dtype=torch.long), x]) for x in xs])
    Y = torch.stack([torch.cat([torch.full((T - len(y),), IGNORE_INDEX, dtype=torch.long), y]) for y in ys])
    return X, Y""", "collate_pads_left"),
    one("gpt_collate_not_batch_first", "gpt", GPT, COLLATE, COLLATE.replace("batch_first=True, ", ""), "collate_not_batch_first"),
    one("gpt_loss_logits_not_flattened", "gpt", GPT, LM_LOSS,
        "loss = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)", "loss_class_dim"),
    one("gpt_argmax_without_keepdim", "gpt", GPT, GREEDY, "next_id = logits.argmax(dim=-1)", "generate_next_token_shape"),
    one("gpt_sample_from_logits", "gpt", GPT, SAMPLE, "next_id = torch.multinomial(logits, num_samples=1)",
        "sample_from_logits"),
    # written from the docstrings for issue 32's false diagnoses: each earns its own name, or none
    Mutant(
        "gpt_generate_no_feedback",
        "gpt",
        (Edit(GPT, "        for _ in range(max_new_tokens):\n            " + CROP,
              "        prompt = idx\n        for _ in range(max_new_tokens):\n            "
              + CROP.replace("idx if idx.size(1)", "prompt if prompt.size(1)").replace("idx[:, -", "prompt[:, -")),),
        "generate_no_feedback",
    ),
    # (at block_size 1 its crop idx[:, -0:] keeps the whole context; no generate_no_crop there, since a
    # model of 3 positions crops)
    one("gpt_crop_too_short", "gpt", GPT, CROP,
        "context = idx if idx.size(1) < self.block_size else idx[:, -self.block_size + 1 :]", "generate_crop_too_short"),
    # top-k by position in the vocabulary, not by value: draws outside the top k that no leak explains
    one("gpt_top_k_by_index", "gpt", GPT, TOP_K_FILL, 'logits[:, top_k:] = float("-inf")', None),
    one("gpt_temperature_squared", "gpt", GPT, TEMPERATURE, "logits = logits[:, -1, :] / temperature**2", None),
    one("gpt_no_attention_dropout", "gpt", GPT, "att = self.attn_dropout(F.softmax(att, dim=-1))",
        "att = F.softmax(att, dim=-1)", "dropout_rate_ignored"),
    # resid_pdrop applied after the attention but not after the MLP: it acts, only not everywhere
    one("gpt_mlp_no_dropout", "gpt", GPT, "self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))",
        "self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))", None),
    one("gpt_no_causal_mask", "gpt", GPT, ATT_MASK, "pass", "not_causal"),
    # the classifier's bias left out: gpt.heads fails without naming lm_head's bias
    one("gpt_classifier_head_without_bias", "gpt", GPT,
        "self.classifier_head = nn.Linear(config.n_embd, config.n_classification_class, bias=True)",
        "self.classifier_head = nn.Linear(config.n_embd, config.n_classification_class, bias=False)", None),
    one("gpt_classifier_loss_summed", "gpt", GPT, "loss = None if targets is None else F.cross_entropy(logits, targets)",
        'loss = None if targets is None else F.cross_entropy(logits, targets, reduction="sum")', "loss_not_mean"),
    # written from the gaps `grade coverage` showed (issue 40): each passed every check before
    # the docstring allows finetune_classify without targets: the loss is None there
    one("gpt_classifier_loss_without_none", "gpt", GPT, "loss = None if targets is None else F.cross_entropy(logits, targets)",
        "loss = F.cross_entropy(logits, targets)", None),
    # one model is called on sequences of several lengths: positions computed on the first call only
    one("gpt_positions_cached", "gpt", GPT, "pos = torch.arange(T, device=idx.device).unsqueeze(0)  # (1, T)",
        'if not hasattr(self, "positions"):  # computed once\n'
        "            self.positions = torch.arange(T, device=idx.device).unsqueeze(0)\n"
        "        pos = self.positions", "forward_keeps_state"),
    # top_k or a temperature taken to mean sampling: greedy decoding is the argmax whatever they are
    one("gpt_greedy_samples_with_top_k", "gpt", GPT, "            if do_sample:\n", "            if do_sample or top_k is not None:\n",
        "generate_not_greedy"),
    one("gpt_greedy_samples_off_temperature", "gpt", GPT, "            if do_sample:\n",
        "            if do_sample or temperature != 1.0:\n", "generate_not_greedy"),
    # the crop decided once, from the prompt's length: a context that grows past block_size while
    # generating (max_new_tokens beyond it) reaches the model uncropped
    Mutant(
        "gpt_crop_decided_by_the_prompt",
        "gpt",
        (Edit(GPT, "        for _ in range(max_new_tokens):\n            " + CROP,
              "        prompt_length = idx.size(1)\n        for _ in range(max_new_tokens):\n            "
              + CROP.replace("idx if idx.size(1)", "idx if prompt_length")),),
        "generate_no_crop",
    ),
    # forward drops the loss: charged where the return value is judged (forward's differential and the
    # loss checks), never in the checks of the logits or of generate (tests/test_gpt_charged_once.py)
    one("gpt_forward_returns_logits_only", "gpt", GPT, "        return logits, loss\n        # END SOLUTION",
        "        return logits\n        # END SOLUTION", "returns_wrong_type"),
    # the attention's two dropouts at each other's rates
    Mutant(
        "gpt_attention_dropout_rates_swapped",
        "gpt",
        (Edit(GPT, "self.attn_dropout = nn.Dropout(config.attn_pdrop)", "self.attn_dropout = nn.Dropout(config.resid_pdrop)"),
         Edit(GPT, "self.resid_dropout = nn.Dropout(config.resid_pdrop)", "self.resid_dropout = nn.Dropout(config.attn_pdrop)")),
        None,
    ),
]

ALTERNATIVES = [
    Alternative(
        "gpt_new_gelu_tanh",
        ("gpt",),
        (Edit(GPT, "class Block(nn.Module):", """class NewGELU(nn.Module):
    \"\"\"karpathy's minGPT GELU: the tanh approximation (as in Google BERT and OpenAI GPT).\"\"\"

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):"""),
         Edit(GPT, "act=nn.GELU(),", "act=NewGELU(),")),
        "minGPT's NewGELU, the tanh approximation of GELU, in the blocks' MLP",
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
        "gpt_generate_calls_forward_method",
        ("gpt",),
        (Edit(GPT, "logits, _ = self(context)", "logits = self.forward(context)[0]"),),
        "generate calling self.forward(context) and indexing its pair, not self(context)",
    ),
    Alternative(
        "gpt_greedy_ignores_temperature_and_top_k",
        ("gpt",),
        (Edit(GPT, """            logits = logits[:, -1, :] / temperature  # (B, vocab_size)
            if top_k is not None:""", """            logits = logits[:, -1, :]  # (B, vocab_size)
            if not do_sample:
                idx = torch.cat((idx, logits.argmax(dim=-1, keepdim=True)), dim=1)
                continue
            logits = logits / temperature
            if top_k is not None:"""),),
        "greedy decoding straight from the logits, the temperature and top_k applied only when sampling",
    ),
    Alternative(
        "gpt_separate_qkv_position_parameter",
        ("gpt",),
        (Edit(GPT, """        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v for all heads
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)""",
              """        self.w1 = nn.Linear(config.n_embd, config.n_embd)  # values
        self.w2 = nn.Linear(config.n_embd, config.n_embd)  # queries
        self.w3 = nn.Linear(config.n_embd, config.n_embd)  # keys
        self.mix = nn.Linear(config.n_embd, config.n_embd)"""),
         Edit(GPT, "q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)", "v, q, k = self.w1(x), self.w2(x), self.w3(x)"),
         Edit(GPT, "return self.resid_dropout(self.c_proj(y))", "return self.resid_dropout(self.mix(y))"),
         Edit(GPT, "                wpe=nn.Embedding(config.block_size, config.n_embd),\n", ""),
         Edit(GPT, "        self.apply(self._init_weights)\n",
              "        self.apply(self._init_weights)\n"
              "        self.positions = nn.Parameter(0.02 * torch.randn(1, config.block_size, config.n_embd))\n"),
         Edit(GPT, EMBED, EMBED.replace("self.transformer.wpe(pos)", "self.positions[:, :T, :]"))),
        "karpathy's 2020 layout: separate query, key and value Linears (named w1, w2, w3, defined value first) "
        "and an output projection of another name, positions as an nn.Parameter (1, block_size, n_embd)",
    ),
]
