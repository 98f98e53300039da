"""The assignment packs the suite grades: the three homeworks of the course, and the one most tests
grade (`HOMEWORK`, seed 004's BERT homework: the most parts, the sandboxed fine-tuning)."""

from graders.assignment import load
from graders.ingest import SubmissionLayout

BERT, CAUSAL_LM, GPT = load("bert"), load("causal_lm"), load("gpt")
PACKS = (BERT, CAUSAL_LM, GPT)

HOMEWORK = BERT
REFERENCE_DIR = HOMEWORK.reference_dir
TEMPLATE_DIR = HOMEWORK.template_dir
REGISTRY = HOMEWORK.registry()
LAYOUT = SubmissionLayout.of(HOMEWORK)
EXPECTED_FILES = LAYOUT.expected_files
MODULE_NAMES = LAYOUT.module_names
TOP = HOMEWORK.bundle_name  # the bundle's top folder


def _whole_course() -> SubmissionLayout:
    """The three homeworks as one hand-in: what the notebook reader's tests read a notebook that
    defines names of every homework with (its modules in the course's order, so that
    `PositionalEncoding` goes to encoder.py and causal_lm.py imports it from there)."""
    layouts = [SubmissionLayout.of(pack) for pack in PACKS]
    return SubmissionLayout(
        tuple(dict.fromkeys(file for layout in layouts for file in layout.expected_files)),
        {file: names for layout in layouts for file, names in layout.module_names.items()},
        "answers.toml", {heading: question for layout in layouts for heading, question in layout.answer_headings.items()})


WHOLE_COURSE = _whole_course()


def pack_of(part: str):
    """The first of the course's packs that has the part (both `bert` and `causal_lm` have `answers`)."""
    return next(pack for pack in PACKS if part in {p.id for p in pack.rubric.parts})
