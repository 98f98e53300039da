"""python -m graders.packs.bert.finetune: build or find the feature caches (see prepare.py)."""

from .prepare import main

main()
