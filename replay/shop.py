"""Shop users driven by a probabilistic state machine over the paper's 15 endpoints.

Each session belongs to a user with a gender and an age band that weight which categories they
browse. The session context (logged in, cart contents, page depth, a pending checkout) decides which
endpoints may follow (`allowed_next`): no checkout with an empty cart, no payment without a
checkout, no review, order history or logout before login, and a session ends more likely the
deeper it goes. Many sessions are interleaved, as on a real site.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import random
from dataclasses import dataclass, field

import numpy as np

from replay.events import Request

ENDPOINTS = (
    "signup", "login", "logout", "category_list", "product_list", "product_detail", "search",
    "add_to_cart", "view_cart", "remove_from_cart", "checkout", "pay", "order_history",
    "write_review", "read_reviews",
)
END = "end"
CATEGORIES = ("fashion", "beauty", "electronics", "sports", "home", "books", "toys", "grocery")
GENDERS = ("F", "M")
AGE_BANDS = ("10s", "20s", "30s", "40s", "50s+")

# Category preference multipliers by gender and by age band (a user's weight is their product).
_GENDER_PREF = {
    "F": (2.0, 2.5, 0.8, 0.8, 1.2, 1.0, 1.0, 1.1),
    "M": (0.8, 0.4, 2.2, 1.8, 0.9, 1.0, 0.8, 0.9),
}
_AGE_PREF = {
    "10s": (1.5, 1.2, 1.6, 1.2, 0.3, 0.8, 1.4, 0.3),
    "20s": (1.6, 1.5, 1.4, 1.2, 0.6, 0.9, 0.5, 0.6),
    "30s": (1.1, 1.1, 1.2, 1.0, 1.2, 1.0, 1.5, 1.1),
    "40s": (0.9, 1.0, 1.0, 0.9, 1.5, 1.1, 1.2, 1.4),
    "50s+": (0.7, 0.8, 0.7, 0.7, 1.5, 1.4, 0.6, 1.6),
}

# Base transition weights; `allowed_next` removes what the context forbids.
_BASE_WEIGHTS: dict[str, dict[str, float]] = {
    "start": {"category_list": 4, "product_list": 2, "search": 2, "login": 3, "signup": 0.5},
    "signup": {"login": 8, "category_list": 1},
    "login": {"category_list": 5, "product_list": 2, "search": 2, "order_history": 1, "view_cart": 1},
    "logout": {END: 1},
    "category_list": {"product_list": 8, "search": 1.5, "login": 1},
    "product_list": {"product_detail": 7, "product_list": 1.5, "search": 1, "category_list": 1},
    "product_detail": {"add_to_cart": 3, "read_reviews": 2, "product_list": 2, "search": 1,
                       "product_detail": 1, "write_review": 0.3},
    "search": {"product_detail": 6, "search": 1, "product_list": 1},
    "add_to_cart": {"view_cart": 3, "product_list": 2, "search": 1, "checkout": 1.5},
    "view_cart": {"checkout": 4, "remove_from_cart": 1, "product_list": 1.5},
    "remove_from_cart": {"view_cart": 2, "product_list": 2},
    "checkout": {"pay": 9, "view_cart": 1},
    "pay": {"order_history": 2, "write_review": 2, "category_list": 1.5, "logout": 2},
    "order_history": {"write_review": 2, "category_list": 1, "logout": 1.5},
    "write_review": {"read_reviews": 1, "category_list": 1, "logout": 2},
    "read_reviews": {"product_detail": 2, "add_to_cart": 2, "product_list": 1},
}

_LOGIN_ONLY = frozenset({"logout", "order_history", "write_review", "checkout", "pay"})
_ROUTES = {  # endpoint -> (method, path template, typical bytes, typical seconds)
    "signup": ("POST", "/api/users", 310, 0.080),
    "login": ("POST", "/api/login", 420, 0.045),
    "logout": ("POST", "/api/logout", 120, 0.010),
    "category_list": ("GET", "/api/categories", 2100, 0.015),
    "product_list": ("GET", "/api/products?category={category}&page={page}", 14500, 0.060),
    "product_detail": ("GET", "/api/products/{product}", 5200, 0.030),
    "search": ("GET", "/api/search?q={query}", 9800, 0.120),
    "add_to_cart": ("POST", "/api/cart/items", 350, 0.035),
    "view_cart": ("GET", "/api/cart", 1900, 0.025),
    "remove_from_cart": ("DELETE", "/api/cart/items/{product}", 240, 0.030),
    "checkout": ("POST", "/api/checkout", 880, 0.150),
    "pay": ("POST", "/api/orders/{order}/payment", 640, 0.350),
    "order_history": ("GET", "/api/orders", 4300, 0.070),
    "write_review": ("POST", "/api/products/{product}/reviews", 280, 0.055),
    "read_reviews": ("GET", "/api/products/{product}/reviews", 6100, 0.040),
}
_ERRORS = {  # endpoint -> (client-error status, probability)
    "login": (401, 0.06), "signup": (409, 0.04), "product_detail": (404, 0.01), "pay": (402, 0.03),
    "add_to_cart": (409, 0.01),
}
_SERVER_ERROR_P = 0.003
_QUERIES = ("sneakers", "laptop", "lipstick", "yoga+mat", "desk+lamp", "novel", "lego", "coffee", "headphones",
            "jacket", "serum", "tent", "blender", "puzzle", "rice")
_USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "okhttp/4.12.0",
)


@dataclass
class Session:
    """One visit: who the user is and what the visit has done so far."""

    session_id: str
    user_id: int
    gender: str
    age_band: str
    has_account: bool
    user_agent: str
    remote_addr: str
    category_cum_weights: tuple[float, ...]
    state: str = "start"
    logged_in: bool = False
    cart: list[int] = field(default_factory=list)
    pending_order: int | None = None
    page_depth: int = 0
    json_who: str = field(init=False, repr=False)  # the fields that never change in a session, as JSON
    json_client: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # As json.dumps writes them: the strings come from this module's tables and need no escaping.
        self.json_who = (f'"session_id": "{self.session_id}", "user_id": {self.user_id}, "gender": "{self.gender}", '
                         f'"age_band": "{self.age_band}"')
        self.json_client = f'"remote_addr": "{self.remote_addr}", "user_agent": "{self.user_agent}"'


_AGE_CUM_WEIGHTS = tuple(itertools.accumulate((1, 3, 3, 2, 1.5)))


@functools.lru_cache(maxsize=None)
def _category_cum_weights(gender: str, age_band: str) -> tuple[float, ...]:
    """Cumulative category weights of a user: the product of their gender's and age band's preferences."""
    return tuple(itertools.accumulate(g * a for g, a in zip(_GENDER_PREF[gender], _AGE_PREF[age_band])))


@functools.lru_cache(maxsize=None)
def _transitions(state: str, logged_in: bool, has_account: bool, cart: bool, pending: bool
                 ) -> tuple[tuple[str, ...], tuple[float, ...], float]:
    """Endpoints allowed after `state` in this context, their cumulative weights, and the base END weight."""
    weights = dict(_BASE_WEIGHTS[state])
    if not logged_in:
        for name in _LOGIN_ONLY:
            weights.pop(name, None)
        if has_account:
            weights.pop("signup", None)
    else:
        weights.pop("login", None)
        weights.pop("signup", None)
    if not cart:
        weights.pop("checkout", None)
        weights.pop("remove_from_cart", None)
    if not pending:
        weights.pop("pay", None)
    end = weights.pop(END, 0.0)
    return tuple(weights), tuple(itertools.accumulate(weights.values())), end


def _end_weight(session: Session, base: float) -> float:
    """Sessions end: ever more likely with depth, and always possible once a page was seen."""
    if session.state == "start":
        return base
    return base + 0.02 * session.page_depth + (0.0 if session.logged_in else 0.15)


def _context(session: Session) -> tuple[str, bool, bool, bool, bool]:
    return (session.state, session.logged_in, session.has_account, bool(session.cart),
            session.pending_order is not None)


def allowed_next(session: Session) -> dict[str, float]:
    """The endpoints (or `END`) that may follow, with their weights, given the session context."""
    names, cumulative, base_end = _transitions(*_context(session))
    weights = dict(zip(names, (b - a for a, b in zip((0.0,) + cumulative, cumulative))))
    end = _end_weight(session, base_end)
    if end > 0 or not weights:
        weights[END] = end or 1.0
    return weights


class ShopUsers:
    """Endless stream of shop requests from `concurrent_sessions` interleaved sessions."""

    def __init__(self, seed: int = 0, concurrent_sessions: int = 200) -> None:
        self._rng = random.Random(seed)
        self._normals_rng = np.random.default_rng(seed)
        self._normals: list[float] = []  # standard normal draws, made by numpy a block at a time
        self._seed = seed
        self._next_user = 0
        self._next_session = 0
        self._next_order = 0
        self.sessions = [self._new_session() for _ in range(concurrent_sessions)]

    def _new_session(self) -> Session:
        rng = self._rng
        self._next_user += 1
        self._next_session += 1
        gender = rng.choice(GENDERS)
        age = rng.choices(AGE_BANDS, cum_weights=_AGE_CUM_WEIGHTS)[0]
        return Session(
            session_id=f"s{self._seed:x}-{self._next_session:x}",
            user_id=rng.randrange(1, 500_000),
            gender=gender,
            age_band=age,
            has_account=rng.random() < 0.8,
            user_agent=rng.choice(_USER_AGENTS),
            remote_addr=f"198.51.100.{rng.randrange(1, 255)}",
            category_cum_weights=_category_cum_weights(gender, age),
        )

    def next_request(self) -> Request:
        """Advance one random live session by one step and describe the request it made."""
        rng = self._rng
        slot = int(rng.random() * len(self.sessions))
        session = self.sessions[slot]
        while True:
            names, cumulative, base_end = _transitions(*_context(session))
            total = cumulative[-1] if names else 0.0
            u = rng.random() * (total + _end_weight(session, base_end))
            if u < total:
                return self._step(session, names[bisect.bisect(cumulative, u)])
            session = self.sessions[slot] = self._new_session()

    def _normal(self) -> float:
        if not self._normals:
            self._normals = self._normals_rng.standard_normal(4096).tolist()
        return self._normals.pop()

    def _step(self, s: Session, endpoint: str) -> Request:
        rng = self._rng
        method, template, typical_bytes, typical_s = _ROUTES[endpoint]
        cum = s.category_cum_weights
        category = CATEGORIES[bisect.bisect(cum, rng.random() * cum[-1])]
        product = s.cart[-1] if endpoint == "remove_from_cart" else 1 + int(rng.random() * 99_999)
        status = 201 if method == "POST" else 200
        error = _ERRORS.get(endpoint)
        if error and rng.random() < error[1]:
            status = error[0]
        elif rng.random() < _SERVER_ERROR_P:
            status = rng.choice((500, 502, 503))
        ok = status < 400
        if ok:
            self._apply(s, endpoint, product)
        if "{" in template:
            uri = template.format(category=category, page=1 + int(rng.random() * 5), product=product,
                                  query=_QUERIES[int(rng.random() * len(_QUERIES))], order=s.pending_order or 0)
        else:
            uri = template
        s.state = endpoint
        s.page_depth += 1
        size = int(typical_bytes * math.exp(0.35 * self._normal())) if ok else 180
        rt = int(typical_s * math.exp(0.5 * self._normal()) * 1000 + 0.5) / 1000  # to the ms; round() costs more
        # json.dumps of the fields below, byte for byte, at a quarter of its cost: every string but the
        # session's (rendered once, with json.dumps) comes from this module's tables and needs no escaping.
        rendered = (f'"method": "{method}", "uri": "{uri}", "endpoint": "{endpoint}", "status": {status}, '
                    f'"bytes": {size}, "rt": {rt!r}, "category": "{category}", {s.json_who}, '
                    f'"logged_in": {"true" if s.logged_in else "false"}, {s.json_client}')
        return Request({
            "method": method,
            "uri": uri,
            "endpoint": endpoint,
            "status": status,
            "bytes": size,
            "rt": rt,
            "category": category,
            "session_id": s.session_id,
            "user_id": s.user_id,
            "gender": s.gender,
            "age_band": s.age_band,
            "logged_in": s.logged_in,
            "remote_addr": s.remote_addr,
            "user_agent": s.user_agent,
        }, rendered)

    def _apply(self, s: Session, endpoint: str, product: int) -> None:
        if endpoint == "signup":
            s.has_account = True
        elif endpoint == "login":
            s.logged_in = True
        elif endpoint == "logout":
            s.logged_in = False
        elif endpoint == "add_to_cart":
            s.cart.append(product)
        elif endpoint == "remove_from_cart":
            s.cart.pop()
        elif endpoint == "checkout":
            self._next_order += 1
            s.pending_order = self._next_order
        elif endpoint == "pay":
            s.cart.clear()
            s.pending_order = None
