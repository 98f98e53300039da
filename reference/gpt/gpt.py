"""A minGPT-style decoder-only Transformer with a language-model head and a classification
head, its data pipeline, and generation (seeds 002 and 003; karpathy/minGPT)."""

import math
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

PAD_ID = 0  # id of "<pad>" in every Vocabulary
IGNORE_INDEX = -1  # label of padded targets: no loss there (minGPT's ignore_index)


@dataclass
class GPTConfig:
    """The model's sizes and dropout rates. block_size >= 1 (a block of one position is a model of
    one token of context); n_embd is a multiple of n_head, each head of any width (odd too); each
    dropout rate lies in [0, 1] and acts on its own path in training mode only (a rate of 1 drops
    the whole path)."""

    vocab_size: int
    block_size: int  # the longest context the model can see
    n_layer: int = 3
    n_head: int = 3
    n_embd: int = 48
    embd_pdrop: float = 0.1
    resid_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    n_classification_class: int = 2


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions 0..t only."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v for all heads
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        causal = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("bias", causal.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))  # (B, nh, T, T)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    """Pre-LN block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).

    The MLP's activation is GELU, exact (nn.GELU()) or its tanh approximation (minGPT's NewGELU,
    nn.GELU(approximate="tanh")): the checks accept either.
    """

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(
            dict(
                c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
                c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
                act=nn.GELU(),
                dropout=nn.Dropout(config.resid_pdrop),
            )
        )
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x


class GPT(nn.Module):
    """Token + learned position embeddings -> n_layer Blocks -> ln_f -> a head:
    lm_head (B, T, vocab_size) for language modelling, or classifier_head on the last position
    (B, n_classification_class) when finetune_classify=True.

    The heads must be the attributes lm_head and classifier_head: the checks load and read their
    weights by these names (lm_head.weight, classifier_head.weight, classifier_head.bias). Every
    weight is its own: lm_head is not tied to the token embedding wte (as in minGPT).
    """

    def __init__(self, config):
        super().__init__()
        self.block_size = config.block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.embd_pdrop),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        # TODO: self.lm_head = Linear(n_embd, vocab_size, bias=False);
        # TODO: self.classifier_head = Linear(n_embd, n_classification_class, bias=True).
        # BEGIN SOLUTION
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.classifier_head = nn.Linear(config.n_embd, config.n_classification_class, bias=True)
        # END SOLUTION
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, finetune_classify=False):
        """idx: (B, T) long ids with 1 <= T <= block_size. targets: None, (B, T) long next-token ids
        (IGNORE_INDEX at padding), or (B,) long class ids when finetune_classify.

        Returns the pair (logits, loss): logits (B, T, vocab_size), or (B, n_classification_class)
        from the last position when finetune_classify; loss the mean cross-entropy over the targets
        (IGNORE_INDEX left out), or None without targets (with finetune_classify too). One model is
        called on sequences of any length up to block_size, call after call. Dropout acts in
        training mode only: with every rate 0 the training-mode output is the eval-mode one.
        """
        # TODO: embeddings of tokens and positions, the blocks, ln_f; then lm_head at every
        # TODO: position, or classifier_head on the last position when finetune_classify.
        # TODO: The loss is cross-entropy ignoring IGNORE_INDEX.
        # BEGIN SOLUTION
        B, T = idx.size()
        assert T <= self.block_size, f"sequence of length {T} exceeds block_size {self.block_size}"
        pos = torch.arange(T, device=idx.device).unsqueeze(0)  # (1, T)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if finetune_classify:
            logits = self.classifier_head(x[:, -1, :])  # (B, n_classes)
            loss = None if targets is None else F.cross_entropy(logits, targets)
            return logits, loss
        logits = self.lm_head(x)  # (B, T, vocab_size)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX)
        return logits, loss
        # END SOLUTION

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        """Extend idx (B, T) by max_new_tokens tokens, feeding each prediction back in.

        Greedy (argmax) by default; with do_sample, sample from softmax(logits / temperature),
        restricted to the top_k most likely tokens when top_k is given (temperature > 0,
        1 <= top_k <= vocab_size). Without do_sample the new token is the argmax whatever the
        temperature and top_k. Each step's logits are those of the last position of the model's
        own forward, self(context) (the checks grade generate with a forward of their own, so
        that a mistake of forward is not charged here too); the context is cropped to its last
        block_size tokens, so a prompt longer than block_size works, and so does max_new_tokens
        beyond block_size. max_new_tokens may be 0: idx comes back as it is.
        Returns (B, T + max_new_tokens) long ids.
        """
        # TODO: for each new token: crop the context to block_size, take the logits of the last
        # TODO: position, divide by temperature, keep only the top_k (others -inf), then sample
        # TODO: or take the argmax, and append.
        # BEGIN SOLUTION
        for _ in range(max_new_tokens):
            context = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size :]
            logits, _ = self(context)
            logits = logits[:, -1, :] / temperature  # (B, vocab_size)
            if top_k is not None:
                kth_best = torch.topk(logits, top_k).values[:, [-1]]  # (B, 1)
                logits = logits.masked_fill(logits < kth_best, float("-inf"))
            if do_sample:
                next_id = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            else:
                next_id = logits.argmax(dim=-1, keepdim=True)
            idx = torch.cat((idx, next_id), dim=1)
        return idx
        # END SOLUTION


def tokenize(sentence):
    """Words and punctuation marks: "She rubs a cat." -> ["She", "rubs", "a", "cat", "."]."""
    return re.findall(r"\w+|[^\w\s]", sentence)


class Vocabulary:
    """Word <-> id maps over a corpus; id PAD_ID is "<pad>"."""

    def __init__(self, sentences):
        words = sorted({word for sentence in sentences for word in tokenize(sentence)})
        self.itos = ["<pad>"] + words
        self.stoi = {word: i for i, word in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def encode(self, sentence):
        return [self.stoi[word] for word in tokenize(sentence)]

    def decode(self, ids):
        return " ".join(self.itos[i] for i in ids)


class LanguageModelingDataset(Dataset):
    """One example per sentence: X = ids[:-1], Y = ids[1:], so Y[t] is the token after X[t]
    (a sentence of n tokens gives n - 1 next-token predictions).

    token_ids: a list of sentences, each a list of int token ids. A sentence of fewer than two
    tokens (one, or none) gives no prediction and is left out; the others are kept in their order,
    so a corpus of short sentences only gives an empty dataset. dataset[i], for 0 <= i < len(dataset):
    the pair (X, Y) of the i-th sentence kept, two 1-D long (torch.int64) tensors of n - 1 ids.
    """

    def __init__(self, token_ids):
        # TODO: keep the sentences (lists of ids) that have at least two tokens.
        # BEGIN SOLUTION
        self.token_ids = [list(ids) for ids in token_ids if len(ids) >= 2]
        # END SOLUTION

    def __len__(self):
        # TODO: the number of sentences.
        # BEGIN SOLUTION
        return len(self.token_ids)
        # END SOLUTION

    def __getitem__(self, i):
        # TODO: (X, Y) as long tensors, Y shifted by one against X.
        # BEGIN SOLUTION
        ids = torch.tensor(self.token_ids[i], dtype=torch.long)
        return ids[:-1], ids[1:]
        # END SOLUTION


def lm_collate_fn(batch):
    """[(X_i, Y_i)] -> (X, Y), both (B, T_max) long tensors, T_max the length of the longest X_i
    (a batch of one sequence too): row i is X_i followed by PAD_ID, and Y_i followed by IGNORE_INDEX
    so that padding never counts in the loss."""
    # TODO: pad every X and Y to the longest sequence of the batch.
    # BEGIN SOLUTION
    xs, ys = zip(*batch)
    X = nn.utils.rnn.pad_sequence(xs, batch_first=True, padding_value=PAD_ID)
    Y = nn.utils.rnn.pad_sequence(ys, batch_first=True, padding_value=IGNORE_INDEX)
    return X, Y
    # END SOLUTION


def train_language_model(model, dataset, max_iters=500, batch_size=16, learning_rate=5e-3, seed=0):
    """A minimal minGPT-style training loop. Returns the training loss of every iteration."""
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=lm_collate_fn, generator=generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    while len(losses) < max_iters:
        for X, Y in loader:
            _, loss = model(X, Y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == max_iters:
                break
    return losses
