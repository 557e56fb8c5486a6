"""The shop users' state machine: only valid transitions, realistic variety, preferences by user."""

import json
from collections import Counter

from hypothesis import given, settings, strategies as st

from replay.shop import CATEGORIES, ENDPOINTS, ShopUsers

LOGIN_ONLY = {"logout", "order_history", "write_review", "checkout", "pay"}


def _check_session_rules(events):
    """An oracle written apart from the state machine: replays each session's requests."""
    sessions: dict[str, dict] = {}
    for e in events:
        s = sessions.setdefault(e["session_id"], {"logged_in": False, "cart": 0, "checked_out": False, "last": None})
        ep, ok = e["endpoint"], e["status"] < 400
        assert ep in ENDPOINTS
        if ep in LOGIN_ONLY:
            assert s["logged_in"], f"{ep} before login in {e['session_id']}"
        if ep in ("login", "signup"):
            assert not s["logged_in"], f"{ep} while logged in"
        if ep in ("checkout", "remove_from_cart"):
            assert s["cart"] > 0, f"{ep} with an empty cart"
        if ep == "pay":
            assert s["checked_out"] and s["last"] == "checkout", "pay without a checkout just before"
        if ok:
            if ep == "login":
                s["logged_in"] = True
            elif ep == "logout":
                s["logged_in"] = False
            elif ep == "add_to_cart":
                s["cart"] += 1
            elif ep == "remove_from_cart":
                s["cart"] -= 1
            elif ep == "checkout":
                s["checked_out"] = True
            elif ep == "pay":
                s["cart"], s["checked_out"] = 0, False
        assert e["logged_in"] == s["logged_in"]
        s["last"] = ep
    return sessions


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sessions=st.integers(1, 50))
def test_the_state_machine_never_makes_an_invalid_transition(seed, sessions):
    users = ShopUsers(seed, concurrent_sessions=sessions)
    _check_session_rules([users.next_request().fields for _ in range(3000)])


def test_sessions_end_and_new_ones_start():
    users = ShopUsers(1, concurrent_sessions=10)
    seen = _check_session_rules([users.next_request().fields for _ in range(20000)])
    assert len(seen) > 200  # 10 concurrent slots went through many visits


def test_all_fifteen_endpoints_occur_with_realistic_variety():
    users = ShopUsers(2)
    events = [users.next_request().fields for _ in range(50000)]
    endpoints = Counter(e["endpoint"] for e in events)
    assert set(endpoints) == set(ENDPOINTS)
    assert endpoints["product_detail"] > endpoints["pay"] > 0  # browsing far outweighs buying
    statuses = Counter(e["status"] for e in events)
    assert statuses[200] > 0.5 * len(events) and any(s >= 500 for s in statuses) and statuses[401] > 0
    assert len({e["uri"] for e in events}) > 10000
    assert len({e["user_agent"] for e in events}) >= 5
    rts = sorted(e["rt"] for e in events)
    assert rts[len(rts) // 2] < rts[int(len(rts) * 0.99)] / 3  # a long tail of response times


def test_gender_and_age_weight_category_preferences():
    users = ShopUsers(3, concurrent_sessions=400)
    events = [users.next_request().fields for _ in range(60000)]
    browse = [e for e in events if e["endpoint"] == "product_list"]

    def share(category, **who):
        group = [e for e in browse if all(e[k] == v for k, v in who.items())]
        return sum(e["category"] == category for e in group) / len(group)

    assert share("beauty", gender="F") > 2 * share("beauty", gender="M")
    assert share("electronics", gender="M") > 1.5 * share("electronics", gender="F")
    assert share("home", age_band="50s+") > 1.5 * share("home", age_band="10s")
    assert {e["category"] for e in browse} == set(CATEGORIES)


def test_same_seed_same_requests():
    a, b = ShopUsers(9), ShopUsers(9)
    assert [a.next_request() for _ in range(500)] == [b.next_request() for _ in range(500)]


def test_each_request_is_rendered_as_json_dumps_renders_its_fields():
    users = ShopUsers(seed=11, concurrent_sessions=50)
    for _ in range(20000):
        request = users.next_request()
        assert "{" + request.json + "}" == json.dumps(request.fields)
