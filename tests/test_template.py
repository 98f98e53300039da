"""The student template is generated from the reference, is up to date, and keeps every signature."""

import importlib
import inspect

import pytest

from graders.build import TemplateError, python_template, template_files
from tests.course import REFERENCE_DIR, TEMPLATE_DIR

MODULES = ["attention", "encoder", "bert", "sentiment", "causal_lm", "gpt"]


def test_committed_template_is_up_to_date():
    expected = template_files()
    committed = {path.name: path.read_text() for path in TEMPLATE_DIR.iterdir() if path.is_file()}
    stale = sorted(name for name in expected.keys() | committed.keys() if expected.get(name) != committed.get(name))
    assert not stale, f"student_template/ is out of date in {stale}: run `grade build --template`"


def public_members(module):
    return {
        name: obj
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == module.__name__
    }


@pytest.mark.parametrize("name", MODULES)
def test_template_keeps_the_reference_signatures(name):
    reference = importlib.import_module(f"reference.{name}")
    template = importlib.import_module(f"student_template.{name}")
    ref_members, tpl_members = public_members(reference), public_members(template)
    assert ref_members.keys() == tpl_members.keys()
    for member, ref_obj in ref_members.items():
        tpl_obj = tpl_members[member]
        if inspect.isclass(ref_obj):
            for method in ("__init__", "forward", "generate", "__getitem__", "__len__"):
                if method in vars(ref_obj):
                    assert inspect.signature(vars(ref_obj)[method]) == inspect.signature(vars(tpl_obj)[method])
        else:
            assert inspect.signature(ref_obj) == inspect.signature(tpl_obj)


def test_every_todo_raises_not_implemented_naming_what_to_implement():
    import torch

    from student_template import attention, bert, causal_lm, encoder, gpt, sentiment

    calls = {
        "scaled_dot_product": lambda: attention.scaled_dot_product(*[torch.zeros(1, 1, 2, 2)] * 3),
        "MultiHeadAttention.__init__": lambda: attention.MultiHeadAttention(4, 2, 0.0),
        "PositionalEncoding.__init__": lambda: encoder.PositionalEncoding(4),
        "TransformerBlock.__init__": lambda: encoder.TransformerBlock(4, 2, 0.0, 0.0),
        "BertModel.__init__": lambda: bert.BertModel(1, 10, 4, 2, 0.0, 0.0),
        "mask_inputs": lambda: bert.mask_inputs(torch.ones(2, 2, dtype=torch.long), 10, 10),
        "binary_accuracy": lambda: sentiment.binary_accuracy(torch.zeros(2), torch.zeros(2)),
        "generate_square_subsequent_mask": lambda: causal_lm.generate_square_subsequent_mask(3),
        "closed_form_parameter_count": lambda: causal_lm.closed_form_parameter_count(10, 4, 2, 4, 1),
        "lm_collate_fn": lambda: gpt.lm_collate_fn([(torch.ones(2), torch.ones(2))]),
        "GPT.__init__": lambda: gpt.GPT(gpt.GPTConfig(vocab_size=5, block_size=4)),
        "LanguageModelingDataset.__init__": lambda: gpt.LanguageModelingDataset([[1, 2]]),
    }
    for qualname, call in calls.items():
        with pytest.raises(NotImplementedError, match=rf"^{qualname} is not implemented yet\. TODO: \S"):
            call()


def test_answers_template_is_blank():
    import tomllib

    answers = tomllib.loads((TEMPLATE_DIR / "answers.toml").read_text())
    assert answers["numeric"] and all(value == "" for value in answers["numeric"].values())
    assert answers["written"] and all(value == "" for value in answers["written"].values())


def test_solution_block_outside_a_function_is_refused():
    with pytest.raises(TemplateError, match="inside a function"):
        python_template("x = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION\n")


def test_unclosed_solution_block_is_refused():
    with pytest.raises(TemplateError, match="never closed"):
        python_template("def f():\n    # BEGIN SOLUTION\n    return 1\n")


def test_reference_has_a_solution_block_in_every_module():
    for name in MODULES:
        assert "# BEGIN SOLUTION" in (REFERENCE_DIR / f"{name}.py").read_text()
