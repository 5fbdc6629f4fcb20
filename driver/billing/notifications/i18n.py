"""The customers' languages: message catalogs and Babel's formats of dates, amounts and currencies.

    t = Translator.get("pt-BR")
    t("payment_failed.subject", number="2026-000012")    # 'Não conseguimos cobrar a fatura 2026-000012'
    t.money(123456, "BRL")                                # 'R$ 1.234,56' (a no-break space, as Babel writes it)
    t.date(instant, "America/Sao_Paulo")                  # '5 de dezembro de 2026'

A catalog is `locales/<tag>.json`: one flat object of message ids to text with `{name}`
placeholders. `en` is the reference: every other catalog has exactly its keys and the same
placeholders (test_notifications_unit fails otherwise), so a missing translation never reaches a
customer. Amounts are integers in minor units: Babel's own currency data gives each currency's
decimals (JPY none, KWD three), the same as billing.invoices.money.
"""

from __future__ import annotations

import json
import string
from datetime import date, datetime, timezone
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from babel import Locale
from babel.dates import format_date, format_datetime
from babel.numbers import format_currency, get_currency_precision

LOCALES = ("en", "pt-BR", "es", "de", "zh-CN")
DEFAULT_LOCALE = "en"
CATALOG_DIR = Path(__file__).parent / "locales"


def babel_locale(tag: str) -> Locale:
    return Locale.parse(tag.replace("-", "_"))


@lru_cache(maxsize=None)
def catalog(tag: str) -> dict[str, str]:
    return json.loads((CATALOG_DIR / f"{tag}.json").read_text(encoding="utf-8"))


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def minor_to_decimal(minor: int, currency: str) -> Decimal:
    return Decimal(int(minor)).scaleb(-get_currency_precision(currency.strip().upper()))


class Translator:
    def __init__(self, tag: str) -> None:
        self.tag = tag if tag in LOCALES else DEFAULT_LOCALE
        self.locale = babel_locale(self.tag)
        self.messages = catalog(self.tag)

    @classmethod
    @lru_cache(maxsize=None)
    def get(cls, tag: str | None) -> "Translator":
        return cls(tag or DEFAULT_LOCALE)

    def __call__(self, key: str, **values) -> str:
        text = self.messages.get(key)
        if text is None:  # a key the catalogs lack is a bug: the unit test lists the keys used
            raise KeyError(f"message {key!r} missing from the {self.tag} catalog")
        return text.format(**values) if values else text

    def money(self, minor: int, currency: str) -> str:
        currency = currency.strip().upper()
        return format_currency(minor_to_decimal(minor, currency), currency, locale=self.locale)

    def _instant(self, value: str | datetime | None, zone: str | None) -> datetime | None:
        if value is None or value == "":
            return None
        instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=timezone.utc)
        try:
            return instant.astimezone(ZoneInfo(zone or "UTC"))
        except (ZoneInfoNotFoundError, ValueError):
            return instant.astimezone(timezone.utc)

    def date(self, value: str | datetime | date | None, zone: str | None = None) -> str:
        """The local date of an instant (in `zone`), long form: 'December 5, 2026', '2026年12月5日'."""
        if isinstance(value, date) and not isinstance(value, datetime):
            return format_date(value, "long", locale=self.locale)
        instant = self._instant(value, zone)
        return "" if instant is None else format_date(instant.date(), "long", locale=self.locale)

    def datetime(self, value: str | datetime | None, zone: str | None = None) -> str:
        instant = self._instant(value, zone)
        return "" if instant is None else format_datetime(instant, "medium", tzinfo=instant.tzinfo, locale=self.locale)
