"""The checks of the Transformers assignment, one module per part family. Importing one registers its checks."""
