"""Template filters for token cost (analysis.costs): dollars with their significant digits,
signed differences, and "no price" where there is none, never 0."""

from __future__ import annotations

from django import template

from analysis.costs import format_usd

register = template.Library()


@register.filter
def usd(value) -> str:
    """A cost in dollars; "no price" for None."""
    return format_usd(value)


@register.filter
def usd_delta(value) -> str:
    """A signed difference in dollars; "–" when one side has no price."""
    if value is None:
        return "–"
    if value == 0:
        return "±$0"
    return ("+" if value > 0 else "−") + format_usd(abs(value))
