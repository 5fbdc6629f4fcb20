"""The operator console under /console of `billing serve` (docs/console.md): billing.console.app."""

from billing.console.app import create_console

__all__ = ["create_console"]
