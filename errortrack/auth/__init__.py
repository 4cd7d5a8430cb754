"""Authentication: passwords, API tokens, login sessions."""
