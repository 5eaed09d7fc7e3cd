"""Errors a user can act on: each names the config key, the bad value and what is allowed."""

from __future__ import annotations

from typing import Any


class KSelectError(Exception):
    """Base: the CLI prints the message (one paragraph) and exits with status 2."""


class ConfigError(KSelectError):
    def __init__(self, key: str, value: Any, allowed: Any, what: str = "value"):
        self.key, self.value, self.allowed = key, value, allowed
        allowed_s = ", ".join(map(str, allowed)) if isinstance(allowed, (list, tuple)) else str(allowed)
        super().__init__(f"invalid config: {key}: bad {what} {value!r}; allowed: {allowed_s}")


class SelectionError(KSelectError):
    """No valid backend, an invalid pin, or block sizes that cannot be unified: a
    `records.Failure` and the candidates' `records.Rejection`s, rendered as the message. The text is
    rendered when read: an objective's search refuses most of the combinations it asks about and
    shows few of those refusals."""

    def __init__(self, failure: Any, rejected: dict[str, list[Any]] | None = None):
        self.rejected = {k: tuple(v) for k, v in (rejected or {}).items()}
        self._failure, self._lines = failure, None
        super().__init__()

    def _text_lines(self) -> list[str]:
        if self._lines is None:
            self._lines = [self._failure.text] + [f"  {name}: {'; '.join(r.text for r in reasons)}"
                                                  for name, reasons in self.rejected.items()]
        return self._lines

    @property
    def failure(self) -> Any:
        f = self._failure
        if self.rejected and hasattr(f, "reasons") and f.reasons is None:
            # the failure's own text carries its reasons wherever it is shown alone (diff, sweep, gather, matrix)
            f = self._failure = f.model_copy(update={"reasons": tuple(x.strip() for x in self._text_lines()[1:])})
        return f

    def __str__(self) -> str:
        return "\n".join(self._text_lines())


def one_line(message: str) -> str:
    """A multi-line error (a SelectionError's failure and its reasons) as one line: nothing cut."""
    return " ".join(x.strip() for x in message.splitlines() if x.strip())


def format_validation_error(err: Any, root: str = "") -> str:
    """A pydantic ValidationError as 'key: got X; <what is allowed>' lines."""
    lines = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"] if p not in ("rule", "tombstone", "gemma4", "hf"))
        loc = ".".join(x for x in (root, loc) if x)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = e.get("input")
        got_s = "" if e["type"] == "missing" or isinstance(got, dict) or "got " in msg else f" (got {got!r})"
        # our own validators already name the full key
        named = not loc or msg.startswith(loc.split(".")[0] + ".")
        lines.append(f"{msg}{got_s}" if named else f"{loc}: {msg}{got_s}")
    return "invalid config: " + "; ".join(lines)
