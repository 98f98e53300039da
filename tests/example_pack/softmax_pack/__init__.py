"""The example assignment pack of docs/authoring.md: one function, two checks."""
