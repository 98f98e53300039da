"""The BERT homework's checks, one module per part family. Importing one registers its checks."""
