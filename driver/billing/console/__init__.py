"""The operator console under /console of `billing serve` (docs/console.md): billing.console.app."""


def create_console(*args, **kwargs):
    """billing.console.app.create_console, imported on first use: billing.api.app imports this
    package, and billing.console.app imports billing.api (a module-level import would be a cycle
    for whoever imports billing.console.actions first)."""
    from billing.console.app import create_console as create

    return create(*args, **kwargs)


__all__ = ["create_console"]
