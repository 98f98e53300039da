"""The engine (graders/ outside graders/packs/) names nothing of any assignment: no file a student
hands in, no graded function or class, no part, check, diagnosis or worker task of a pack.
Everything assignment-specific reaches it through the pack's manifest (graders/assignment.py).

Code is read token by token. In names and string literals, a pack's name is flagged as a whole
string (`"attention"`), as the head of a dotted id (`"mha.padding"`, `"bert.probe_model"`), as a
file name (`"gpt.py"`) or, for graded names, check ids and diagnoses, anywhere; an attribute
(`model.train()`) is another object's. Comments and docstrings are prose, where plain words
(attention, encoder, train) are English: there only file names, check ids, diagnosis ids and
graded names spelled as code (`MultiHeadAttention`, `scaled_dot_product`) count.

One word is the engine's own: "answers", the notebook's answer cells in results.json
(`submission.origin.answers`, docs/results.md) and the questions of a manifest, which the course's
part of written answers shares.
"""

import io
import re
import tokenize
from pathlib import Path

import pytest

from graders.assignment import PACKS_DIR, installed, load
from tests.course import HOMEWORK

ENGINE = Path(__file__).resolve().parent.parent / "graders"
ENGINE_VOCABULARY = {"answers"}


def engine_files():
    return sorted(path for path in ENGINE.rglob("*.py") if PACKS_DIR not in path.parents)


def pack_vocabulary(assignment):
    """(words only prose may use, words nothing may use) of one pack."""
    registry = assignment.registry()
    checks = {chk.id for found in registry.values() for chk in found}
    graded = {name for names in assignment.modules.values() for name in names}
    files = set(assignment.modules)
    plain = ({Path(file).stem for file in files} | {part.id for part in assignment.rubric.parts}) - graded - ENGINE_VOCABULARY
    distinctive = files | graded | checks | set(assignment.diagnoses)
    return plain, distinctive


def _spelled_as_code(word):
    return "_" in word or "." in word or not word.islower()


def offences(source, plain, distinctive):
    """(line, token) of every use of a pack's words in `source`."""
    found = []
    previous_significant = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text, line = token.string, token.start[0]
        prose = token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and previous_significant in (None, ":", "NEWLINE", "INDENT", "DEDENT"))
        if token.type == tokenize.NAME and previous_significant != ".":
            found += [(line, text)] if text in distinctive else []
        elif token.type in (tokenize.STRING, tokenize.COMMENT):
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*", text)) - ENGINE_VOCABULARY
            hits = {w for w in words if w in distinctive and (not prose or _spelled_as_code(w))}
            if not prose:
                hits |= {text.strip("'\"rbfu")} & plain
                hits |= {w for w in words if "." in w and w.split(".")[0] in plain}
            found += [(line, hit) for hit in sorted(hits)]
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous_significant = tokenize.tok_name[token.type] if token.type in (
                tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) else token.string
    return found


@pytest.mark.parametrize("pack", sorted(installed()))
def test_no_pack_is_named_in_the_engine(pack):
    plain, distinctive = pack_vocabulary(load(pack))
    named = [f"{path.relative_to(ENGINE.parent)}:{line}: {word}"
             for path in engine_files() for line, word in offences(path.read_text(), plain, distinctive)]
    assert named == [], "\n".join(named)


def test_the_scan_finds_each_kind_of_name():
    plain, distinctive = pack_vocabulary(HOMEWORK)
    planted = '''
def f(ctx):
    """Docstrings may say attention and encoder."""
    ctx.student.call("attention", "scaled_dot_product")  # the module and a graded name
    ctx.student.task("bert.probe_model")
    load("sentiment.py")
    return MultiHeadAttention, "mha.padding", "softmax_wrong_dim"
'''
    words = {word for _, word in offences(planted, plain, distinctive)}
    assert {"attention", "scaled_dot_product", "bert.probe_model", "sentiment.py", "MultiHeadAttention",
            "mha.padding", "softmax_wrong_dim"} <= words
    assert "encoder" not in words


# What the engine once read the assignment of a process from: a function of the engine takes the
# pack as an argument (docs/engine.md, "The pack is a value").
PROCESS_WIDE = re.compile(r"\b(current|select|chosen|chosen_or_all)\(\)|\bGRADE_ASSIGNMENT\b|\b_selected\b")


def process_wide_choices(source):
    return [f"{number}: {line.strip()}" for number, line in enumerate(source.splitlines(), 1) if PROCESS_WIDE.search(line)]


def test_no_function_of_the_engine_reads_a_process_wide_assignment():
    found = {str(path.relative_to(ENGINE.parent)): lines for path in ENGINE.rglob("*.py")
             if (lines := process_wide_choices(path.read_text()))}
    assert found == {}
    assert process_wide_choices("def f():\n    return assignment or current()\n") == ["2: return assignment or current()"]

