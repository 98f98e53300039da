"""The reference solution reproduces the seeds' numbers and the properties the checks rely on."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.bert import attention, bert, encoder
from reference.causal_lm import causal_lm
from reference.gpt import gpt

FAST = settings(max_examples=25, deadline=None, derandomize=True)


def binomial_bounds(p, n, z=5.0):
    """A z-sigma interval for a proportion of n Bernoulli(p) draws (z=5: a correct solution
    falls outside it about once in two million runs)."""
    sd = math.sqrt(p * (1 - p) / n)
    return p - z * sd, p + z * sd


# ---------------------------------------------------------------- attention


@st.composite
def qkv_and_padding(draw):
    B = draw(st.integers(1, 4))
    H = draw(st.integers(1, 3))
    T = draw(st.integers(1, 6))
    d = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
    keep_first = torch.zeros(B, 1)  # every row keeps at least its first key
    padding = torch.cat([keep_first, (torch.rand(B, T - 1, generator=g) < 0.4).float()], dim=1)
    return q, k, v, padding


@FAST
@given(qkv_and_padding())
def test_attention_rows_sum_to_one_and_padding_gets_zero_weight(inputs):
    q, k, v, padding = inputs
    values, weights = attention.scaled_dot_product(q, k, v, 0.0, padding)
    assert torch.allclose(weights.sum(-1), torch.ones_like(weights.sum(-1)), atol=1e-5)
    blocked = padding.bool()[:, None, None, :].expand_as(weights)
    assert torch.all(weights[blocked] == 0)
    assert not torch.isnan(values).any()


@FAST
@given(qkv_and_padding())
def test_attention_matches_the_formula(inputs):
    q, k, v, _ = inputs
    values, weights = attention.scaled_dot_product(q, k, v, 0.0)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    assert torch.allclose(weights, expected, atol=1e-6)
    assert torch.allclose(values, expected @ v, atol=1e-5)


def test_attention_reproduces_the_seed_example():
    q = torch.tensor([[[[0.0461, 0.4024], [-1.0115, 0.2167], [-0.6123, 0.5036]]]])
    k = torch.tensor([[[[0.2310, 0.6931], [-0.2669, 2.1785], [0.1021, -0.2590]]]])
    v = torch.tensor([[[[-0.1549, -1.3706], [-0.1319, 0.8848], [-0.2611, 0.6104]]]])
    values, weights = attention.scaled_dot_product(q, k, v, 0.0, torch.tensor([[0.0, 1.0, 0.0]]))
    seed_weights = torch.tensor([[0.5683, 0.0, 0.4317], [0.5134, 0.0, 0.4866], [0.5703, 0.0, 0.4297]])
    seed_values = torch.tensor([[-0.2007, -0.5155], [-0.2066, -0.4067], [-0.2005, -0.5194]])
    assert torch.allclose(weights[0, 0], seed_weights, atol=1e-3)
    assert torch.allclose(values[0, 0], seed_values, atol=1e-3)


@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 7), st.integers(0, 1000))
def test_multi_head_attention_shape_params_and_eval_determinism(B, heads, T, seed):
    torch.manual_seed(seed)
    E = 4 * heads
    layer = attention.MultiHeadAttention(E, heads, 0.5).eval()
    x = torch.randn(B, T, E)
    assert layer(x).shape == (B, T, E)
    assert torch.equal(layer(x), layer(x))
    assert sum(p.numel() for p in layer.parameters()) == 4 * E * E + 4 * E


# ---------------------------------------------------------------- encoder


def test_positional_encoding_is_an_interleaved_buffer():
    pe = encoder.PositionalEncoding(6, dropout=0.0, max_len=10)
    assert list(pe.parameters()) == [] and "pe" in dict(pe.named_buffers())
    out = pe(torch.zeros(2, 4, 6))
    pos, i = 3, 2  # dimension 2i = 4 (sin) and 2i + 1 = 5 (cos)
    angle = pos / 10000 ** (2 * i / 6)
    assert out[1, pos, 4].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert out[1, pos, 5].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert torch.equal(out[0], out[1])  # along the sequence axis, the same for every batch row


def test_transformer_block_is_post_ln_and_returns_the_mask():
    torch.manual_seed(0)
    block = encoder.TransformerBlock(16, 4, 0.1, 0.1).eval()
    x, mask = torch.randn(3, 5, 16) * 4 + 2, torch.zeros(3, 5)
    y, mask_out = block((x, mask))
    assert mask_out is mask
    assert torch.allclose(y.mean(-1), torch.zeros(3, 5), atol=1e-5)
    assert torch.allclose(y.std(-1, unbiased=False), torch.ones(3, 5), atol=1e-3)


# ---------------------------------------------------------------- BERT


def test_mask_inputs_reproduces_the_seed_proportions():
    torch.manual_seed(1234)
    n = 128 * 128
    text = torch.randint(1, 100, (128, 128))
    masked_text, labels = bert.mask_inputs(text, vocab_size=100, mask_token_ind=100)
    changed = (masked_text != text).float().mean().item()
    masked = (masked_text == 100).float().mean().item()
    labelled = (labels != -100).float().mean().item()
    p_changed = 0.15 * (0.8 + 0.1 * 99 / 100)  # a random token may equal the original
    for value, p in [(changed, p_changed), (masked, 0.12), (labelled, 0.15)]:
        low, high = binomial_bounds(p, n)
        assert low <= value <= high
    assert abs(changed - 0.135) < 0.01 and abs(masked - 0.12) < 0.01 and abs(labelled - 0.15) < 0.01
    assert torch.equal(labels[labels != -100], text[labels != -100])


@FAST
@given(st.integers(1, 8), st.integers(1, 20), st.integers(0, 10_000), st.booleans())
def test_mask_inputs_never_selects_padding(B, T, seed, only_mask):
    torch.manual_seed(seed)
    text = torch.randint(0, 5, (B, T))  # plenty of padding (id 0)
    masked_text, labels = bert.mask_inputs(text, 5, 5, pad_ind=0, mask_rate=0.5, only_mask=only_mask)
    padding = text == 0
    assert torch.all(labels[padding] == -100) and torch.equal(masked_text[padding], text[padding])
    if only_mask:
        selected = labels != -100
        assert torch.all(masked_text[selected] == 5) and torch.equal(masked_text[~selected], text[~selected])


@pytest.mark.slow
def test_first_pretraining_loss_is_near_ln_vocab_and_the_step_updates_weights():
    torch.manual_seed(1234)
    model = bert.BertModel(2, 100, 64, 4, 0.1, 0.1).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    loss = bert.pretrain_step(model, optimizer, torch.randint(1, 100, (128, 128)), 100, 100)
    assert abs(loss - math.log(100)) < 0.3
    changed = [name for name, p in model.named_parameters() if not torch.equal(p, before[name])]
    assert "mask_pred.weight" in changed and "embed.weight" in changed


def test_bert_output_shape_and_mask_token_embedding():
    model = bert.BertModel(1, 10, 16, 4, 0.1, 0.1)
    assert model.embed.num_embeddings == 11
    assert model(torch.randint(0, 11, (3, 2))).shape == (3, 2, 10)


# ---------------------------------------------------------------- causal LM


def test_seed_000_parameter_counts():
    torch.manual_seed(0)
    base = causal_lm.TransformerModel(50001, 200, 2, 200, 4, 0.2)
    assert causal_lm.count_parameters(base) == 10_968_200
    assert causal_lm.count_parameters(causal_lm.ClassificationHead(200, 2)) == 402
    assert causal_lm.count_parameters(causal_lm.LMHead(200, 50001)) == 10_050_201
    assert causal_lm.closed_form_parameter_count(50001, 200, 2, 200, 4) == {
        "base": 10_968_200,
        "lm_head": 10_050_201,
        "classification_head": 402,
    }


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    ntoken=st.integers(2, 300),
    heads=st.integers(1, 4),
    head_dim=st.integers(1, 8),
    d_hid=st.integers(1, 64),
    nlayers=st.integers(1, 3),
    n_classes=st.integers(2, 5),
)
def test_closed_form_agrees_with_the_module(ntoken, heads, head_dim, d_hid, nlayers, n_classes):
    d_model = heads * head_dim
    counts = causal_lm.closed_form_parameter_count(ntoken, d_model, heads, d_hid, nlayers, n_classes)
    assert counts["base"] == causal_lm.count_parameters(causal_lm.TransformerModel(ntoken, d_model, heads, d_hid, nlayers))
    assert counts["lm_head"] == causal_lm.count_parameters(causal_lm.LMHead(d_model, ntoken))
    assert counts["classification_head"] == causal_lm.count_parameters(causal_lm.ClassificationHead(d_model, n_classes))


def test_square_subsequent_mask():
    mask = causal_lm.generate_square_subsequent_mask(4)
    assert mask.shape == (4, 4) and mask.dtype == torch.float32
    assert torch.all(mask.tril() == 0) and torch.all(mask.triu(1)[mask.triu(1) != 0] == float("-inf"))
    assert torch.isinf(mask).sum() == 6


def assert_causal(logits_of, vocab, T, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (2, T), generator=g)
    t = int(torch.randint(0, T, (1,), generator=g))
    changed = ids.clone()
    changed[:, t] = (changed[:, t] % (vocab - 1)) + 1
    before, after = logits_of(ids), logits_of(changed)
    assert torch.allclose(before[:, :t], after[:, :t], atol=1e-5)


@FAST
@given(st.integers(1, 8), st.integers(0, 1000))
def test_causal_lm_is_causal(T, seed):
    torch.manual_seed(seed)
    model = causal_lm.TransformerModel(20, 8, 2, 16, 2, 0.0).eval()
    assert_causal(model, 20, T, seed)


@FAST
@given(st.integers(1, 8), st.integers(0, 1000))
def test_gpt_is_causal(T, seed):
    torch.manual_seed(seed)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8)).eval()
    assert_causal(lambda ids: model(ids)[0], 20, T, seed)


# ---------------------------------------------------------------- minGPT


@pytest.fixture(scope="module")
def toy_corpus():
    from graders.build import REPO_ROOT

    sentences = (REPO_ROOT / "fixtures" / "gpt" / "corpus" / "toy_corpus.txt").read_text().splitlines()
    vocab = gpt.Vocabulary(sentences)
    return vocab, gpt.LanguageModelingDataset([vocab.encode(s) for s in sentences])


def test_dataset_shifts_targets_by_one(toy_corpus):
    vocab, dataset = toy_corpus
    assert isinstance(dataset, torch.utils.data.Dataset)
    x, y = dataset[0]
    ids = vocab.encode("She rubs a cat and dog.")
    assert x.tolist() == ids[:-1] and y.tolist() == ids[1:]


def test_collate_pads_x_and_ignores_padding_in_y():
    X, Y = gpt.lm_collate_fn([(torch.tensor([1, 2, 3]), torch.tensor([2, 3, 4])), (torch.tensor([5]), torch.tensor([6]))])
    assert X.tolist() == [[1, 2, 3], [5, gpt.PAD_ID, gpt.PAD_ID]]
    assert Y.tolist() == [[2, 3, 4], [6, gpt.IGNORE_INDEX, gpt.IGNORE_INDEX]]


@pytest.mark.slow
def test_gpt_learns_the_toy_corpus_and_generates_greedily(toy_corpus):
    vocab, dataset = toy_corpus
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=len(vocab), block_size=16))
    losses = gpt.train_language_model(model, dataset, max_iters=200)
    assert sum(losses[-10:]) / 10 < 0.7
    model.eval()
    prompt = torch.tensor([vocab.encode("She rubs")])
    first, second = model.generate(prompt, 6), model.generate(prompt, 6)
    assert torch.equal(first, second)
    logits, _ = model(prompt)
    assert first[0, 2] == logits[0, -1].argmax()


def test_generate_crops_the_context_to_block_size():
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=1, n_embd=8)).eval()
    out = model.generate(torch.randint(0, 10, (2, 6)), 5)
    assert out.shape == (2, 11)


def test_top_k_sampling_stays_in_the_top_k():
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=30, block_size=8, n_layer=1, n_head=1, n_embd=8)).eval()
    prompt = torch.randint(0, 30, (1, 3))
    top3 = model(prompt)[0][0, -1].topk(3).indices.tolist()
    draws = {model.generate(prompt, 1, do_sample=True, top_k=3)[0, -1].item() for _ in range(40)}
    assert draws <= set(top3)
    assert model.generate(prompt, 1, do_sample=True, top_k=1)[0, -1] == model.generate(prompt, 1)[0, -1]
