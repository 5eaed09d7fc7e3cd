"""An error Hydra or OmegaConf raised composing a config, as one paragraph that names the overrides it is about and,
for a typo, the near key or option (suggest.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from . import suggest


def compose_error(e: BaseException, overrides: list[str] | None = None) -> str:
    """One paragraph for an error Hydra or OmegaConf raised while composing, naming the overrides
    it is about (those whose key the message names; else every override)."""
    parts = [str(e)]
    if e.__cause__ is not None and str(e.__cause__) not in parts[0]:
        parts.append(str(e.__cause__))
    text = " ".join(line.strip() for p in parts for line in p.split("Config search path")[0].splitlines() if line.strip())
    text = text.replace("See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details", "")
    text = text.strip() or e.__class__.__name__
    if any(w in text for w in ("mismatched input", "no viable alternative", "extraneous input", "token recognition")):
        text += ("; allowed: key=value overrides in Hydra's grammar (quote a value that holds = ( ) ~ $ or spaces: "
                 "key='value')")
    if "integer string conversion" in text:  # Python's int-digit limit: say which override, not 5000 digits twice
        limit = sys.get_int_max_str_digits()
        text = f"an integer of more than {limit} digits; allowed: a number within the key's bounds"
        overrides = [o for o in overrides if re.search(rf"\d{{{limit}}}", o)] or overrides
    if overrides:
        bad = [o for o in overrides if o.lstrip("+~").split("=")[0] in text] or list(overrides)
        return f"invalid config: {' '.join(map(_shown, bad))}: {text}"
    return "invalid config: " + text


def _shown(override: str) -> str:
    """An override as a message shows it: control characters escaped, a long one cut."""
    o = override if override.isprintable() else repr(override)
    return o if len(o) <= 120 else f"{o[:100]}...({len(o)} characters)"


def with_hint(message: str, overrides: list[str], config_dir: Path | None, config_name: str) -> str:
    """The message with the near key or option (suggest.py) in place of Hydra's offer to add the typo as a key."""
    hint = suggest.near(message, overrides, config_dir, config_name)
    if not hint:
        return message
    return re.sub(r"\s*To append to your config use \+\S+", "", message).rstrip(". ") + f"; {hint}"
