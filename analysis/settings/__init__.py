"""Settings pages for project admins: API keys, members and roles, the audit trail, retention (read
only: it is the installation's), and the installation's model prices. Writes go through the
same services the command line uses (ingest.services, analysis.costs), which audit them."""
