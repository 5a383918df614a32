"""What the page shows of a plugin's request to the person (`ask` and `sample` items,
app/plugins/asks.py): the form built from an elicitation's schema with its values and errors,
the answer once given, a sampling request and the model's words. templates/_ask.html."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..plugins import asks as mcp_asks, forms as mcp_forms
from ..tables import Item, bounded_json

ASK_LABELS = {"waiting": "waiting for your answer", "accepted": "answered", "declined": "declined",
              "cancelled": "cancelled", "failed": "could not be shown", "stopped": "not answered",
              "lost": "not answered", "withdrawn": "not answered"}
SAMPLE_LABELS = {"approval": "waiting for your approval", "approved": "approved", "running": "the model is writing",
                 "done": "answered", "declined": "declined", "failed": "failed", "stopped": "not answered",
                 "lost": "not answered", "withdrawn": "not answered"}


@dataclass(frozen=True)
class Shown:
    """One field of the form as the page shows it."""

    field: mcp_forms.Field
    dom: str            # its element id (and, prefixed, its form name)
    value: Any
    error: str = ""

    def chosen(self, option: str) -> bool:
        return option in self.value if isinstance(self.value, list) else option == self.value

    @property
    def described_by(self) -> str:
        return " ".join(i for i, on in ((f"{self.dom}-h", bool(self.field.description or self.field.hint)),
                                        (f"{self.dom}-e", bool(self.error))) if on)


@dataclass(frozen=True)
class AskView:
    it: Item
    label: str
    waiting: bool
    fields: list[Shown] = field(default_factory=list)
    answered: list[tuple[str, str]] = field(default_factory=list)  # (label, value) once accepted
    note: str = ""      # how it ended, when it was not answered
    request: dict[str, Any] = field(default_factory=dict)  # a sampling request

    @property
    def state(self) -> str:
        return self.it.state


def prefix(it: Item) -> str:
    """The form names of an ask's fields start so: the conversation's one form (#decide) may
    carry more than one item's fields."""
    return f"a{it.id}-"


def ask_view(it: Item, typed: dict[str, Any] | None = None, errors: dict[str, str] | None = None) -> AskView:
    try:
        data = bounded_json(it.input or "{}")  # a plugin's request: parsed for a page within bounds
    except ValueError:
        data = {}
    if it.kind == "sample":
        return AskView(it, SAMPLE_LABELS.get(it.state, it.state), it.state == "approval" and not it.done,
                       note=it.output if it.state in ("failed", *mcp_asks.ENDED) else "", request=data)
    label = ASK_LABELS.get(it.state, it.state)
    waiting = it.state == "waiting" and not it.done
    try:
        form = mcp_forms.form_of(data.get("schema"))
    except mcp_forms.Unshowable:
        return AskView(it, label, False, note=it.output)
    if it.state == "accepted":
        try:
            content = bounded_json(it.output or "{}")
        except ValueError:
            content = {}
        answered = [(f.label, f.shown(content[f.key])) for f in form.fields if f.key in content]
        return AskView(it, label, False, answered=answered)
    values = typed if typed is not None else mcp_forms.initial(form)
    errors = errors or {}
    shown = [Shown(f, f"i{it.id}-{f.name}", values.get(f.name), errors.get(f.name, "")) for f in form.fields]
    return AskView(it, label, waiting, shown, note=it.output if not waiting else "")
