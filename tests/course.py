"""The assignment most of the suite grades: the Transformers course pack, with its folders,
checks and submission layout."""

from graders.assignment import load
from graders.ingest import SubmissionLayout

COURSE = load("transformers")
REFERENCE_DIR = COURSE.reference_dir
TEMPLATE_DIR = COURSE.template_dir
GOLDEN_DIR = COURSE.golden_dir
REGISTRY = COURSE.registry()
LAYOUT = SubmissionLayout.of(COURSE)
EXPECTED_FILES = LAYOUT.expected_files
MODULE_NAMES = LAYOUT.module_names
ANSWER_HEADINGS = LAYOUT.answer_headings
TOP = COURSE.bundle_name  # the bundle's top folder
