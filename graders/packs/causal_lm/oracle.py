"""Reference behaviour the causal-LM checks ask the oracle for besides plain reference functions
(`ctx.oracle.call("lm_hidden", ...)`): the reference's modules under weights the check chooses,
the parameter shapes a failed count is explained against. `reference` gives a module of the
solution by its name."""

import torch
from torch import nn

from .tasks import probe_module


def parameter_shapes(reference, class_name, *args):
    """{name: shape} of the parameters of the reference's `class_name(*args)` (no buffers): what a
    failed count is explained against, sub-module by sub-module."""
    module = getattr(reference("causal_lm"), class_name)(*args)
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


def _model(reference, config, dropout, state, train, layers):
    """The reference TransformerModel(*config, dropout) holding `state` (the positional table its
    own), in training or eval mode; `layers` builds its encoder layers otherwise (what a known
    mistake computes): {"nhead": h, "norm_first": True, "activation": "gelu"}, or "run" the order
    of the layers forward runs ([0, 0] runs the first one twice)."""
    model = reference("causal_lm").TransformerModel(*config, dropout)
    layers = dict(layers or {})
    run = layers.pop("run", None)
    if layers:
        ntoken, d_model, nhead, d_hid, nlayers = config
        layer = nn.TransformerEncoderLayer(d_model, layers.pop("nhead", nhead), d_hid, dropout, batch_first=True,
                                           **layers)
        model.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
    model.load_state_dict(state, strict=False)
    if run is not None:
        encoder = model.transformer_encoder
        encoder.layers = nn.ModuleList([encoder.layers[i] for i in run])
        encoder.num_layers = len(run)
    return model.train(train)


def lm_hidden(reference, state, config, dropout, ids, src_mask=None, train=False, layers=None):
    """The reference TransformerModel's hidden states on `ids` under the weights `state` (its
    embedding and encoder in the reference's names), forward(ids, src_mask) in training mode where
    `train` (deterministic at dropout 0)."""
    with torch.no_grad():
        return _model(reference, config, dropout, state, train, layers)(ids, src_mask)


def lm_encoder_on(reference, state, config, dropout, x, src_mask=None, train=False):
    """The reference's encoder stack alone under `state`, on `x` (B, T, d_model): what the model
    computes after a positional encoding that gave `x`, with the causal mask where `src_mask` is None."""
    lm = reference("causal_lm")
    mask = lm.generate_square_subsequent_mask(x.size(1)) if src_mask is None else src_mask
    with torch.no_grad():
        return _model(reference, config, dropout, state, train, None).transformer_encoder(x, mask=mask)


def head_logits(reference, class_name, d_model, n_out, weight, bias, hidden):
    """The reference LMHead or ClassificationHead(d_model, n_out) with that Linear weight and bias,
    on `hidden` (eval mode)."""
    head = getattr(reference("causal_lm"), class_name)(d_model, n_out).eval()
    (linear,) = [module for module in head.modules() if isinstance(module, nn.Linear)]
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
        return head(hidden)


def probe_count(reference, sizes, frozen, tied=False):
    """The reference's count_parameters of the probe module the worker builds (the pack's task
    `causal_lm.probe_module`, rebuilt here from the same description)."""
    return reference("causal_lm").count_parameters(probe_module(sizes, frozen, tied))


COMPUTATIONS = {"parameter_shapes": parameter_shapes, "lm_hidden": lm_hidden, "lm_encoder_on": lm_encoder_on,
                "head_logits": head_logits, "probe_count": probe_count}
