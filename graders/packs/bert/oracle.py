"""Reference behaviour under weights a check chooses: the computation the attention checks
ask the oracle for (`ctx.oracle.call("mha_forward", ...)`) besides plain reference functions.
Each takes `reference`, which gives a module of the solution by its name."""

import torch


def mha_forward(reference, state_dict, embed_dim, n_heads, x, mask=None):
    """The reference multi-head attention's eval-mode output under the given reference-layout weights."""
    layer = reference("attention").MultiHeadAttention(embed_dim, n_heads, 0.0).eval()
    layer.load_state_dict(state_dict)
    with torch.no_grad():
        return layer(x, mask)


def state_shapes(reference, module, class_name, *args):
    """{name: shape} of the entries of a reference module's state_dict that can be trained
    parameters (floating point and finite): what a parameter count's failure compares the student's with."""
    with torch.random.fork_rng(devices=[]):
        layer = getattr(reference(module), class_name)(*args)
    return {name: list(t.shape) for name, t in layer.state_dict().items()
            if t.is_floating_point() and bool(torch.isfinite(t).all())}


def with_stand_ins(reference, module, class_name, args, names):
    """The reference `module.class_name(*args)` with the grader's stand-ins in place of its
    sub-modules of the classes `names`, as the checks build the student's (the `stand_ins` task):
    what a failed module is traced against (graders/checks/localise.py)."""
    from types import SimpleNamespace

    from graders.packs.bert.tasks import stand_ins

    with torch.random.fork_rng(devices=[]):
        model = getattr(reference(module), class_name)(*args)
    stand_ins(SimpleNamespace(student_module=reference), model, names)
    return model


def forward_with_stand_ins(reference, module, class_name, args, names, state, inputs):
    """The eval-mode output of the reference `module.class_name(*args)` with the grader's stand-ins
    for `names`, holding the weights `state` (the reference's names)."""
    model = with_stand_ins(reference, module, class_name, args, names).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        return model(*inputs)


COMPUTATIONS = {"mha_forward": mha_forward, "state_shapes": state_shapes, "with_stand_ins": with_stand_ins,
                "forward_with_stand_ins": forward_with_stand_ins}
