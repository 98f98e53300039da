"""What the checks must tell apart from the reference: a realistic mistake, and another correct way."""

from graders.mutants import Alternative, Edit, Mutant

MUTANTS = [
    Mutant("softmax_without_shift", "softmax", (Edit("softmax.py", "shifted = x - x.amax(dim=dim, keepdim=True)",
                                                     "shifted = x"),), diagnosis="softmax_overflows"),
    # `dim` dropped: right along the last axis only, which is all a check that never varies dim sees
    Mutant("softmax_ignores_dim", "softmax", (Edit("softmax.py", "return weights / weights.sum(dim=dim, keepdim=True)",
                                                   "return weights / weights.sum(dim=-1, keepdim=True)"),),
           diagnosis="softmax_wrong_dim"),
]

ALTERNATIVES = [
    Alternative("softmax_by_logsumexp", ("softmax",), (Edit("softmax.py", "return weights / weights.sum(dim=dim, keepdim=True)",
                                                            "return (x - x.logsumexp(dim=dim, keepdim=True)).exp()"),)),
]
