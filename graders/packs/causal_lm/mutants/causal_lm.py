"""Mutants and alternatives of causal_lm.py (part causal_lm)."""

from graders.mutants import Alternative, Edit, Mutant, one_edit as one

LM = "causal_lm.py"
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
DIV_TERM = "div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log(10000.0) / embed_dim))  # (E/2,)"
CAUSAL_DEFAULT = "src_mask = generate_square_subsequent_mask(src.size(1)).to(src.device)"
COS_COLUMNS = "pe[0, :, 1::2] = torch.cos(position * div_term[: embed_dim // 2])"
POSITIONS = "position = torch.arange(max_len).unsqueeze(1)  # (max_len, 1)"
TABLE = "pe = torch.zeros(1, max_len, embed_dim)"
PE_DROPOUT = "self.dropout = nn.Dropout(dropout)"
CLASSIFIER = "self.classifier = nn.Linear(d_model, n_classes)"


MUTANTS = [
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
        "return sum(p.numel() for p in module.parameters())", "count_includes_frozen"),
    one("lm_count_with_buffers", "causal_lm", LM, COUNT,
        "return sum(t.numel() for t in module.state_dict().values())", "count_from_state_dict"),
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
    # the word-language-model's second argument, a flag (has_mask): a tensor given there raises
    one("lm_src_mask_as_flag", "causal_lm", LM, "if src_mask is None:", "if not src_mask:", "src_mask_not_a_mask"),
    one("lm_src_mask_ignored", "causal_lm", LM, CAUSAL_DEFAULT.join(["if src_mask is None:\n            ", ""]),
        CAUSAL_DEFAULT, "src_mask_ignored"),
    one("lm_head_no_bias", "causal_lm", LM, LM_HEAD, "self.decoder = nn.Linear(d_model, ntoken, bias=False)",
        "parameter_count_off"),
    one("lm_head_log_softmax", "causal_lm", LM, "return self.decoder(hidden)",
        "return torch.log_softmax(self.decoder(hidden), dim=-1)", "head_returns_probabilities"),
    one("lm_classifier_softmax", "causal_lm", LM, CLS_FORWARD,
        "return torch.softmax(self.classifier(hidden[:, -1]), dim=-1)", "head_returns_probabilities"),
    one("lm_count_tensors", "causal_lm", LM, COUNT, "return len([p for p in module.parameters() if p.requires_grad])",
        "count_tensors"),
    one("lm_shared_layers", "causal_lm", LM, ENCODER,
        ENCODER + "\n        self.transformer_encoder.layers = nn.ModuleList([layer] * nlayers)", "layers_shared"),
    one("lm_closed_form_no_layer_norm", "causal_lm", LM, LAYER_NORMS, "layer_norms = 0", "closed_form_wrong"),
    one("lm_closed_form_no_out_proj", "causal_lm", LM, ATTENTION_FORMULA,
        "attention = 3 * d_model * d_model + 3 * d_model", "closed_form_wrong"),
    one("lm_closed_form_counts_positional_table", "causal_lm", LM, BASE, BASE + " + 5000 * d_model",
        "closed_form_wrong"),
    one("lm_closed_form_lm_head_no_bias", "causal_lm", LM, '"lm_head": d_model * ntoken + ntoken,',
        '"lm_head": d_model * ntoken,', "closed_form_wrong"),
    # the forward checks run the student's own pos_encoder: only a check of the table itself sees these
    one("lm_pe_log10", "causal_lm", LM, DIV_TERM,
        "div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log10(10000.0) / embed_dim))", "pe_log_base"),
    one("lm_pe_exponent_i", "causal_lm", LM, DIV_TERM,
        "div_term = torch.exp(torch.arange(0, (embed_dim + 1) // 2) * (-math.log(10000.0) / embed_dim))",
        "pe_wrong_exponent"),
    # state_dict() tensors are detached: requires_grad is False for every one of them
    one("lm_count_state_dict_requires_grad", "causal_lm", LM, COUNT,
        "return sum(t.numel() for t in module.state_dict().values() if t.requires_grad)", "count_state_dict_requires_grad"),
    # the tutorial's sequence-first habits in batch-first code
    one("lm_pe_sliced_by_batch", "causal_lm", LM, "x = x + self.pe[:, : x.size(1)]", "x = x + self.pe[:, : x.size(0)]",
        "pe_sliced_by_batch"),
    one("lm_classifier_last_batch_row", "causal_lm", LM, CLS_FORWARD, "return self.classifier(hidden[-1])",
        "head_reads_batch_axis"),
    # sizes in the wrong order: raises on most inputs
    one("lm_head_linear_swapped", "causal_lm", LM, LM_HEAD, "self.decoder = nn.Linear(ntoken, d_model)", "layer_sizes_swapped"),
    one("lm_embedding_sizes_swapped", "causal_lm", LM, "self.embedding = nn.Embedding(ntoken, d_model)",
        "self.embedding = nn.Embedding(d_model, ntoken)", "layer_sizes_swapped"),
    # written from the docstrings for issue 32: counts other than of elements, dropout the docstring lists
    Mutant(
        "lm_pe_sin_cos_swapped",
        "causal_lm",
        (Edit(LM, "pe[0, :, 0::2] = torch.sin(position * div_term)", "pe[0, :, 0::2] = torch.cos(position * div_term)"),
         Edit(LM, "pe[0, :, 1::2] = torch.cos(position * div_term[: embed_dim // 2])",
              "pe[0, :, 1::2] = torch.sin(position * div_term[: embed_dim // 2])")),
        "pe_sin_cos_swapped",
    ),
    # the three counts as a tuple where the docstring asks for a dict
    one("lm_closed_form_returns_tuple", "causal_lm", LM, """    return {
        "base": base,
        "lm_head": d_model * ntoken + ntoken,
        "classification_head": d_model * n_classes + n_classes,
    }""", "    return base, d_model * ntoken + ntoken, d_model * n_classes + n_classes", "returns_wrong_type"),
    one("lm_count_all_tensors", "causal_lm", LM, COUNT, "return len(list(module.parameters()))", "count_tensors"),
    # counts the frozen parameters instead of the trainable ones: no known mistake gives its counts
    one("lm_count_frozen_only", "causal_lm", LM, COUNT, "return sum(p.numel() for p in module.parameters() if not p.requires_grad)",
        None),
    one("lm_pe_no_dropout", "causal_lm", LM, "        x = x + self.pe[:, : x.size(1)]\n        return self.dropout(x)",
        "        return x + self.pe[:, : x.size(1)]", "pe_dropout_missing"),
    one("lm_pe_dropout_before_add", "causal_lm", LM, "        x = x + self.pe[:, : x.size(1)]\n        return self.dropout(x)",
        "        return self.dropout(x) + self.pe[:, : x.size(1)]", "pe_dropout_before_add"),
    one("lm_dropout_not_passed_to_pe", "causal_lm", LM, "self.pos_encoder = PositionalEncoding(d_model, dropout)",
        "self.pos_encoder = PositionalEncoding(d_model)", "lm_dropout_not_passed"),
    one("lm_dropout_not_passed_to_layers", "causal_lm", LM, LAYER,
        "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, batch_first=True)", "lm_dropout_not_passed"),
    # issue 40, from the gaps of the argument space: what only an odd width, a max_len above 5000,
    # another dtype, the layers compared with the reference's, two shapes on one instance, a rate
    # between 0 and 1 or a weight two layers share shows
    one("lm_pe_tutorial_cos_odd_dim", "causal_lm", LM, COS_COLUMNS, "pe[0, :, 1::2] = torch.cos(position * div_term)",
        "pe_odd_embed_dim"),
    Mutant("lm_pe_table_5000_rows", "causal_lm",
           (Edit(LM, POSITIONS, "position = torch.arange(5000).unsqueeze(1)"),
            Edit(LM, TABLE, "pe = torch.zeros(1, 5000, embed_dim)")), "pe_max_len_ignored"),
    one("lm_pe_table_float64", "causal_lm", LM, TABLE, "pe = torch.zeros(1, max_len, embed_dim, dtype=torch.float64)",
        "pe_table_float64"),
    one("lm_pe_dropout_keep_rate", "causal_lm", LM, PE_DROPOUT, "self.dropout = nn.Dropout(1 - dropout)",
        "pe_dropout_keep_rate"),
    one("lm_layers_one_head", "causal_lm", LM, LAYER,
        "layer = nn.TransformerEncoderLayer(d_model, 1, d_hid, dropout, batch_first=True)", "lm_layers_wrong_nhead"),
    one("lm_layers_norm_first", "causal_lm", LM, LAYER,
        "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True, norm_first=True)",
        "lm_layers_norm_first"),
    one("lm_layers_gelu", "causal_lm", LM, LAYER,
        'layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, activation="gelu", batch_first=True)',
        "lm_layers_gelu"),
    # an index slip in a loop over the layers: the first one runs nlayers times, the count is right
    one("lm_forward_reuses_first_layer", "causal_lm", LM, RUN_ENCODER,
        "for _ in self.transformer_encoder.layers:\n"
        "            x = self.transformer_encoder.layers[0](x, src_mask=src_mask)\n"
        "        return x", "lm_layers_not_all_run"),
    # the older PyTorch tutorial's cached mask without its size test: right on the first length only
    Mutant("lm_causal_mask_cached", "causal_lm",
           (Edit(LM, "        self.d_model = d_model\n", "        self.d_model = d_model\n        self.causal_mask = None\n"),
            Edit(LM, CAUSAL_DEFAULT, "if self.causal_mask is None:\n"
                                     "                self.causal_mask = generate_square_subsequent_mask(src.size(1))\n"
                                     "            src_mask = self.causal_mask")),
           "lm_instance_keeps_state"),
    one("lm_classifier_no_bias", "causal_lm", LM, CLASSIFIER, "self.classifier = nn.Linear(d_model, n_classes, bias=False)",
        "parameter_count_off"),
    # a parameter of two sub-modules counted in each: no known mistake gives its counts
    one("lm_count_per_module", "causal_lm", LM, COUNT,
        "return sum(p.numel() for m in module.modules() for p in m.parameters(recurse=False) if p.requires_grad)",
        None),
]

ALTERNATIVES = [
    Alternative(
        "lm_word_language_model_names",
        ("causal_lm",),
        (Edit(LM, "self.embedding = nn.Embedding(ntoken, d_model)", "self.encoder = nn.Embedding(ntoken, d_model)"),
         Edit(LM, "self.pos_encoder = PositionalEncoding(d_model, dropout)", "self.pos_enc = PositionalEncoding(d_model, dropout)"),
         Edit(LM, ENCODER, ENCODER.replace("self.transformer_encoder", "self.transformer")),
         Edit(LM, SCALE, SCALE.replace("self.embedding(src)", "self.encoder(src)")),
         Edit(LM, "x = self.pos_encoder(x)", "x = self.pos_enc(x)"),
         Edit(LM, RUN_ENCODER, RUN_ENCODER.replace("self.transformer_encoder", "self.transformer"))),
        "sub-modules named otherwise than in the template (the embedding called `encoder`, as in PyTorch's "
        "word-language-model example)",
    ),
    Alternative(
        "lm_pe_tutorial_odd_cos_sliced",
        ("causal_lm",),
        (Edit(LM, COS_COLUMNS, "pe[0, :, 1::2] = torch.cos(position * div_term)[:, : embed_dim // 2]"),),
        "the PyTorch tutorial's positional table with the last cos column sliced off for an odd embed_dim",
    ),
    Alternative(
        "lm_pe_two_dimensional_table",
        ("causal_lm",),
        (Edit(LM, TABLE, "pe = torch.zeros(max_len, embed_dim)"),
         Edit(LM, "pe[0, :, 0::2] = torch.sin(position * div_term)", "pe[:, 0::2] = torch.sin(position * div_term)"),
         Edit(LM, COS_COLUMNS, "pe[:, 1::2] = torch.cos(position * div_term[: embed_dim // 2])"),
         Edit(LM, "x = x + self.pe[:, : x.size(1)]", "x = x + self.pe[: x.size(1)]")),
        "a (max_len, embed_dim) table, broadcast over the batch",
    ),
    Alternative(
        "lm_encoder_is_causal_hint",
        ("causal_lm",),
        (Edit(LM, "        if src_mask is None:\n            " + CAUSAL_DEFAULT,
              "        causal = src_mask is None\n        if causal:\n            " + CAUSAL_DEFAULT),
         Edit(LM, RUN_ENCODER, "return self.transformer_encoder(x, mask=src_mask, is_causal=causal)")),
        "torch's is_causal hint given where the model built the causal mask itself",
    ),
    Alternative(
        "lm_closed_form_factored",
        ("causal_lm",),
        (Edit(LM, BASE, "base = ntoken * d_model + nlayers * (4 * d_model**2 + 2 * d_model * d_hid + 9 * d_model + d_hid)"),),
        "the closed form of one layer factored: 4d^2 + 2 d d_hid + 9d + d_hid",
    ),
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
]
