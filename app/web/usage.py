"""Tokens people's model requests took: the owner's Usage page (/settings/usage: everyone's, per
person and per model over a chosen range of days, a chart drawn here as SVG, and the daily
limits), and what one's account page shows of one's own (this month, by day and by model).

The chart is an SVG the server draws (no script): its title and description say what it
shows, and every number it draws is in a table beside it. Every form works as a plain form.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromQuery

from ..accounts import usage as usage_rules
from ..accounts.passwords import AccountError
from ..accounts.rules import Accounts
from ..store import Store
from ..store.usage import Used
from ..tables import Person
from . import render
from .toolkit import form_field, go, me, worker

PAGE = "/settings/usage"
RANGE_MAX = 366   # days one page shows
RANGE_DAYS = 30   # the range shown when none is chosen: the last 30 days, today's included
LIMIT_FIELD_MAX = 40
SAVED = {"limits": "Saved: the daily limits apply from the next message."}

# The chart's drawing, in its own units (the SVG scales to the page's width)
CHART_WIDTH, CHART_HEIGHT, CHART_TOP, CHART_BOTTOM, CHART_LEFT = 720, 200, 12, 24, 56
AXIS_STEPS = 4  # the axis's lines above its zero
NARROW_WIDTH = 400  # the account page's column


def sees_everyones(person: Person) -> bool:
    """Who sees everyone's usage and sets the limits: the owner alone (admins manage people and
    connections, not what people may spend: docs/usage.md)."""
    return person.owner


def everyones_only(request: Request) -> Person:
    """Someone else's usage is not a member's to see: 403, in words that say where theirs is."""
    person = me(request)
    if not sees_everyones(person):
        raise HTTPException(status_code=403, detail=(
            "Only the owner sees everyone’s usage. Yours is on your account page."))
    return person


@dataclass(frozen=True)
class Bar:
    day: str
    used: Used
    x: float
    width: float
    prompt_y: float      # tokens in: the lower part of the bar
    prompt_height: float
    completion_y: float  # tokens out: stacked on top
    completion_height: float


@dataclass(frozen=True)
class Chart:
    """Tokens a day, as stacked bars (in below, out above): what _usage_chart.html draws."""

    bars: list[Bar]
    top: int            # the tokens the axis's top line stands for
    ticks: list[tuple[float, str]]  # (y, label) of the axis lines
    first: str
    last: str
    width: int          # of its drawing (narrower for a narrow column: its text stays readable)

    @property
    def total(self) -> int:
        return sum(b.used.total for b in self.bars)


def axis_step(n: int) -> int:
    """The step between the axis's AXIS_STEPS lines for a most of `n` tokens: a round number
    (1, 2, 2.5 or 5 times a power of ten, whole), so that every line's label is exact (steps of
    a top divided by four read "0, 0, 0, 0, 1" for a day of one token)."""
    want, scale = max(-(-n // AXIS_STEPS), 1), 1
    while True:
        for k in (1, 2, 2.5, 5):
            step = k * scale
            if step == int(step) and step >= want:
                return int(step)
        scale *= 10


def short(n: int) -> str:
    """An axis label: 2.5M, 40k, 300."""
    for size, mark in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:g}{mark}"
    return str(n)


def chart(days: list[str], by_day: dict[str, Used], width: int = CHART_WIDTH) -> Chart:
    """The bars of `days` (every day of the range, those with no tokens too), `width` units wide."""
    step = axis_step(max((u.total for u in by_day.values()), default=0))
    top = step * AXIS_STEPS
    inner = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM
    slot = (width - CHART_LEFT) / max(len(days), 1)
    bars = []
    for i, day in enumerate(days):
        used = by_day.get(day) or Used(day, 0, 0)
        h_in, h_out = inner * used.prompt / top, inner * used.completion / top
        base = CHART_TOP + inner
        bars.append(Bar(day, used, round(CHART_LEFT + i * slot + slot * 0.1, 2), round(max(slot * 0.8, 0.5), 2),
                        round(base - h_in, 2), round(h_in, 2), round(base - h_in - h_out, 2), round(h_out, 2)))
    ticks = [(round(CHART_TOP + inner * (1 - k / AXIS_STEPS), 2), short(step * k)) for k in range(AXIS_STEPS + 1)]
    return Chart(bars, top, ticks, days[0] if days else "", days[-1] if days else "", width)


def days_of(first: str, last: str) -> list[str]:
    """Every day from `first` to `last`, both included (at most RANGE_MAX)."""
    out, day = [], first
    while day <= last and len(out) < RANGE_MAX:
        out.append(day)
        day = usage_rules.days_before(day, -1)
    return out


def span_of(raw_first: str, raw_last: str, today: str) -> tuple[str, str, str]:
    """The range asked for (`from`, `to`), made sane: (first, last, what was wrong, '' when
    nothing). No day after today is shown; a range longer than RANGE_MAX keeps its end."""
    last = usage_rules.a_day(raw_last) if raw_last else today
    first = usage_rules.a_day(raw_first) if raw_first else usage_rules.days_before(min(last or today, today), RANGE_DAYS - 1)
    if first is None or last is None:
        return usage_rules.days_before(today, RANGE_DAYS - 1), today, "A day is written 2025-03-07: showing the last 30 days."
    first, last = sorted((min(first, today), min(last, today)))
    if first < usage_rules.days_before(last, RANGE_MAX - 1):
        return usage_rules.days_before(last, RANGE_MAX - 1), last, f"At most {RANGE_MAX} days at once: showing the last {RANGE_MAX} of them."
    return first, last, ""


def own_usage(store: Store, person: int) -> dict[str, Any]:
    """What one's account page shows: this month (UTC) by day and by model, and today's limit."""
    today = usage_rules.today()
    first = today[:8] + "01"
    return {"first": first, "last": today, "chart": chart(days_of(first, today), {
        str(u.key): u for u in store.usage_by("day", first, today, person)}, NARROW_WIDTH),
        "models": store.usage_by("model", first, today, person), "allowance": usage_rules.allowance(store, person)}


def page(request: Request, status_code: int = 200, **context: Any) -> Response:
    """The Usage page; `context`: what a form left (a problem, the limits as typed)."""
    s = worker(request)
    today = usage_rules.today()
    first, last, range_problem = span_of(request.query_params.get("from", ""), request.query_params.get("to", ""), today)
    people = Accounts(s.store).all()
    by_person = {u.key: u for u in s.store.usage_by("person", first, last)}
    today_by_person = {u.key: u.total for u in s.store.usage_by("person", today, today)}
    shown: dict[str, Any] = {"problem": None, "typed": {}, "saved": SAVED.get(request.query_params.get("saved", ""), "")}
    return render.page(
        request, "usage.html", status_code=status_code, first=first, last=last, today=today,
        range_problem=range_problem, people=people, by_person=by_person, today_by_person=today_by_person,
        models=s.store.usage_by("model", first, last),
        chart=chart(days_of(first, last), {str(u.key): u for u in s.store.usage_by("day", first, last)}),
        default_limit=s.store.default_token_limit(), limits=s.store.token_limits(), range_max=RANGE_MAX,
        presets=[(f"Last {n} days", usage_rules.days_before(today, n - 1)) for n in (7, 30, 90)],
        month=today[:8] + "01", **(shown | context))


@get(PAGE)
async def usage_page(request: Request) -> Response:
    everyones_only(request)
    return page(request)


@post(f"{PAGE}/limits")
async def set_limits(request: Request) -> Response:
    """The default limit for everyone and each person's own: all saved, or none and the form
    again as typed with the field at fault named."""
    everyones_only(request)
    s = worker(request)
    people = Accounts(s.store).all()
    typed = {"default": await form_field(request, "default", LIMIT_FIELD_MAX)}
    form = await request.form()
    for p in people:
        typed[f"limit-{p.id}"] = await form_field(request, f"limit-{p.id}", LIMIT_FIELD_MAX)
        typed[f"none-{p.id}"] = "1" if form.get(f"none-{p.id}") else ""
    try:
        field = "default"
        default = usage_rules.limit_from(typed["default"])
        own: dict[int, tuple[bool, int | None]] = {}
        for p in people:
            field = f"limit-{p.id}"
            tokens = usage_rules.limit_from(typed[field])
            own[p.id] = (True, None) if typed[f"none-{p.id}"] else (tokens is not None, tokens)
    except AccountError as e:
        return page(request, 400, problem=(field, str(e)), typed=typed)
    with s.store.write():
        s.store.set_default_token_limit(default)
        for person, (is_own, tokens) in own.items():
            s.store.set_token_limit(person, tokens, own=is_own)
    return go(request, f"{PAGE}?saved=limits#limits")


routes = [usage_page, set_limits]
