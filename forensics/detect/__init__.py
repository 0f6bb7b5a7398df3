"""Detectors: each module turns canonical frames into findings with the rows that prove them."""
