"""Subscription billing and renewal engine: a thin driver over the SQL API in schema `billing`."""

__version__ = "0.1.0"
