"""The simulated agents: their tools, models, turn counts and how they issue tool calls.

Tool latencies are lognormal (median, σ): the body of real API latency distributions, with a
right tail that is heavy but bounded in practice (σ 0.25–0.4 puts p99 at 1.8–2.5× and
p99.99 at 2.5–4.4× the median). Injected slow steps are 6–12× the median, so the tails of
normal traffic stay well below them; see docs/simulator.md for the overlap that remains.

Two ways of issuing tool calls, because real agents do both:
- `parallel`: one LLM turn issues independent calls that run concurrently (OpenAI-style
  parallel tool calls); none consumes another's output.
- `chain`: one turn's calls run one after another because each consumes the previous one's
  output (search → read the file found → patch it); `depends_on` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ArgsFn = Callable[[np.random.Generator], dict]


@dataclass(frozen=True)
class Tool:
    name: str
    median_ms: float
    sigma: float
    args: ArgsFn
    kind: str = "tool"  # or "retrieval"
    cacheable: bool = False  # a result cache (second release onwards) makes it faster
    timeout_ms: float = 15_000.0


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


def _id(rng: np.random.Generator, prefix: str, digits: int = 6) -> str:
    return f"{prefix}{int(rng.integers(10 ** (digits - 1), 10**digits))}"


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


SUPPORT = Agent(
    name="customer-support", model="llama-3.1-70b", model_params_b=70, min_turns=2, max_turns=6,
    pattern="parallel", system_tokens=(1500, 2600), final_tokens=(120, 420), weight=0.30,
    tools=(
        Tool("lookup_customer", 120, 0.30, lambda r: {"customer_id": _id(r, "C", 7)}, cacheable=True),
        Tool("get_order", 180, 0.30, lambda r: {"order_id": _id(r, "A", 6),
                                                 "include_items": bool(r.random() < 0.5)}, cacheable=True),
        Tool("get_shipment", 260, 0.35, lambda r: {"tracking": _id(r, "1Z", 9)}),
        Tool("search_kb", 90, 0.30, lambda r: {"query": _words(r, _WORDS, 3), "top_k": 5},
             kind="retrieval", cacheable=True),
        Tool("create_ticket", 320, 0.30, lambda r: {"priority": str(r.choice(["low", "normal", "high"])),
                                                     "subject": _words(r, _WORDS, 4)}),
        Tool("issue_refund", 420, 0.30, lambda r: {"order_id": _id(r, "A", 6),
                                                    "amount": round(float(r.uniform(5, 300)), 2)}),
    ),
)

CODING = Agent(
    name="coding-agent", model="qwen2.5-coder-32b", model_params_b=32, min_turns=4, max_turns=12,
    pattern="chain", system_tokens=(3000, 4800), final_tokens=(200, 700), weight=0.20, max_calls=3,
    tools=(
        Tool("search_code", 350, 0.35, lambda r: {"query": _words(r, _CODE, 2), "path": "src/"}),
        Tool("read_file", 45, 0.30, lambda r: {"path": f"src/{_words(r, _CODE, 1).replace(' ', '_')}/"
                                                        f"mod_{int(r.integers(1, 999))}.py"}),
        Tool("apply_patch", 70, 0.30, lambda r: {"file": f"src/mod_{int(r.integers(1, 999))}.py",
                                                  "hunks": int(r.integers(1, 6))}),
        Tool("run_linter", 1200, 0.30, lambda r: {"paths": [f"src/mod_{int(r.integers(1, 999))}.py"]}),
        Tool("run_tests", 4500, 0.30, lambda r: {"selector": f"tests/test_{int(r.integers(1, 400))}.py",
                                                  "fail_fast": bool(r.random() < 0.5)},
             timeout_ms=60_000.0),
    ),
)

TRAVEL = Agent(
    name="travel-planner", model="llama-3.1-70b", model_params_b=70, min_turns=2, max_turns=6,
    pattern="parallel", system_tokens=(1800, 3000), final_tokens=(200, 600), weight=0.20,
    tools=(
        Tool("search_flights", 900, 0.40, lambda r: {"from": str(r.choice(_CITIES)), "to": str(r.choice(_CITIES)),
                                                      "date": _date(r), "adults": int(r.integers(1, 4))},
             cacheable=True),
        Tool("search_hotels", 700, 0.40, lambda r: {"city": str(r.choice(_CITIES)), "checkin": _date(r),
                                                     "nights": int(r.integers(1, 9))}, cacheable=True),
        Tool("get_weather", 150, 0.30, lambda r: {"city": str(r.choice(_CITIES)), "date": _date(r)},
             cacheable=True),
        Tool("convert_currency", 80, 0.25, lambda r: {"amount": round(float(r.uniform(20, 4000)), 2),
                                                       "to": str(r.choice(["EUR", "JPY", "USD", "GBP"]))}),
        Tool("book_option", 1200, 0.35, lambda r: {"offer_id": _id(r, "OF", 8)}),
    ),
)

CHECKOUT = Agent(
    name="checkout-agent", model="llama-3.1-8b", model_params_b=8, min_turns=1, max_turns=5,
    pattern="parallel", system_tokens=(900, 1600), final_tokens=(60, 220), weight=0.20,
    tools=(
        Tool("search_inventory", 220, 0.30, lambda r: {"query": _words(r, _WORDS, 2),
                                                        "warehouse": str(r.choice(["eu-1", "us-2", "ap-1"]))}),
        Tool("get_price", 90, 0.25, lambda r: {"sku": _id(r, "SKU-", 7)}, cacheable=True),
        Tool("check_promotions", 120, 0.30, lambda r: {"cart_id": _id(r, "K", 8)}, cacheable=True),
        Tool("reserve_item", 300, 0.30, lambda r: {"sku": _id(r, "SKU-", 7), "qty": int(r.integers(1, 4))}),
    ),
)

RESEARCH = Agent(
    name="research-assistant", model="llama-3.1-70b", model_params_b=70, min_turns=3, max_turns=10,
    pattern="chain", system_tokens=(1600, 2800), final_tokens=(300, 900), weight=0.10, max_calls=2,
    tools=(
        Tool("web_search", 800, 0.40, lambda r: {"q": _words(r, _TOPICS, 1) + f" {int(r.integers(2019, 2027))}"}),
        Tool("fetch_page", 600, 0.40, lambda r: {"url": f"https://example.org/a/{int(r.integers(1, 10**6))}"}),
        Tool("vector_search", 90, 0.30, lambda r: {"query": _words(r, _TOPICS, 1), "k": 8}, kind="retrieval"),
    ),
)

AGENTS: tuple[Agent, ...] = (SUPPORT, CODING, TRAVEL, CHECKOUT, RESEARCH)

# The tool a regressed release makes slower, and by how much (see generate.release_effects).
REGRESSED_TOOL = "search_inventory"
REGRESSION_FACTOR = 2.0
CACHE_SPEEDUP = 0.75
