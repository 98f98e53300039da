"""What the checks must tell apart from the reference: realistic mistakes, and other correct ways."""

from graders.mutants import Alternative, Edit, Mutant, one_edit

RMS = "inverse_rms = x.pow(2).mean(dim=-1, keepdim=True).add(self.eps).rsqrt()"
SWIGLU = "return self.w2(F.silu(self.w1(x)) * self.w3(x))"

MUTANTS = [
    one_edit("rmsnorm_subtracts_mean", "rmsnorm", "layers.py", "return x * inverse_rms * self.weight",
             "return (x - x.mean(-1, keepdim=True)) * (x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)"
             ".add(self.eps).rsqrt() * self.weight", "rmsnorm_subtracts_mean"),
    one_edit("rmsnorm_eps_outside_root", "rmsnorm", "layers.py", RMS,
             "inverse_rms = 1 / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps)", "rmsnorm_eps_outside_root"),
    one_edit("swiglu_gate_swapped", "swiglu", "layers.py", SWIGLU, "return self.w2(F.silu(self.w3(x)) * self.w1(x))",
             "swiglu_gate_swapped"),
    Mutant("swiglu_with_biases", "swiglu", tuple(
        Edit("layers.py", f"self.{name} = nn.Linear({shape}, bias=False)", f"self.{name} = nn.Linear({shape})")
        for name, shape in (("w1", "d, hidden"), ("w3", "d, hidden"), ("w2", "hidden, d"))), "swiglu_has_bias"),
]

ALTERNATIVES = [
    Alternative("rmsnorm_by_norm", ("rmsnorm",), (Edit("layers.py", RMS,
        "inverse_rms = 1 / (x.norm(dim=-1, keepdim=True).pow(2) / x.shape[-1] + self.eps).sqrt()"),)),
    Alternative("swiglu_by_sigmoid", ("swiglu",), (Edit("layers.py", SWIGLU,
        "gate = self.w1(x)\n        return self.w2(gate * torch.sigmoid(gate) * self.w3(x))"),)),
]
