"""The minGPT checks. Importing a module registers its checks."""
