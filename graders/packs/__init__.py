"""Assignment packs installed with the grader: one folder per assignment (graders/assignment.py)."""
