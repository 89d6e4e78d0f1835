"""The small core every layer stands on: errors, opset bounds, IR versions, atomic file writes, torch
release differences and optional extras. Imports nothing heavy at module level.
"""
