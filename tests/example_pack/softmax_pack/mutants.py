"""What the checks must tell apart from the reference: a realistic mistake, and another correct way."""

from graders.mutants import Alternative, Edit, Mutant

MUTANTS = [
    Mutant("softmax_without_shift", "softmax", (Edit("softmax.py", "shifted = x - x.amax(dim=dim, keepdim=True)",
                                                     "shifted = x"),), diagnosis="softmax_overflows"),
]

ALTERNATIVES = [
    Alternative("softmax_by_logsumexp", ("softmax",), (Edit("softmax.py", "return weights / weights.sum(dim=dim, keepdim=True)",
                                                            "return (x - x.logsumexp(dim=dim, keepdim=True)).exp()"),)),
]
