"""The operator console under /console of `billing serve` (docs/console.md): billing.console.app
(assembly), billing.console.web (sessions, forms, pages), billing.console.routes (one router per
resource), billing.console.actions (the SQL API's functions it offers)."""
