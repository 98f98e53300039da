"""The minGPT homework's harness tasks (graders/sandbox/harness.py): the stand-in forward that
generate's checks run the student's generate with.

generate is graded apart from forward (the GPT.generate docstring says so): the student's own
GPT object generates, its forward replaced by the grader's stand-in, so that a mistake of forward
(a missing return value, wrong logits, a forward still raising NotImplementedError) is charged in
forward's checks only. The stand-in is plainly not the assignment's solution: the logits of
position t are a seeded table's rows of the tokens 0..t, each row of its own position, summed
and divided by sqrt(t + 1). They depend on every token of the context and on its position in
it, so that a context cropped wrongly, fed back wrongly or read at the wrong position gives other
tokens; the grader computes the same logits itself (`stand_in_logits`).
"""

from __future__ import annotations

from typing import Any

import torch

from graders.sandbox.harness import TaskContext, task

STAND_IN = "the grader's stand-in for GPT.forward"
FORMS = ("pair", "tensor")  # (logits, None) as the docstring says; the logits alone, as a student's forward may


def stand_in_table(vocab_size: int, block_size: int, seed: int, scale: float) -> torch.Tensor:
    """(block_size, vocab_size, vocab_size): the row of token j at position s is table[s, j]."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((block_size, vocab_size, vocab_size), generator=generator, dtype=torch.float64) * scale


def stand_in_logits(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """(B, T, vocab_size) float32 logits of the stand-in for ids `idx` (B, T); raises, as the
    reference's forward does, on a context longer than block_size. Sums in float64 row by row,
    so a batch of any size gives every row the same logits to the bit."""
    block, vocab_size = table.size(0), table.size(1)
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise ValueError(f"{STAND_IN} takes idx of shape (B, T), got {getattr(idx, 'shape', type(idx).__name__)}")
    T = idx.size(1)
    if T > block:
        raise ValueError(f"{STAND_IN} was given a context of {T} tokens, more than block_size={block}")
    ids = idx.detach().long().cpu()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise IndexError(f"{STAND_IN} was given token ids outside [0, {vocab_size}): {sorted(set(ids.flatten().tolist()))[:8]}")
    rows = table[torch.arange(T)[None, :], ids]  # (B, T, V)
    logits = rows.cumsum(1) / torch.arange(1, T + 1, dtype=torch.float64).sqrt()[None, :, None]
    return logits.float().to(idx.device)


class StandInForward:
    """What the student's GPT object calls as its forward (an attribute of the instance, which
    nn.Module.__call__ finds before the class's method): next-token logits only."""

    def __init__(self, table: torch.Tensor, form: str) -> None:
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.table, self.form = table, form
        self.block_size = table.size(0)

    def __call__(self, idx: torch.Tensor, targets: Any = None, finetune_classify: bool = False, *args: Any,
                 **kwargs: Any) -> Any:
        if targets is not None or finetune_classify:
            raise ValueError(f"{STAND_IN} gives next-token logits only: generate calls forward without targets "
                             "and without finetune_classify")
        logits = stand_in_logits(self.table, idx)
        return logits if self.form == "tensor" else (logits, None)


@task("gpt.stand_in_forward")
def gpt_stand_in_forward(ctx: TaskContext, model: Any, vocab_size: int, block_size: int, seed: int, scale: float,
                         form: str = "pair") -> None:
    """Give the student's GPT `model` the stand-in forward (seeded by `seed`, its logits scaled by
    `scale`), returning its logits in `form`. Reports nothing: the grader computes its logits itself."""
    model.forward = StandInForward(stand_in_table(vocab_size, block_size, seed, scale), form)


@task("gpt.own_forward_form")
def gpt_own_forward_form(ctx: TaskContext, model: Any) -> str:
    """How the class's own forward of `model` returns its logits for one token: "pair" (a tuple or
    list), "tensor", or "other" (anything else, or it raises). Chooses only which form of the
    stand-in a generate written against the student's own forward is run with, never a score."""
    try:
        with torch.no_grad():
            result = type(model).forward(model, torch.zeros(1, 1, dtype=torch.long))
    except Exception:  # noqa: BLE001 - a forward that raises has no form of its own
        return "other"
    if isinstance(result, torch.Tensor):
        return "tensor"
    return "pair" if isinstance(result, (tuple, list)) else "other"
