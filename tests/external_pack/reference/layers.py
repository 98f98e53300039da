"""Two layers of today's language models: RMSNorm and the SwiGLU feed-forward block."""

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    """x / sqrt(mean(x**2) + eps) * weight over the last axis: (..., d) -> (..., d).

    Unlike LayerNorm, no mean is subtracted and there is no bias. The grader loads its own
    values into `weight`: keep that name."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # TODO: divide x by the root of the mean of its squares over the last axis (plus eps), then scale.
        # BEGIN SOLUTION
        inverse_rms = x.pow(2).mean(dim=-1, keepdim=True).add(self.eps).rsqrt()
        return x * inverse_rms * self.weight
        # END SOLUTION


class SwiGLU(nn.Module):
    """w2(silu(w1(x)) * w3(x)): (..., d) -> (..., d), through a hidden width `hidden`, no biases.

    The grader loads its own weights into w1, w2 and w3 by name: use these names."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        # TODO: three nn.Linear without bias: w1 (the gate) and w3 (the value) from d to hidden, w2 from hidden to d.
        # BEGIN SOLUTION
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # TODO: gate the value w3(x) with silu(w1(x)), then project back with w2.
        # BEGIN SOLUTION
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
        # END SOLUTION
