"""Communication strategies, one module per method; `base.registered()` discovers them."""
