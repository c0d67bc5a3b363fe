"""The simulated agents: their tools, models, turn counts and how they issue tool calls.

Tool latencies are lognormal (median, σ): the body of real API latency distributions, with a
right tail that is heavy but bounded in practice (σ 0.25–0.4 puts p99 at 1.8–2.5× and
p99.99 at 2.5–4.4× the median). Injected slow steps are 6–12× the median, so the tails of
normal traffic stay well below them; see docs/simulator.md for the overlap that remains.

Two ways of issuing tool calls, because real agents do both:
- `parallel`: one LLM turn issues independent calls that run concurrently (OpenAI-style
  parallel tool calls); none consumes another's output.
- `chain`: calls consume earlier calls' output (search → read the file found → patch it).
  With declared dependencies one turn's calls run one after another and `depends_on` says
  so; in evidence mode (evidence.py) the output travels the way real agents pass it.

For evidence mode each tool also says what it returns (`result`: a small body realistic for
the tool, and the distinctive values in it that later calls may quote), which arguments it can
fill from which earlier tool's result (`feeds`), and each agent which follow-up calls its own
code runs on a result without asking the model (`code_chains`: search → read the top hit).
Values are what small real systems use: short ids (c7, A482, SKU-31), small integers, common
words; a value passed on may be written differently (`forms`: upper-cased, inside a URL or a SQL
statement). Nothing here avoids a value two unrelated calls happen to share: real APIs do not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

ArgsFn = Callable[[np.random.Generator], dict]
# (rng, the call's arguments) → (result body, {field: distinctive values later calls may quote})
ResultFn = Callable[[np.random.Generator, dict], tuple[object, dict[str, list[str]]]]


def _acknowledged(rng: np.random.Generator, args: dict) -> tuple[object, dict[str, list[str]]]:
    return {"ok": True}, {}


@dataclass(frozen=True)
class Tool:
    name: str
    median_ms: float
    sigma: float
    args: ArgsFn
    kind: str = "tool"  # or "retrieval"
    cacheable: bool = False  # a result cache (second release onwards) makes it faster
    timeout_ms: float = 15_000.0
    result: ResultFn = field(default=_acknowledged, compare=False)
    # {earlier tool: {argument: the field of that tool's result it takes}}
    feeds: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)
    # {argument: how a value taken from a result is written into it}: "upper" (the model
    # upper-cases the id), or a template with {} (inside a URL, a SQL statement); default as is.
    forms: Mapping[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Agent:
    name: str
    model: str
    model_params_b: float
    min_turns: int
    max_turns: int
    pattern: str  # "parallel" | "chain"
    tools: tuple[Tool, ...]
    system_tokens: tuple[int, int]
    final_tokens: tuple[int, int]
    weight: float
    max_calls: int = 3
    code_chains: tuple[tuple[str, str], ...] = ()  # (tool, follow-up its result triggers)


def _id(rng: np.random.Generator, prefix: str, digits: int = 6) -> str:
    return f"{prefix}{int(rng.integers(10 ** (digits - 1), 10**digits))}"


def short_id(rng: np.random.Generator, prefix: str = "") -> str:
    """An id as small systems hand them out: a prefix and 1–4 digits (c7, A482, 1042)."""
    return f"{prefix}{int(rng.integers(1, 10 ** int(rng.integers(1, 5))))}"


_CITIES = ["Lisbon", "Osaka", "Denver", "Nairobi", "Oslo", "Lima", "Hanoi", "Porto", "Austin", "Seoul",
           "Tunis", "Quito", "Perth", "Riga", "Cusco", "Kyoto"]
_WORDS = ["wireless", "charger", "boots", "waterproof", "jacket", "usb-c", "hub", "laptop", "stand",
          "coffee", "grinder", "running", "shoes", "desk", "lamp", "backpack", "merino", "socks"]
_CODE = ["retry budget", "parse_config", "TokenBucket", "flaky test", "null pointer", "migration 0042",
         "rate limiter", "cache key", "timezone bug", "pagination cursor", "serializer", "deadlock"]
_TOPICS = ["solid-state batteries", "HBM4 supply", "EU AI act timeline", "RISC-V servers",
           "heat pumps in cold climates", "grid storage costs", "LLM inference pricing",
           "carbon capture", "desalination energy use", "small modular reactors"]


def _words(rng: np.random.Generator, pool: list[str], n: int) -> str:
    return " ".join(pool[int(i)] for i in rng.choice(len(pool), size=n, replace=False))


def _date(rng: np.random.Generator) -> str:
    return f"2026-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}"


def _token(rng: np.random.Generator, n: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz0123456789") -> str:
    """An opaque id with at least one letter and one digit: it looks like no word and no number."""
    while True:
        text = "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size=n))
        if any(c.isdigit() for c in text) and any(c.isalpha() for c in text):
            return text


def _hexid(rng: np.random.Generator, n: int) -> str:
    return _token(rng, n, "0123456789abcdef")


def _some(rng: np.random.Generator, low: int, high: int, draw: Callable[[], str]) -> list[str]:
    """Between low and high distinct values from draw()."""
    n = int(rng.integers(low, high + 1))
    values: list[str] = []
    while len(values) < n:
        value = draw()
        if value not in values:
            values.append(value)
    return values


# --- results (evidence mode) --------------------------------------------------------------
# Bodies hold the values a later call quotes, plus the trivial ones every API repeats (true,
# "en", "EUR", small counts): those prove nothing and a detector must not read them as a link.

_KB_TITLES = ["Return policy", "Shipping times by region", "Changing a delivery address", "Refund timelines",
              "Warranty claims", "Gift cards", "Cancelling an order"]
_HEADLINES = ["An overview", "What changed this year", "Costs compared", "A primer", "Field report",
              "Open questions"]
_PAGE_TEXT = ["Prices fell faster than forecast as capacity came online.",
              "Analysts disagree on how quickly the supply chain can scale.",
              "Early deployments report lower costs but uneven reliability."]
_SNIPPETS = ["def take(self, n=1):\n    self.refill()\n    return self.tokens >= n",
             "class RetryBudget:\n    def allow(self):\n        return self.spent < self.limit",
             "def parse_config(path):\n    with open(path) as fh:\n        return load(fh)",
             "if cursor is None:\n    return first_page()\nreturn page_after(cursor)"]
_HOTELS = ["Hotel Aurora", "Casa Verde", "The Linden", "Harbour Inn", "Pension Sol", "Grand Meridian"]


def _customer(r: np.random.Generator, a: dict):
    orders = _some(r, 1, 3, lambda: short_id(r, "A"))
    return ({"customer_id": a["customer_id"], "tier": str(r.choice(["free", "pro", "enterprise"])),
             "open_orders": orders, "email_verified": True, "lang": "en"},
            {"customer_id": [a["customer_id"]], "order_id": orders})


def _order(r: np.random.Generator, a: dict):
    tracking, payment = _id(r, "1Z", 9), "pi_" + _token(r, 12)
    return ({"order_id": a["order_id"], "status": str(r.choice(["processing", "shipped", "delivered"])),
             "tracking": tracking, "payment_id": payment, "total": round(float(r.uniform(8, 400)), 2),
             "currency": "EUR", "items": int(r.integers(1, 4))},
            {"order_id": [a["order_id"]], "tracking": [tracking], "payment_id": [payment]})


def _shipment(r: np.random.Generator, a: dict):
    return ({"tracking": a["tracking"], "status": str(r.choice(["in_transit", "out_for_delivery", "delivered"])),
             "eta": _date(r), "carrier": "UPS", "signature_required": bool(r.random() < 0.3)}, {})


def _articles(r: np.random.Generator, a: dict):
    ids = _some(r, 1, 3, lambda: "kb_" + _token(r, 8))
    return {"articles": [{"id": i, "title": str(r.choice(_KB_TITLES))} for i in ids], "lang": "en"}, {}


def _ticket(r: np.random.Generator, a: dict):
    return {"ticket_id": _id(r, "TCK-", 7), "status": "open", "lang": "en", "notify": True}, {}


def _refund(r: np.random.Generator, a: dict):
    return {"refund_id": "re_" + _token(r, 12), "status": "pending", "amount": a["amount"]}, {}


def _code_matches(r: np.random.Generator, a: dict):
    paths = _some(r, 1, 4, lambda: f"src/{_words(r, _CODE, 1).replace(' ', '_')}/mod_{int(r.integers(100, 1000))}.py")
    return ({"matches": [{"path": p, "line": int(r.integers(1, 400))} for p in paths], "total": len(paths),
             "truncated": False}, {"path": paths})


def _file(r: np.random.Generator, a: dict):
    sha = _hexid(r, 7)
    return ({"path": a["path"], "sha": sha, "lines": int(r.integers(20, 600)), "content": str(r.choice(_SNIPPETS))},
            {"path": [a["path"]], "sha": [sha]})


def _patched(r: np.random.Generator, a: dict):
    return {"file": a["file"], "applied": a["hunks"], "sha": _hexid(r, 7)}, {"path": [a["file"]]}


def _lint(r: np.random.Generator, a: dict):
    errors = int(r.choice([0, 0, 0, 1, 2]))
    return {"ok": errors == 0, "errors": errors, "warnings": int(r.integers(0, 5))}, {}


def _tests(r: np.random.Generator, a: dict):
    return {"passed": int(r.integers(5, 120)), "failed": int(r.choice([0, 0, 0, 1])), "skipped": 0}, {}


def _search_results(r: np.random.Generator, a: dict):
    ids = _some(r, 2, 5, lambda: str(int(r.integers(100, 100_000))))
    return {"results": [{"id": i, "title": str(r.choice(_HEADLINES))} for i in ids], "lang": "en"}, {"id": ids}


def _page(r: np.random.Generator, a: dict):
    return ({"url": a["url"], "status": 200, "lang": "en", "words": int(r.integers(300, 4000)),
             "text": str(r.choice(_PAGE_TEXT))}, {})


def _chunks(r: np.random.Generator, a: dict):
    ids = _some(r, 2, 4, lambda: "chk_" + _token(r, 8))
    return {"chunks": [{"id": i, "score": round(float(r.uniform(0.6, 0.95)), 3)} for i in ids]}, {}


def _offer_id(r: np.random.Generator) -> str:
    return "of" + _token(r, 4)


def _flights(r: np.random.Generator, a: dict):
    ids = _some(r, 2, 4, lambda: _offer_id(r))
    return ({"offers": [{"offer_id": i, "price": round(float(r.uniform(60, 900)), 2), "currency": "EUR",
                         "stops": int(r.integers(0, 3))} for i in ids]}, {"offer_id": ids})


def _hotels(r: np.random.Generator, a: dict):
    ids = _some(r, 2, 4, lambda: _offer_id(r))
    return ({"offers": [{"offer_id": i, "name": str(r.choice(_HOTELS)),
                         "price_per_night": round(float(r.uniform(50, 400)), 2), "currency": "EUR"} for i in ids]},
            {"offer_id": ids})


def _weather(r: np.random.Generator, a: dict):
    low = int(r.integers(-5, 20))
    return {"high_c": low + int(r.integers(3, 12)), "low_c": low, "summary": str(r.choice(
        ["sunny", "cloudy", "light rain", "windy", "clear"]))}, {}


def _converted(r: np.random.Generator, a: dict):
    rate = round(float(r.uniform(0.5, 160)), 4)
    return {"to": a["to"], "rate": rate, "converted": round(a["amount"] * rate, 2)}, {}


def _booking(r: np.random.Generator, a: dict):
    return {"booking_ref": "BK" + _token(r, 8).upper(), "status": "confirmed"}, {}


def _inventory(r: np.random.Generator, a: dict):
    skus = _some(r, 1, 3, lambda: short_id(r, "SKU-"))
    return ({"items": [{"sku": s, "stock": int(r.integers(0, 40))} for s in skus], "warehouse": a["warehouse"]},
            {"sku": skus})


def _price(r: np.random.Generator, a: dict):
    return {"sku": a["sku"], "price": round(float(r.uniform(4, 300)), 2), "currency": "EUR"}, {}


def _promotions(r: np.random.Generator, a: dict):
    return ({"cart_id": a["cart_id"], "promotions": [{"percent_off": int(r.choice([5, 10, 15]))}], "eligible": True,
             "currency": "EUR"}, {})


def _order_rows(r: np.random.Generator, a: dict):
    return ({"rows": [{"status": str(r.choice(["processing", "shipped", "delivered"])),
                       "total": round(float(r.uniform(8, 400)), 2)}], "count": 1}, {})


def _reservation(r: np.random.Generator, a: dict):
    return {"reservation_id": "res_" + _token(r, 10), "expires_s": 900}, {}


SUPPORT = Agent(
    name="customer-support", model="llama-3.1-70b", model_params_b=70, min_turns=2, max_turns=6,
    pattern="parallel", system_tokens=(1500, 2600), final_tokens=(120, 420), weight=0.30,
    tools=(
        Tool("lookup_customer", 120, 0.30, lambda r: {"customer_id": short_id(r, "c")}, cacheable=True,
             result=_customer),
        Tool("get_order", 180, 0.30, lambda r: {"order_id": short_id(r, "A"),
                                                 "include_items": bool(r.random() < 0.5)}, cacheable=True,
             result=_order, feeds={"lookup_customer": {"order_id": "order_id"}}),
        Tool("get_shipment", 260, 0.35, lambda r: {"tracking": _id(r, "1Z", 9)},
             result=_shipment, feeds={"get_order": {"tracking": "tracking"}}),
        Tool("search_kb", 90, 0.30, lambda r: {"query": _words(r, _WORDS, 3), "top_k": 5},
             kind="retrieval", cacheable=True, result=_articles),
        Tool("create_ticket", 320, 0.30, lambda r: {"customer_id": short_id(r, "c"),
                                                     "priority": str(r.choice(["low", "normal", "high"])),
                                                     "subject": _words(r, _WORDS, 4)},
             result=_ticket, feeds={"lookup_customer": {"customer_id": "customer_id"}}),
        Tool("issue_refund", 420, 0.30, lambda r: {"order_id": short_id(r, "A"),
                                                    "amount": round(float(r.uniform(5, 300)), 2)},
             result=_refund, feeds={"get_order": {"order_id": "order_id", "payment_id": "payment_id"}}),
        # The helpdesk's reporting database, queried in SQL with an order id the customer has.
        Tool("query_orders", 150, 0.30, lambda r: {"sql": f"SELECT status, total FROM orders WHERE order_id = "
                                                           f"'{short_id(r, 'A')}'"},
             result=_order_rows, feeds={"lookup_customer": {"sql": "order_id"}},
             forms={"sql": "SELECT status, total FROM orders WHERE order_id = '{}'"}),
    ),
    code_chains=(("get_order", "get_shipment"),),  # the helpdesk code tracks every order it opens
)

CODING = Agent(
    name="coding-agent", model="qwen2.5-coder-32b", model_params_b=32, min_turns=4, max_turns=12,
    pattern="chain", system_tokens=(3000, 4800), final_tokens=(200, 700), weight=0.20, max_calls=3,
    tools=(
        Tool("search_code", 350, 0.35, lambda r: {"query": _words(r, _CODE, 2), "path": "src/"},
             result=_code_matches),
        Tool("read_file", 45, 0.30, lambda r: {"path": f"src/{_words(r, _CODE, 1).replace(' ', '_')}/"
                                                        f"mod_{int(r.integers(1, 999))}.py"},
             result=_file, feeds={"search_code": {"path": "path"}}),
        Tool("apply_patch", 70, 0.30, lambda r: {"file": f"src/mod_{int(r.integers(1, 999))}.py",
                                                  "hunks": int(r.integers(1, 6))},
             result=_patched, feeds={"read_file": {"file": "path", "base_sha": "sha"}}),
        Tool("run_linter", 1200, 0.30, lambda r: {"paths": [f"src/mod_{int(r.integers(1, 999))}.py"]},
             result=_lint, feeds={"apply_patch": {"paths": "path"}}),
        Tool("run_tests", 4500, 0.30, lambda r: {"selector": f"tests/test_{int(r.integers(1, 400))}.py",
                                                  "fail_fast": bool(r.random() < 0.5)},
             timeout_ms=60_000.0, result=_tests),
    ),
    # A retrieval step reads the top hits of every search; every patch is linted at once.
    code_chains=(("search_code", "read_file"), ("apply_patch", "run_linter")),
)

TRAVEL = Agent(
    name="travel-planner", model="llama-3.1-70b", model_params_b=70, min_turns=2, max_turns=6,
    pattern="parallel", system_tokens=(1800, 3000), final_tokens=(200, 600), weight=0.20,
    tools=(
        Tool("search_flights", 900, 0.40, lambda r: {"from": str(r.choice(_CITIES)), "to": str(r.choice(_CITIES)),
                                                      "date": _date(r), "adults": int(r.integers(1, 4))},
             cacheable=True, result=_flights),
        Tool("search_hotels", 700, 0.40, lambda r: {"city": str(r.choice(_CITIES)), "checkin": _date(r),
                                                     "nights": int(r.integers(1, 9))}, cacheable=True,
             result=_hotels),
        Tool("get_weather", 150, 0.30, lambda r: {"city": str(r.choice(_CITIES)), "date": _date(r)},
             cacheable=True, result=_weather),
        Tool("convert_currency", 80, 0.25, lambda r: {"amount": round(float(r.uniform(20, 4000)), 2),
                                                       "to": str(r.choice(["EUR", "JPY", "USD", "GBP"]))},
             result=_converted),
        Tool("book_option", 1200, 0.35, lambda r: {"offer_id": _offer_id(r).upper()}, result=_booking,
             feeds={"search_flights": {"offer_id": "offer_id"}, "search_hotels": {"offer_id": "offer_id"}},
             forms={"offer_id": "upper"}),
    ),
)

CHECKOUT = Agent(
    name="checkout-agent", model="llama-3.1-8b", model_params_b=8, min_turns=1, max_turns=5,
    pattern="parallel", system_tokens=(900, 1600), final_tokens=(60, 220), weight=0.20,
    tools=(
        Tool("search_inventory", 220, 0.30, lambda r: {"query": _words(r, _WORDS, 2),
                                                        "warehouse": str(r.choice(["eu-1", "us-2", "ap-1"]))},
             result=_inventory),
        Tool("get_price", 90, 0.25, lambda r: {"sku": short_id(r, "SKU-")}, cacheable=True, result=_price,
             feeds={"search_inventory": {"sku": "sku"}}),
        Tool("check_promotions", 120, 0.30, lambda r: {"cart_id": short_id(r, "K")}, cacheable=True,
             result=_promotions),
        Tool("reserve_item", 300, 0.30, lambda r: {"sku": short_id(r, "SKU-"), "qty": int(r.integers(1, 4))},
             result=_reservation, feeds={"search_inventory": {"sku": "sku"}}),
    ),
    code_chains=(("search_inventory", "get_price"),),  # the cart prices every item it finds
)

RESEARCH = Agent(
    name="research-assistant", model="llama-3.1-70b", model_params_b=70, min_turns=3, max_turns=10,
    pattern="chain", system_tokens=(1600, 2800), final_tokens=(300, 900), weight=0.10, max_calls=2,
    tools=(
        Tool("web_search", 800, 0.40, lambda r: {"q": _words(r, _TOPICS, 1) + f" {int(r.integers(2019, 2027))}"},
             result=_search_results),
        Tool("fetch_page", 600, 0.40, lambda r: {"url": f"https://example.org/a/{int(r.integers(100, 100_000))}"},
             result=_page, feeds={"web_search": {"url": "id"}}, forms={"url": "https://example.org/a/{}"}),
        Tool("vector_search", 90, 0.30, lambda r: {"query": _words(r, _TOPICS, 1), "k": 8}, kind="retrieval",
             result=_chunks),
    ),
    code_chains=(("web_search", "fetch_page"),),  # the browsing step opens the top results
)

AGENTS: tuple[Agent, ...] = (SUPPORT, CODING, TRAVEL, CHECKOUT, RESEARCH)

# The tool a regressed release makes slower, and by how much (see generate.release_effects).
REGRESSED_TOOL = "search_inventory"
REGRESSION_FACTOR = 2.0
CACHE_SPEEDUP = 0.75
