"""The search both tools share: the query vector beside keyword search, fused (retrieval.py)."""
