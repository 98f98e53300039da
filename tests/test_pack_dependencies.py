"""A pack declares what it imports beyond the engine (`[dependencies] runtime` in its manifest):
its student bundle and its Gradescope kit pin exactly those and the engine's own, at the lock's
versions. The gpt pack declares nothing: neither its bundle nor its kit installs transformers
(nor tokenizers, nor huggingface-hub, which only transformers brings); the bert pack's do."""

import tomllib

import pytest
from packaging.requirements import Requirement

from graders.assignment import PackError, load
from graders.bundle import student_pyproject
from graders.dependencies import ENGINE_REQUIREMENTS
from graders.gradescope_kit import pinned_requirements
from graders.lock import read_lock

HUGGING_FACE = {"transformers", "tokenizers", "huggingface-hub"}


def bundle_distributions(pack):
    lines = tomllib.loads(student_pyproject(pack))["project"]["dependencies"]
    return {Requirement(line).name: line for line in lines}


def kit_distributions(pack):
    return {Requirement(line).name: line for line in pinned_requirements(pack)}


def test_the_manifests_declare_what_their_packs_import():
    assert load("bert").runtime_dependencies == ("transformers",)
    assert load("causal_lm").runtime_dependencies == load("gpt").runtime_dependencies == ()


def test_a_pack_that_declares_nothing_gets_the_engine_alone():
    gpt, bert = load("gpt"), load("bert")
    assert not HUGGING_FACE & set(bundle_distributions(gpt)), bundle_distributions(gpt)
    assert not HUGGING_FACE & set(kit_distributions(gpt)), kit_distributions(gpt)
    assert HUGGING_FACE <= set(bundle_distributions(bert)) and HUGGING_FACE <= set(kit_distributions(bert))
    engine = {name for name, _, _ in ENGINE_REQUIREMENTS}
    assert engine <= set(bundle_distributions(gpt)) and engine - {"pytest"} <= set(kit_distributions(gpt)) | {"torch"}
    # the only difference between the two packs' pins is what transformers brings
    assert set(bundle_distributions(gpt)) < set(bundle_distributions(bert))


def test_the_pins_are_the_locks():
    lock = read_lock()
    for pack in (load("gpt"), load("bert")):
        for name, line in {**bundle_distributions(pack), **kit_distributions(pack)}.items():
            if name != "torch":
                assert Requirement(line).specifier == Requirement(f"{name}=={lock[name]}").specifier, line


@pytest.mark.parametrize("runtime", ['"transformers"', '[1]', '["transformers>=4"]'])
def test_a_declaration_that_is_not_a_list_of_names_is_refused(tmp_path, runtime):
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "__init__.py").write_text("")
    (pack / "assignment.toml").write_text(
        '[assignment]\nname = "tiny"\ntitle = "Tiny"\nreference = "."\ntemplate = "."\n'
        f'[dependencies]\nruntime = {runtime}\n[modules]\n"tiny.py" = ["f"]\n'
        '[parts.tiny]\ntitle = "Tiny"\nmodule = "tiny"\npoints = 1\n')
    with pytest.raises(PackError, match=r"\[dependencies\] runtime"):
        load(pack)
