"""The minGPT mutants and alternatives (graders/mutants.py): what its checks must catch and pass. Never shipped to students."""
