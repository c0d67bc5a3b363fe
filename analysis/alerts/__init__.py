"""Latency alerts: rules over a metric of a project's recent traffic, evaluated every minute,
notified once when they fire and once when they recover."""
