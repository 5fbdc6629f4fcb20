"""Amounts in minor units, formatted with each currency's minor unit (ISO 4217 exponents)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

# ISO 4217 currencies whose minor unit is not 2 decimals; every other code has 2.
_EXPONENTS = {
    # no minor unit
    "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0, "RWF": 0,
    "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
    # thousandths
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    # ten-thousandths
    "CLF": 4, "UYW": 4,
}


def exponent(currency: str) -> int:
    """Decimals of the currency's minor unit (JPY 0, EUR 2, KWD 3)."""
    return _EXPONENTS.get(currency.upper(), 2)


def to_major(minor: int | Decimal, currency: str) -> Decimal:
    """Minor units to the currency's major unit, exactly (rounded half up past the minor unit)."""
    e = exponent(currency)
    value = Decimal(minor) / (Decimal(10) ** e)
    return value.quantize(Decimal(1).scaleb(-e), rounding=ROUND_HALF_UP)


def format_amount(minor: int | Decimal, currency: str) -> str:
    """1234567 EUR -> '12,345.67 EUR'; 1234 JPY -> '1,234 JPY'; -5 KWD -> '-0.005 KWD'."""
    e = exponent(currency)
    value = to_major(minor, currency)
    return f"{value:,.{e}f} {currency.upper()}"
