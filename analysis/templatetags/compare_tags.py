"""Template filters of the comparison pages."""

from django import template

from analysis.dashboard.charts import fmt_ms

register = template.Library()


@register.filter
def signed_ms(value):
    """+1.20 s / −340.0 ms: an item's share of a difference."""
    if value is None:
        return "–"
    return ("+" if value >= 0 else "−") + fmt_ms(abs(value))
