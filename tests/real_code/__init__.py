"""Detector code written the way its repositories write it (copied style, not imported), for export tests."""
