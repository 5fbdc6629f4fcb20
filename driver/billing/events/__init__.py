"""The event catalogue as code: the JSON Schemas of docs/events/ (`schemas`), and the operator
commands `billing events replay` / `retry-dead` (`billing.events.replay`)."""
