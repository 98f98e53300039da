"""python -m graders.packs.transformers.finetune: build or find the feature caches (see prepare.py)."""

from .prepare import main

main()
