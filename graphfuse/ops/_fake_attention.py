"""Fake (meta) impls of the fused attention ops."""
