"""The customer portal (docs/customers.md): single-use links (`links`), then a session bound to one customer."""
