"""Fault tests (issue: reruns, bad input, no corruption) and the fault-injection helpers they share."""
