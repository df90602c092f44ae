"""Fake (meta) impls of the paged decode-attention ops."""
