"""Mutants and alternatives of attention.py (parts attention and mha)."""

from graders.mutants import Alternative, Edit, Mutant

F = "attention.py"
LOGITS = "logits = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, T, T)"
MASK_2D = "mask = mask[:, None, None, :]  # (B, 1, 1, T): the same keys are hidden from every query"
FILL = 'logits = logits.masked_fill(mask.bool(), float("-inf"))'
SOFTMAX = "attention = F.softmax(logits, dim=-1)  # (B, H, T, T), rows sum to 1"
DROPOUT = "attention = F.dropout(attention, p=attn_drop_rate)"
SPLIT_Q = "q = q.view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)"
SPLIT_K = "k = k.view(B, T, H, hd).transpose(1, 2)"
SPLIT_V = "v = v.view(B, T, H, hd).transpose(1, 2)"
DROP_RATE = "drop = self.attn_drop_rate if self.training else 0.0"
CALL_SDP = "values, _ = scaled_dot_product(q, k, v, drop, mask)  # (B, H, T, hd)"
MERGE = "values = values.transpose(1, 2).reshape(B, T, E)  # heads side by side again"
PROJECT = "return self.o_proj(values)"


def one(id, part, find, replace, diagnosis):
    return Mutant(id, part, (Edit(F, find, replace),), diagnosis)


MUTANTS = [
    one("sdp_not_scaled", "attention", LOGITS, "logits = q @ k.transpose(-2, -1)", "attention_not_scaled"),
    one("sdp_scaled_by_d_k", "attention", LOGITS, "logits = q @ k.transpose(-2, -1) / d_k", "attention_scaled_by_d_k"),
    one("sdp_softmax_over_queries", "attention", SOFTMAX, "attention = F.softmax(logits, dim=-2)", "softmax_wrong_dim"),
    one("sdp_mask_on_queries", "attention", MASK_2D, "mask = mask[:, None, :, None]", "mask_on_query_axis"),
    one("sdp_mask_inverted", "attention", FILL, 'logits = logits.masked_fill(~mask.bool(), float("-inf"))', "mask_inverted"),
    # the mask multiplied by -inf and added: 0 * -inf is NaN at every kept key
    one("sdp_mask_times_inf", "attention", FILL, 'logits = logits + mask.float() * float("-inf")', "nan_fully_masked"),
    Mutant(
        "sdp_mask_after_softmax",
        "attention",
        (
            Edit(F, FILL, "pass"),
            Edit(F, SOFTMAX, "attention = F.softmax(logits, dim=-1)\n    if mask is not None:\n        attention = attention.masked_fill(mask.bool(), 0.0)"),
        ),
        "mask_after_softmax",
    ),
    one("sdp_mask_ignored", "attention", FILL, "pass", "mask_ignored"),
    one("sdp_small_fill", "attention", FILL, "logits = logits.masked_fill(mask.bool(), -30.0)", "mask_small_fill"),
    one("sdp_no_dropout", "attention", DROPOUT, "pass", "dropout_not_applied"),
    one(
        "sdp_dropout_not_inverted",
        "attention",
        DROPOUT,
        "attention = attention * (torch.rand_like(attention) >= attn_drop_rate)",
        "dropout_not_inverted",
    ),
    one("sdp_mask_read_as_square", "attention", MASK_2D, "mask = mask[None, None, :, :]", "mask_as_square"),
    # the rate ignored: drops out at 0.1 whatever it is given, in eval mode too; charged here, not in mha
    # (nondeterministic: the same input passes on replay, which the framework observes)
    Mutant("sdp_dropout_rate_fixed", "attention", (Edit(F, DROPOUT, "attention = F.dropout(attention, p=0.1)"),),
           "dropout_rate_ignored", also=("nondeterministic",)),
    # float64 inputs (nothing restricts the dtype): the weights cast to float32 meet a float64 v
    one("sdp_weights_cast_to_float32", "attention", SOFTMAX, "attention = F.softmax(logits, dim=-1).float()", None),
    # every mask viewed as a padding mask: a 4-D mask per query and key no longer fits
    one("sdp_mask_always_viewed_as_padding", "attention", "if mask.dim() == 2:\n            mask = mask[:, None, None, :]",
        "if True:\n            mask = mask.reshape(mask.size(0), 1, 1, -1)", None),
    # dropout on the logits before the softmax: no weight is ever zero
    Mutant("sdp_dropout_on_logits", "attention",
           (Edit(F, SOFTMAX, "attention = F.softmax(F.dropout(logits, p=attn_drop_rate), dim=-1)"), Edit(F, DROPOUT, "pass")),
           "dropout_not_applied"),
    one("mha_no_output_projection", "mha", PROJECT, "return values", "output_projection_missing"),
    one("mha_dropout_in_eval", "mha", DROP_RATE, "drop = self.attn_drop_rate", "dropout_in_eval"),
    Mutant(
        "mha_heads_not_transposed",
        "mha",
        (
            Edit(F, SPLIT_Q, "q = q.reshape(B, H, T, hd)"),
            Edit(F, SPLIT_K, "k = k.reshape(B, H, T, hd)"),
            Edit(F, SPLIT_V, "v = v.reshape(B, H, T, hd)"),
            Edit(F, MERGE, "values = values.reshape(B, T, E)"),
        ),
        "heads_not_transposed",
    ),
    one("mha_mask_on_queries", "mha", CALL_SDP,
        "values, _ = scaled_dot_product(q, k, v, drop, None if mask is None else mask[:, None, :, None])",
        "mask_on_query_axis"),
    one("mha_merge_without_transpose", "mha", MERGE, "values = values.reshape(B, T, E)", "heads_not_transposed"),
    # siblings of the above, and student-bugs.md 1, 3, 4, 11
    one("sdp_mask_filled_with_zero", "attention", FILL, "logits = logits.masked_fill(mask.bool(), 0.0)", "mask_fill_zero"),
    Mutant(
        "sdp_scaled_after_softmax",
        "attention",
        (Edit(F, LOGITS, "logits = q @ k.transpose(-2, -1)"),
         Edit(F, SOFTMAX, "attention = F.softmax(logits, dim=-1) / math.sqrt(d_k)")),
        "scale_after_softmax",
    ),
    one("sdp_scaled_by_sqrt_d_model", "attention", LOGITS,
        "logits = q @ k.transpose(-2, -1) / math.sqrt(q.size(1) * d_k)", "attention_scaled_by_d_model"),
    Mutant(
        "sdp_dropout_on_values",
        "attention",
        (Edit(F, DROPOUT, "pass"),
         Edit(F, "values = attention @ v  # (B, H, T, d)", "values = F.dropout(attention @ v, p=attn_drop_rate)")),
        "dropout_not_on_weights",
    ),
    one("mha_mask_not_passed", "mha", CALL_SDP, "values, _ = scaled_dot_product(q, k, v, drop, None)", "mask_ignored"),
    one("mha_mask_inverted", "mha", CALL_SDP,  # Hugging Face's attention_mask convention (1 = attend)
        "values, _ = scaled_dot_product(q, k, v, drop, None if mask is None else mask == 0)", "mask_inverted"),
    one("mha_never_drops", "mha", DROP_RATE, "drop = 0.0", "dropout_ignored_in_training"),
    # an exception explained: view(B, T, H, E) raises whenever H > 1
    Mutant("mha_split_by_embed_dim", "mha",
           (Edit(F, SPLIT_Q, "q = q.view(B, T, H, E).transpose(1, 2)"),
            Edit(F, SPLIT_K, "k = k.view(B, T, H, E).transpose(1, 2)"),
            Edit(F, SPLIT_V, "v = v.view(B, T, H, E).transpose(1, 2)")),
           "mha_head_dim_wrong"),
    # the count's failure names the sub-module that differs: "qkv_proj: 48 in yours, 60 expected (missing qkv_proj.bias (12,))"
    Mutant("mha_qkv_without_bias", "mha",
           (Edit(F, "self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim)",
                 "self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=False)"),
            Edit(F, "        self.qkv_proj.bias.data.fill_(0)\n", "")),
           "wrong_parameter_count_mha"),
    # the rate not passed on: scaled_dot_product's default 0.1 drops out in eval mode too; charged
    # in mha.eval_deterministic and the comparisons, never by a gate or the parameter count
    one("mha_drop_rate_not_passed", "mha", CALL_SDP, "values, _ = scaled_dot_product(q, k, v, mask=mask)",
        "dropout_in_eval"),
    # the annotated transformer's layout: projections under other names than the template's, which
    # the grader's weights never reach; said as such, not as a numeric difference
    Mutant("mha_projections_renamed", "mha",
           (Edit(F, "self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim)", "self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)"),
            Edit(F, "nn.init.xavier_uniform_(self.qkv_proj.weight)", "nn.init.xavier_uniform_(self.in_proj.weight)"),
            Edit(F, "self.qkv_proj.bias.data.fill_(0)", "self.in_proj.bias.data.fill_(0)"),
            Edit(F, "q, k, v = self.qkv_proj(embedding)", "q, k, v = self.in_proj(embedding)")),
           "mha_template_names"),
]

ALTERNATIVES = [
    # the docstring accepts both readings of "(values, attention)" under dropout
    Alternative(
        "sdp_returns_weights_before_dropout",
        ("attention", "mha"),
        (Edit(F, DROPOUT, "dropped = F.dropout(attention, p=attn_drop_rate)"),
         Edit(F, "values = attention @ v  # (B, H, T, d)", "values = dropped @ v")),
        "the weights returned are those before dropout, the values those after it",
    ),
    Alternative(
        "sdp_nonzero_mask_test",
        ("attention", "mha"),
        (Edit(F, FILL, 'logits = logits.masked_fill(mask != 0, float("-inf"))'),),
        "nonzero read as blocked without a cast to bool",
    ),
    Alternative(
        "sdp_large_negative_fill",
        ("attention", "mha"),
        (Edit(F, FILL, "logits = logits.masked_fill(mask.bool(), -1e9)"),),
        "uvadlc's finite fill value",
    ),
    Alternative(
        "sdp_additive_float_mask",
        ("attention", "mha"),
        (Edit(F, FILL, "logits = logits + mask.float() * -1e9"),),
        "the mask turned into an additive bias of -1e9, as the tutorials do",
    ),
    Alternative(
        "mha_permute_and_view",
        ("mha",),
        (
            Edit(F, SPLIT_Q, "q = q.reshape(B, T, H, hd).permute(0, 2, 1, 3)"),
            Edit(F, SPLIT_K, "k = k.reshape(B, T, H, hd).permute(0, 2, 1, 3)"),
            Edit(F, SPLIT_V, "v = v.reshape(B, T, H, hd).permute(0, 2, 1, 3)"),
            Edit(F, MERGE, "values = values.permute(0, 2, 1, 3).contiguous().view(B, T, E)"),
        ),
        "heads split with permute and merged with contiguous().view()",
    ),
    Alternative(
        "sdp_einsum",
        ("attention", "mha"),
        (Edit(F, LOGITS, 'logits = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d_k)'),),
    ),
    Alternative(
        "sdp_finite_fill",
        ("attention", "mha"),
        (Edit(F, FILL, "logits = logits.masked_fill(mask.bool(), torch.finfo(logits.dtype).min)"),),
    ),
    Alternative(
        "mha_interleaved_qkv_layout",
        ("mha",),
        (
            Edit(F, "q, k, v = self.qkv_proj(embedding).split(E, dim=-1)  # 3 x (B, T, E), blocks [q | k | v]",
                 "q, k, v = self.qkv_proj(embedding).reshape(B, T, H, 3 * hd).permute(0, 2, 1, 3).chunk(3, dim=-1)"),
            Edit(F, SPLIT_Q, "pass"),
            Edit(F, SPLIT_K, "pass"),
            Edit(F, SPLIT_V, "pass"),
        ),
        "uvadlc's per-head [q_h | k_h | v_h] layout",
    ),
    Alternative(
        "mha_torch_sdpa",
        ("mha",),
        (
            Edit(F, CALL_SDP,
                 "keep = None if mask is None else ~mask.bool()[:, None, None, :]\n"
                 "        values = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=drop)"),
        ),
        "PyTorch's fused attention inside the module",
    ),
]
