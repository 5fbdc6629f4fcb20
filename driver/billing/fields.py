"""The checks of a JSON document's fields: every value is checked strictly before it reaches
PostgreSQL (types, bigint range, NUL characters, lone surrogates, length), so bad input is a 4xx
with a clear message (`InputError`: an HTTP status, a code, a message), never a 500. The HTTP API
(billing.api.validation, where an InputError is an ApiError) and the providers' webhook parsers
(billing.providers.sim) use them."""

from __future__ import annotations

from datetime import datetime

BIGINT_MAX = 2**63 - 1


class InputError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def bigint_field(doc: dict, name: str) -> int:
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(400, "invalid_field", f"{name} must be an integer")
    if not -BIGINT_MAX - 1 <= value <= BIGINT_MAX:
        raise InputError(422, "invalid_input", f"{name} is out of range (a 64-bit signed integer)")
    return value


def text_field(doc: dict, name: str, *, max_len: int = 1000) -> str:
    value = doc[name]
    if not isinstance(value, str):
        raise InputError(400, "invalid_field", f"{name} must be a string")
    check_text(name, value, max_len)
    return value


def check_text(name: str, value: str, max_len: int) -> None:
    if "\x00" in value:
        raise InputError(400, "invalid_field", f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(400, "invalid_field", f"{name} is not valid Unicode (lone surrogate)") from None
    if len(value) > max_len:
        raise InputError(422, "invalid_input", f"{name} is too long (at most {max_len} characters)")


def int_field(doc: dict, name: str, low: int, high: int) -> int:
    """An integer in [low, high]: 400 when not an integer, 422 when out of range."""
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(400, "invalid_field", f"{name} must be an integer")
    if not low <= value <= high:
        raise InputError(422, "invalid_input", f"{name} must be between {low} and {high}")
    return value


def instant_field(doc: dict, name: str) -> datetime:
    """An ISO 8601 instant with its offset (e.g. 2026-09-01T00:00:00Z)."""
    value = doc[name]
    if not isinstance(value, str) or len(value) > 40:
        raise InputError(400, "invalid_field", f"{name} must be an ISO 8601 instant such as 2026-09-01T00:00:00Z")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise InputError(400, "invalid_field", f"{name} must be an ISO 8601 instant such as 2026-09-01T00:00:00Z") from None
    if parsed.tzinfo is None:
        raise InputError(400, "invalid_field", f"{name} needs its offset (Z or +hh:mm)")
    return parsed


def bool_field(doc: dict, name: str) -> bool:
    value = doc[name]
    if not isinstance(value, bool):
        raise InputError(400, "invalid_field", f"{name} must be true or false")
    return value
