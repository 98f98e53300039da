"""Mutants and alternatives of encoder.py and bert.py (parts positional_encoding, block, bert, pretraining)."""

from graders.mutants import Alternative, Edit, Mutant, one_edit as one

ENC = "encoder.py"
BERT = "bert.py"

# encoder.py
DIV_TERM = "div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log(10000.0) / embed_dim))  # (E/2,)"
PE_SIN = "pe[0, :, 0::2] = torch.sin(position * div_term)"
PE_COS = "pe[0, :, 1::2] = torch.cos(position * div_term[: embed_dim // 2])"
POSITION = "position = torch.arange(max_len).unsqueeze(1)  # (max_len, 1)"
PE_BUFFER = 'self.register_buffer("pe", pe)'
PE_ADD = "x = x + self.pe[:, : x.size(1)]"
PE_DROP = "return self.dropout(x)\n"
FFN_IN = "nn.Linear(embed_dim, 4 * embed_dim),"
FFN_OUT = "nn.Linear(4 * embed_dim, embed_dim),"
ATTEND = "attended = self.self_attn(embedding, mask=mask)"
NORM1 = "embedding = self.norm1(embedding + self.dropout(attended))"
NORM2 = "embedding = self.norm2(embedding + self.linear_net(embedding))"
BLOCK_RETURN = "return embedding, mask\n"

# bert.py
EMBED = "self.embed = nn.Embedding(vocab_size + 1, embed_dim)"
NET_CALL = "x, _ = self.net((x, mask))"
LAYERS = "*[TransformerBlock(embed_dim, n_heads, attn_drop_rate, layer_drop_rate) for _ in range(n_layers)]"
SELECT = "selected = (torch.rand(text.shape, device=text.device) < mask_rate) & (text != pad_ind)  # (B, T) bool"
LABELS = "mask_labels = torch.where(selected, text, torch.full_like(text, IGNORE_INDEX))"
ONLY_MASK = "if only_mask:"
CATEGORY = "category = torch.rand(text.shape, device=text.device)  # < 0.8: <mask>, [0.8, 0.9): random, >= 0.9: unchanged"
TO_RANDOM = "to_random = selected & (category >= 0.8) & (category < 0.9)"
RANDOM_TOKENS = "random_tokens = torch.randint(vocab_size, text.shape, dtype=text.dtype, device=text.device)"
MASK_RETURN = "    masked_text[to_random] = random_tokens[to_random]\n    return masked_text, mask_labels\n"
LOSS = "loss = F.cross_entropy(logits.reshape(-1, vocab_size), mask_labels.flatten(), ignore_index=IGNORE_INDEX)"
BACKWARD = "    loss.backward()\n"
STEP = "    optimizer.step()\n"


MUTANTS = [
    # positional encoding
    Mutant(
        "pe_halves_concatenated",
        "positional_encoding",
        (
            Edit(ENC, PE_SIN, "pe[0, :, : embed_dim // 2] = torch.sin(position * div_term)"),
            Edit(ENC, PE_COS, "pe[0, :, embed_dim // 2 :] = torch.cos(position * div_term[: embed_dim // 2])"),
        ),
        "pe_not_interleaved",
    ),
    one("pe_exponent_i_over_d", "positional_encoding", ENC, DIV_TERM,
        "div_term = torch.exp(torch.arange(0, embed_dim // 2) * (-math.log(10000.0) / embed_dim))", "pe_wrong_exponent"),
    one("pe_tutorial_cos_odd_dim", "positional_encoding", ENC, PE_COS,  # the PyTorch tutorial's table
        "pe[0, :, 1::2] = torch.cos(position * div_term)", "pe_odd_embed_dim"),
    one("pe_is_parameter", "positional_encoding", ENC, PE_BUFFER, "self.pe = nn.Parameter(pe)", "pe_parameter"),
    # the uvadlc tutorial's table: a buffer left out of the state_dict the docstring says it is saved in
    one("pe_not_persistent", "positional_encoding", ENC, PE_BUFFER, 'self.register_buffer("pe", pe, persistent=False)',
        "pe_not_persistent"),
    Mutant(
        "pe_along_batch_axis",  # the PyTorch tutorial's (max_len, 1, E) table, indexed by x.size(0)
        "positional_encoding",
        (Edit(ENC, PE_BUFFER, 'self.register_buffer("pe", pe.transpose(0, 1))'),
         Edit(ENC, PE_ADD, "x = x + self.pe[: x.size(0)]")),
        "pe_batch_axis",
    ),
    one("pe_no_dropout", "positional_encoding", ENC, PE_DROP, "return x\n", "pe_no_dropout"),
    Mutant(
        "pe_sin_cos_swapped",
        "positional_encoding",
        (Edit(ENC, PE_SIN, "pe[0, :, 0::2] = torch.cos(position * div_term)"),
         Edit(ENC, PE_COS, "pe[0, :, 1::2] = torch.sin(position * div_term[: embed_dim // 2])")),
        "pe_not_interleaved",
    ),
    one("pe_positions_from_one", "positional_encoding", ENC, POSITION,
        "position = torch.arange(1, max_len + 1).unsqueeze(1)", "pe_positions_shifted"),
    one("pe_input_scaled_by_sqrt_d", "positional_encoding", ENC, PE_ADD,  # the causal LM's scaling, misplaced
        "x = x * math.sqrt(x.size(-1)) + self.pe[:, : x.size(1)]", "pe_input_scaled"),
    one("pe_log_base_1000", "positional_encoding", ENC, DIV_TERM,
        "div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log(1000.0) / embed_dim))", "pe_wrong_base"),
    Mutant(
        "pe_dropout_before_add",
        "positional_encoding",
        (Edit(ENC, PE_ADD, "x = self.dropout(x) + self.pe[:, : x.size(1)]"), Edit(ENC, PE_DROP, "return x\n")),
        "pe_dropout_before_add",
    ),
    one("pe_plain_attribute", "positional_encoding", ENC, PE_BUFFER, "self.pe = pe", "pe_not_registered"),
    # the rate ignored: the template's nn.Dropout(dropout) replaced by the tutorials' fixed 0.1
    one("pe_dropout_rate_fixed", "positional_encoding", ENC, "self.dropout = nn.Dropout(dropout)",
        "self.dropout = nn.Dropout(0.1)", "pe_dropout_rate_ignored"),
    # the table sliced to the first input's length once, and kept: a second length no longer fits
    one("pe_sliced_for_the_first_length", "positional_encoding", ENC, PE_ADD,
        "self.pe = self.pe[:, : x.size(1)] if self.pe.size(1) > x.size(1) else self.pe\n        x = x + self.pe",
        None),
    # transformer block: the rates where the docstring puts them
    Mutant("block_rates_swapped", "block",
           (Edit(ENC, "self.self_attn = MultiHeadAttention(embed_dim, n_heads, attn_drop_rate)",
                 "self.self_attn = MultiHeadAttention(embed_dim, n_heads, layer_drop_rate)"),
            Edit(ENC, "            nn.Dropout(layer_drop_rate),\n", "            nn.Dropout(attn_drop_rate),\n"),
            Edit(ENC, "self.dropout = nn.Dropout(layer_drop_rate)", "self.dropout = nn.Dropout(attn_drop_rate)")),
           "block_rate_misplaced"),
    one("block_attention_without_its_rate", "block", ENC, "self.self_attn = MultiHeadAttention(embed_dim, n_heads, attn_drop_rate)",
        "self.self_attn = MultiHeadAttention(embed_dim, n_heads, 0.0)", "block_attention_rate_not_passed"),
    # the feed-forward's residual taken from the block's input (x), not from h
    Mutant("block_ffn_residual_from_input", "block",
           (Edit(ENC, NORM1, "h = self.norm1(embedding + self.dropout(attended))"),
            Edit(ENC, NORM2, "embedding = self.norm2(embedding + self.linear_net(h))")), "ffn_residual_from_input"),
    one("block_dropout_at_the_attention_rate", "block", ENC, "self.dropout = nn.Dropout(layer_drop_rate)",
        "self.dropout = nn.Dropout(attn_drop_rate)", "block_rate_misplaced"),
    # transformer block, its wiring
    Mutant(
        "block_pre_ln",
        "block",
        (Edit(ENC, ATTEND, "attended = self.self_attn(self.norm1(embedding), mask=mask)"),
         Edit(ENC, NORM1, "embedding = embedding + self.dropout(attended)"),
         Edit(ENC, NORM2, "embedding = embedding + self.linear_net(self.norm2(embedding))")),
        "pre_ln",
    ),
    one("block_no_attention_residual", "block", ENC, NORM1, "embedding = self.norm1(self.dropout(attended))",
        "missing_residual"),
    one("block_no_ffn_residual", "block", ENC, NORM2, "embedding = self.norm2(self.linear_net(embedding))",
        "missing_residual"),
    one("block_returns_embedding_only", "block", ENC, BLOCK_RETURN, "return embedding\n", "block_drops_mask"),
    one("block_attention_without_mask", "block", ENC, ATTEND, "attended = self.self_attn(embedding)",
        "block_ignores_mask"),
    one("block_returns_no_mask", "block", ENC, BLOCK_RETURN, "return embedding, None\n", "block_drops_mask"),
    one("block_no_attention_dropout", "block", ENC, NORM1, "embedding = self.norm1(embedding + attended)",
        "block_no_dropout"),
    one("block_relu", "block", ENC, "nn.GELU(),", "nn.ReLU(),", "ffn_activation"),
    one("block_no_activation", "block", ENC, "            nn.GELU(),\n", "", "ffn_activation"),
    one("block_one_shared_norm", "block", ENC, "self.norm2 = nn.LayerNorm(embed_dim)", "self.norm2 = self.norm1",
        "block_shared_norm"),
    Mutant(
        "block_residual_outside_norm",
        "block",
        (Edit(ENC, NORM1, "embedding = embedding + self.norm1(self.dropout(attended))"),
         Edit(ENC, NORM2, "embedding = embedding + self.norm2(self.linear_net(embedding))")),
        "residual_outside_norm",
    ),
    # BERT model
    one("bert_embedding_vocab_rows", "bert", BERT, EMBED, "self.embed = nn.Embedding(vocab_size, embed_dim)",
        "bert_no_mask_embedding"),
    # mistakes seen only with several layers
    one("bert_one_block", "bert", BERT, LAYERS, "TransformerBlock(embed_dim, n_heads, attn_drop_rate, layer_drop_rate)",
        "bert_layers_ignored"),
    one("bert_block_repeated", "bert", BERT, LAYERS,
        "*[TransformerBlock(embed_dim, n_heads, attn_drop_rate, layer_drop_rate)] * n_layers", "bert_layers_shared"),
    one("bert_mask_not_passed", "bert", BERT, NET_CALL, "x, _ = self.net((x, None))", "bert_mask_not_passed"),
    one("bert_no_positional_encoding", "bert", BERT, "x = self.pos_embed(self.embed(batch_text))  # (B, T, E)",
        "x = self.embed(batch_text)", "bert_no_positional_encoding"),
    one("bert_output_over_vocab_plus_one", "bert", BERT, "self.mask_pred = nn.Linear(embed_dim, vocab_size)",
        "self.mask_pred = nn.Linear(embed_dim, vocab_size + 1)", "bert_output_size"),
    one("bert_no_output_layer", "bert", BERT, "return self.mask_pred(x)  # (B, T, V)", "return x", "bert_output_size"),
    one("bert_mask_inverted", "bert", BERT, NET_CALL,  # Hugging Face's attention_mask convention (1 = attend)
        "x, _ = self.net((x, None if mask is None else mask == 0))", "mask_inverted"),
    # masking
    one("mlm_selects_padding", "pretraining", BERT, SELECT, "selected = torch.rand(text.shape) < mask_rate",
        "mlm_selects_padding"),
    one("mlm_random_bernoulli_of_remainder", "pretraining", BERT, TO_RANDOM,  # transformers#21803
        "to_random = selected & (category >= 0.8) & (torch.rand(text.shape) < 0.1)", "mlm_random_share_too_low"),
    one("mlm_split_80_20_0", "pretraining", BERT, TO_RANDOM, "to_random = selected & (category >= 0.8)",
        "mlm_no_unchanged_share"),
    one("mlm_labels_minus_one", "pretraining", BERT, LABELS,  # the NAACL tutorial's -1
        "mask_labels = torch.where(selected, text, torch.full_like(text, -1))", "mlm_labels_not_ignored"),
    one("mlm_labels_hold_mask", "pretraining", BERT, MASK_RETURN,
        "    masked_text[to_random] = random_tokens[to_random]\n"
        "    mask_labels = torch.where(selected, masked_text, torch.full_like(text, IGNORE_INDEX))\n"
        "    return masked_text, mask_labels\n", "mlm_labels_hold_mask"),
    # a public implementation's labels: 0 where -100 belongs; charged in pretraining.labels alone,
    # the selection and split read from what the function changed and labelled
    one("mlm_labels_zero", "pretraining", BERT, LABELS,
        "mask_labels = torch.where(selected, text, torch.zeros_like(text))", "mlm_labels_not_ignored"),
    # labels copied from the text and never set to -100: no label tells the selection apart
    one("mlm_labels_everywhere", "pretraining", BERT, LABELS, "mask_labels = text.clone()", "mlm_labels_not_ignored"),
    # replacements drawn from [0, mask_token_ind]: <mask> itself can be drawn
    one("mlm_random_up_to_mask_id", "pretraining", BERT, RANDOM_TOKENS,
        "random_tokens = torch.randint(mask_token_ind + 1, text.shape, dtype=text.dtype)", "mlm_random_out_of_range"),
    one("mlm_random_out_of_range", "pretraining", BERT, RANDOM_TOKENS,
        "random_tokens = torch.randint(2 * vocab_size, text.shape, dtype=text.dtype)", "mlm_random_out_of_range"),
    one("mlm_random_avoids_padding_id", "pretraining", BERT, RANDOM_TOKENS,
        "random_tokens = torch.randint(1, vocab_size, text.shape, dtype=text.dtype)", "mlm_random_not_uniform"),
    one(  # seed 004's student: the first 80% of the selected positions in row-major order get <mask>
        "mlm_category_by_order", "pretraining", BERT, CATEGORY,
        "order = selected.flatten().cumsum(0).reshape(text.shape) - 1\n"
        "    category = order.float() / max(int(selected.sum()), 1)",
        "mlm_order_dependent"),
    one("mlm_only_mask_ignored", "pretraining", BERT, ONLY_MASK, "if False:", "mlm_only_mask_ignored"),
    # only_mask=True masks only some of the selection: only_mask fails, and it is not "ignored"
    one("mlm_only_mask_partial", "pretraining", BERT, "        masked_text[selected] = mask_token_ind\n",
        "        masked_text[selected & (torch.rand(text.shape) < 0.8)] = mask_token_ind\n", None),
    # <mask> at every selected token, as only_mask=True: charged in the masking checks only, never
    # in pretrain_step's (tests/test_bert_charged_once.py)
    one("mlm_always_mask", "pretraining", BERT, ONLY_MASK, "if True:", "mlm_always_mask"),
    one("mlm_rate_hardcoded", "pretraining", BERT, SELECT,
        "selected = (torch.rand(text.shape) < 0.15) & (text != pad_ind)", "mlm_wrong_rate"),
    one("mlm_thresholds_swapped", "pretraining", BERT, "to_mask = selected & (category < 0.8)",
        "to_mask = selected & (category >= 0.8)", "mlm_wrong_split"),
    one("mlm_mask_id_is_vocab_size", "pretraining", BERT, "masked_text[to_mask] = mask_token_ind",
        "masked_text[to_mask] = vocab_size", "mlm_wrong_mask_id"),
    # the pre-training step
    # BertModel's rates and depth where the docstring puts them
    one("bert_block_rates_swapped", "bert", BERT, LAYERS,
        "*[TransformerBlock(embed_dim, n_heads, layer_drop_rate, attn_drop_rate) for _ in range(n_layers)]",
        "bert_rates_misplaced"),
    one("bert_positions_drop_at_attention_rate", "bert", BERT, "self.pos_embed = PositionalEncoding(embed_dim, layer_drop_rate)",
        "self.pos_embed = PositionalEncoding(embed_dim, attn_drop_rate)", "bert_rates_misplaced"),
    # n_layers blocks built (the count is right) but only the first run
    one("bert_runs_the_first_block_only", "bert", BERT, NET_CALL, "x, _ = self.net[0]((x, mask))", None),
    one("pretrain_no_zero_grad", "pretraining", BERT, "    optimizer.zero_grad()\n", "", "zero_grad_missing"),
    one("pretrain_loss_summed", "pretraining", BERT, LOSS,
        'loss = F.cross_entropy(logits.reshape(-1, vocab_size), mask_labels.flatten(), reduction="sum")',
        "pretrain_loss_not_averaged"),
    one("pretrain_masks_for_evaluation", "pretraining", BERT,
        "masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, pad_ind, mask_rate)",
        "masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, pad_ind, mask_rate, only_mask=True)",
        "pretrain_only_mask"),
    one("pretrain_no_backward", "pretraining", BERT, BACKWARD, "", "pretrain_no_backward"),  # seed 004's student
    one("pretrain_no_padding_mask", "pretraining", BERT, "logits = model(masked_text, pad_mask)  # (B, T, V)",
        "logits = model(masked_text)", "pretrain_no_padding_mask"),
    one("pretrain_no_step", "pretraining", BERT, STEP, "", "pretrain_no_step"),
    # HF's collator masks its inputs in place (fixtures/wild/bert/hf_mlm_masking): seen in the step's padding mask
    one("mlm_masks_in_place", "pretraining", BERT, "    masked_text = text.clone()\n", "    masked_text = text\n",
        "mlm_writes_into_text"),
    # the step's own arguments dropped: the defaults of mask_inputs are used instead of the call's
    one("pretrain_ignores_mask_rate", "pretraining", BERT,
        "masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, pad_ind, mask_rate)",
        "masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, pad_ind)", "pretrain_arguments_dropped"),
    Mutant("pretrain_ignores_pad_ind", "pretraining",
           (Edit(BERT, "masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, pad_ind, mask_rate)",
                 "masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, mask_rate=mask_rate)"),
            Edit(BERT, "pad_mask = text == pad_ind  # (B, T)", "pad_mask = text == 0")), "pretrain_arguments_dropped"),
    # a padding mask of the wrong polarity is passed: not "no padding mask"
    one("pretrain_padding_mask_inverted", "pretraining", BERT, "pad_mask = text == pad_ind  # (B, T)",
        "pad_mask = text != pad_ind", None),
    one("pretrain_loss_on_all_tokens", "pretraining", BERT, LOSS,
        "loss = F.cross_entropy(logits.reshape(-1, vocab_size), text.flatten())", "pretrain_loss_on_all_tokens"),
    # a third Linear in linear_net: the docstring's Linear, GELU, Linear, Dropout is said
    one("block_ffn_three_layers", "block", ENC, FFN_OUT,
        "nn.Linear(4 * embed_dim, 4 * embed_dim),\n            nn.Linear(4 * embed_dim, embed_dim),", "ffn_structure"),
    # linear_net without the Dropout its docstring lists: the block still drops out after the attention
    one("block_ffn_no_dropout", "block", ENC, FFN_OUT + "\n            nn.Dropout(layer_drop_rate),", FFN_OUT,
        "ffn_no_dropout"),
    # each norm in the other's place: seen only when the two hold different weights
    Mutant("block_norms_swapped", "block",
           (Edit(ENC, NORM1, "embedding = self.norm2(embedding + self.dropout(attended))"),
            Edit(ENC, NORM2, "embedding = self.norm1(embedding + self.linear_net(embedding))")),
           "block_norms_swapped"),
    # norms under other names than the docstring's: the block checks say which names they call
    Mutant("block_norms_renamed", "block",
           (Edit(ENC, "self.norm1 = nn.LayerNorm(embed_dim)", "self.ln1 = nn.LayerNorm(embed_dim)"),
            Edit(ENC, "self.norm2 = nn.LayerNorm(embed_dim)", "self.ln2 = nn.LayerNorm(embed_dim)"),
            Edit(ENC, NORM1, "embedding = self.ln1(embedding + self.dropout(attended))"),
            Edit(ENC, NORM2, "embedding = self.ln2(embedding + self.linear_net(embedding))")),
           "block_template_names"),
]


ALTERNATIVES = [
    # the docstring allows either order of clearing the gradients
    Alternative(
        "pretrain_zero_grad_after_step",
        ("pretraining",),
        (Edit(BERT, "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n",
              "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"),),
        "gradients cleared after each step rather than before each backward",
    ),
    Alternative(
        "pe_pow_instead_of_exp_log",
        ("positional_encoding", "block", "bert"),
        (Edit(ENC, DIV_TERM, "div_term = 1.0 / torch.pow(10000.0, torch.arange(0, embed_dim, 2).float() / embed_dim)"),),
        "the same frequencies computed with pow",
    ),
    Alternative(
        "pe_tutorial_table_even_sizes",
        ("block", "bert"),
        (Edit(ENC, PE_COS, "pe[0, :, 1::2] = torch.cos(position * div_term)"),),
        "the PyTorch tutorial's table, right for even embed_dim (odd sizes are graded in positional_encoding)",
    ),
    Alternative(
        "pe_tutorial_odd_cos_sliced",
        ("positional_encoding", "block", "bert"),
        (Edit(ENC, PE_COS,
              "if embed_dim % 2 == 1:\n"
              "            pe[0, :, 1::2] = torch.cos(position * div_term)[:, :-1]\n"
              "        else:\n"
              "            pe[0, :, 1::2] = torch.cos(position * div_term)"),),
        "the tutorial's table with the last cos column sliced off for an odd embed_dim",
    ),
    Alternative(
        "pe_table_sequence_first_indexed_right",
        ("positional_encoding",),
        (Edit(ENC, PE_BUFFER, 'self.register_buffer("pe", pe[0])'),
         Edit(ENC, PE_ADD, "x = x + self.pe[: x.size(1)].unsqueeze(0)")),
        "a (max_len, E) table, added along the sequence axis",
    ),
    Alternative(
        "block_ffn_width_e",
        ("block", "bert"),
        (Edit(ENC, FFN_IN, "nn.Linear(embed_dim, embed_dim),"), Edit(ENC, FFN_OUT, "nn.Linear(embed_dim, embed_dim),")),
        "seed 004's own template: linear_net of width E",
    ),
    Alternative(
        "mlm_exact_count_randperm",
        ("pretraining",),
        (Edit(BERT, SELECT,
              "real = (text != pad_ind).flatten().nonzero().squeeze(1)\n"
              "    chosen = real[torch.randperm(real.numel())[: round(mask_rate * real.numel())]]\n"
              "    selected = torch.zeros(text.numel(), dtype=torch.bool)\n"
              "    selected[chosen] = True\n"
              "    selected = selected.reshape(text.shape)"),),
        "exactly round(mask_rate * n) tokens selected per batch, by randperm",
    ),
    Alternative(
        "mlm_bernoulli_selection",
        ("pretraining",),
        (Edit(BERT, SELECT,
              "selected = torch.bernoulli(torch.full(text.shape, mask_rate)).bool() & (text != pad_ind)"),),
        "the selection drawn with torch.bernoulli",
    ),
    Alternative(
        "mlm_multinomial_categories",
        ("pretraining",),
        (Edit(BERT, CATEGORY,
              "kind = torch.multinomial(torch.tensor([0.8, 0.1, 0.1]), text.numel(), replacement=True)\n"
              "    category = torch.tensor([0.0, 0.85, 0.95])[kind].reshape(text.shape)"),),
        "categories drawn with torch.multinomial",
    ),
    Alternative(
        "pretrain_cross_entropy_loss_module",
        ("pretraining",),
        (Edit(BERT, LOSS,
              "loss = nn.CrossEntropyLoss()(logits.view(-1, logits.size(-1)), mask_labels.view(-1))"),),
        "nn.CrossEntropyLoss with its default ignore_index",
    ),
]
