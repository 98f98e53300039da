"""The student template is generated from the reference, is up to date, and keeps every signature."""

import importlib
import inspect

import pytest

from graders.assignment import import_package
from graders.build import TemplateError, python_template, template_files
from tests.course import BERT, CAUSAL_LM, GPT, PACKS

MODULES = [(pack, path.stem) for pack in PACKS for path in sorted(pack.reference_dir.glob("*.py"))
           if path.name != "__init__.py"]


@pytest.mark.parametrize("pack", PACKS, ids=lambda pack: pack.name)
def test_committed_template_is_up_to_date(pack):
    expected = template_files(pack)
    committed = {path.name: path.read_text() for path in pack.template_dir.iterdir() if path.is_file()}
    stale = sorted(name for name in expected.keys() | committed.keys() if expected.get(name) != committed.get(name))
    assert not stale, f"{pack.template_dir} is out of date in {stale}: run `grade build --template`"


def imported(folder, module):
    """A module of a reference or template package, imported under a name of its own."""
    package = f"_{folder.parent.name}_{folder.name}"
    import_package(package, folder)
    return importlib.import_module(f"{package}.{module}")


def public_members(module):
    return {
        name: obj
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == module.__name__
    }


@pytest.mark.parametrize(("pack", "name"), MODULES, ids=[name for _, name in MODULES])
def test_template_keeps_the_reference_signatures(pack, name):
    reference, template = imported(pack.reference_dir, name), imported(pack.template_dir, name)
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

    attention, encoder, bert, sentiment = (imported(BERT.template_dir, name)
                                           for name in ("attention", "encoder", "bert", "sentiment"))
    causal_lm, gpt = imported(CAUSAL_LM.template_dir, "causal_lm"), imported(GPT.template_dir, "gpt")

    calls = [
        ("scaled_dot_product", lambda: attention.scaled_dot_product(*[torch.zeros(1, 1, 2, 2)] * 3)),
        ("MultiHeadAttention.__init__", lambda: attention.MultiHeadAttention(4, 2, 0.0)),
        ("PositionalEncoding.__init__", lambda: encoder.PositionalEncoding(4)),
        ("TransformerBlock.__init__", lambda: encoder.TransformerBlock(4, 2, 0.0, 0.0)),
        ("BertModel.__init__", lambda: bert.BertModel(1, 10, 4, 2, 0.0, 0.0)),
        ("mask_inputs", lambda: bert.mask_inputs(torch.ones(2, 2, dtype=torch.long), 10, 10)),
        ("binary_accuracy", lambda: sentiment.binary_accuracy(torch.zeros(2), torch.zeros(2))),
        ("generate_square_subsequent_mask", lambda: causal_lm.generate_square_subsequent_mask(3)),
        ("PositionalEncoding.__init__", lambda: causal_lm.PositionalEncoding(4)),
        ("closed_form_parameter_count", lambda: causal_lm.closed_form_parameter_count(10, 4, 2, 4, 1)),
        ("lm_collate_fn", lambda: gpt.lm_collate_fn([(torch.ones(2), torch.ones(2))])),
        ("GPT.__init__", lambda: gpt.GPT(gpt.GPTConfig(vocab_size=5, block_size=4))),
        ("LanguageModelingDataset.__init__", lambda: gpt.LanguageModelingDataset([[1, 2]])),
    ]
    for qualname, call in calls:
        with pytest.raises(NotImplementedError, match=rf"^{qualname} is not implemented yet\. TODO: \S"):
            call()


@pytest.mark.parametrize("pack", [BERT, CAUSAL_LM], ids=lambda pack: pack.name)
def test_answers_template_is_blank(pack):
    import tomllib

    answers = tomllib.loads((pack.template_dir / pack.answers_file).read_text())
    reference = tomllib.loads((pack.reference_dir / pack.answers_file).read_text())
    assert answers.keys() == reference.keys() and {section for section, _ in pack.questions} == set(answers)
    for section, given in answers.items():
        assert given.keys() == reference[section].keys() and all(value == "" for value in given.values())


def test_solution_block_outside_a_function_is_refused():
    with pytest.raises(TemplateError, match="inside a function"):
        python_template("x = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION\n")


def test_unclosed_solution_block_is_refused():
    with pytest.raises(TemplateError, match="never closed"):
        python_template("def f():\n    # BEGIN SOLUTION\n    return 1\n")


def test_reference_has_a_solution_block_in_every_module():
    assert len(MODULES) == 6
    for pack, name in MODULES:
        assert "# BEGIN SOLUTION" in (pack.reference_dir / f"{name}.py").read_text()
