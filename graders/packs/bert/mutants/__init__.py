"""The BERT homework's mutants and alternatives (graders/mutants.py), one module per part family: what its
checks must catch and what they must pass. Never shipped to students."""
