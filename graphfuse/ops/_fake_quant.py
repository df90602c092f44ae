"""Fake (meta) impls of the quantization ops."""
