"""Config group schemas whose packages read the composed config, kept apart from them."""
