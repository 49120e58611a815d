"""Compression as parts: compressors (compressor.py and one module each), the error-feedback
memory (memory.py), the exchanges that carry payloads (exchange_parts.py over exchange.py),
which exchange carries which payload (pairing.py) and ratio controllers (ratio.py); joined
by `repro.strategies.compressed_sgd`."""
