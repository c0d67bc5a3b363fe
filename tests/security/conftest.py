"""The browser fixtures of tests/browser, for the CSP and XSS checks here."""

from tests.browser.conftest import browser_page, chromium  # noqa: F401
