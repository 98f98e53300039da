"""The reference runs on any device: every callable of every pack, its inputs and modules on the
`meta` device (shapes without values), must keep every tensor it makes there. A tensor made on
the CPU beside them (`torch.rand(text.shape)` where `text` is on a GPU) raises, as it would on
CUDA; the course's reference once drew mask_inputs' random numbers so, and failed on a CUDA batch.
CI has no GPU: this is the device check it can run."""

import pytest
import torch
import torch.fx.experimental._config as fx_config

from graders.assignment import load

META = torch.device("meta")


@pytest.fixture(autouse=True)
def boolean_indexing_on_meta():
    # a boolean index has no size without values: meta assumes every element is selected
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):
        yield


def meta(*tensors):
    return [t.to(META) for t in tensors]


def on_meta(value):
    values = value if isinstance(value, (tuple, list)) else [value]
    return all(v.device == META for v in values if isinstance(v, torch.Tensor))


def test_bert_attention_and_encoder_stay_on_the_device():
    pack = load("bert")
    attention, encoder = pack.reference_module("attention"), pack.reference_module("encoder")
    q, k, v = meta(*torch.randn(3, 2, 2, 4, 8))
    padding, causal = meta(torch.tensor([[0.0, 0, 0, 1], [0, 0, 1, 1]]), torch.triu(torch.ones(1, 1, 4, 4), 1))
    for mask in (None, padding, causal):
        assert on_meta(attention.scaled_dot_product(q, k, v, 0.3, mask))
    x = meta(torch.randn(2, 4, 8))[0]
    for module in (attention.MultiHeadAttention(8, 2, 0.1), encoder.PositionalEncoding(8, 0.1, 16)):
        assert on_meta(module.to(META)(x) if not isinstance(module, attention.MultiHeadAttention)
                       else module.to(META)(x, padding))
    assert on_meta(encoder.TransformerBlock(8, 2, 0.1, 0.1).to(META)((x, padding)))


def test_bert_model_and_its_masking_stay_on_the_device():
    bert = load("bert").reference_module("bert")
    text = meta(torch.randint(1, 10, (2, 5)))[0]
    for only_mask in (False, True):
        assert on_meta(bert.mask_inputs(text, 10, 10, pad_ind=0, mask_rate=0.3, only_mask=only_mask))
    model = bert.BertModel(2, 10, 8, 2, 0.1, 0.1).to(META)
    assert on_meta(model(text, text == 0))


def test_a_draw_on_the_cpu_beside_a_batch_elsewhere_raises_here():
    """The control: mask_inputs' old selection, drawn on the CPU, fails on meta as on CUDA."""
    text = meta(torch.randint(1, 10, (2, 5)))[0]
    with pytest.raises(RuntimeError, match="device"):
        (torch.rand(text.shape) < 0.15) & (text != 0)


def test_sentiment_accuracy_stays_on_the_device():
    sentiment = load("bert").reference_module("sentiment")
    preds, labels = meta(torch.randn(5), torch.ones(5))
    assert on_meta(sentiment.binary_accuracy(preds, labels))


def test_the_causal_lm_stays_on_the_device(monkeypatch):
    # nn.TransformerEncoder reads the mask's values to tell whether it is causal: none on meta
    monkeypatch.setattr(torch.nn.modules.transformer, "_detect_is_causal_mask", lambda *args, **kwargs: False)
    causal_lm = load("causal_lm").reference_module("causal_lm")
    src = meta(torch.randint(0, 12, (2, 5)))[0]
    model = causal_lm.TransformerModel(12, 8, 2, 16, 2, 0.1).to(META)
    hidden = model(src)
    assert on_meta(hidden)
    assert on_meta(causal_lm.LMHead(8, 12).to(META)(hidden))
    assert on_meta(causal_lm.ClassificationHead(8, 3).to(META)(hidden))
    assert on_meta(causal_lm.PositionalEncoding(8, 0.1, 16).to(META)(meta(torch.randn(2, 5, 8))[0]))


def test_minigpt_and_its_generation_stay_on_the_device():
    gpt = load("gpt").reference_module("gpt")
    model = gpt.GPT(gpt.GPTConfig(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)).to(META).eval()
    idx, targets = meta(torch.randint(0, 11, (2, 4)), torch.randint(0, 11, (2, 4)))
    assert on_meta(model(idx, targets))
    assert on_meta(model(idx, meta(torch.tensor([0, 1]))[0], finetune_classify=True))
    for options in ({}, {"do_sample": True, "temperature": 0.5, "top_k": 3}):
        assert on_meta(model.generate(meta(torch.randint(0, 11, (2, 8)))[0], 2, **options))
