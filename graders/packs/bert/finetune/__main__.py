"""python -m graders.packs.bert.finetune: build or find the feature caches (see warm.py)."""

from .warm import main

main()
