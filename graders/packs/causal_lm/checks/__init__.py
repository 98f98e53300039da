"""The causal-LM checks. Importing a module registers its checks."""
