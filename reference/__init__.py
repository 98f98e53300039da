"""The instructor's solutions, one package per homework (reference/<pack>/, named by the pack's
manifest). Never shipped to students, never readable by a worker."""
