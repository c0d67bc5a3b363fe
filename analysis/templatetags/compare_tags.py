"""Template filters of the comparison pages."""

from django import template

from analysis.units import fmt_signed_ms

register = template.Library()


@register.filter
def signed_ms(value):
    """+1.20 s / −340 ms: an item's share of a difference."""
    return fmt_signed_ms(value)
