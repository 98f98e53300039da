"""All checks, one module per assignment part family. Importing this package registers them."""

from graders.checks import answers, attention, bert, causal_lm, encoder, finetune, gpt, sentiment  # noqa: F401  (registration by import)
from graders.checks.framework import REGISTRY

__all__ = ["REGISTRY"]
