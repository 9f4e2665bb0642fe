"""Fetch, start and measure the systems benchmarks/peers.py compares rlog with."""
