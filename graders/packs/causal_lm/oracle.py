"""Reference behaviour the causal-LM checks ask the oracle for besides plain reference functions
(`ctx.oracle.call("parameter_shapes", ...)`). `reference` gives a module of the solution by its name."""


def parameter_shapes(reference, class_name, *args):
    """{name: shape} of the parameters of the reference's `class_name(*args)` (no buffers): what a
    failed count is explained against, sub-module by sub-module."""
    module = getattr(reference("causal_lm"), class_name)(*args)
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


COMPUTATIONS = {"parameter_shapes": parameter_shapes}
