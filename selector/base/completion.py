"""Tab completion for `kselect <command> ...` in bash (zsh: `autoload bashcompinit && bashcompinit` first).

    eval "$(kselect -sc install=bash)"      # or `kselect select -sc install=bash`: the same script

Hydra's own script registers the program name, which for a kselect command is two words; it then asks
`kselect -sc query=bash`, which is no command. kselect's script completes the command name itself and asks the
command (`kselect <command> -sc query=bash`) for the rest; the command hands Hydra the line without `kselect`
(for_hydra), so Hydra completes the command's own groups and keys.
"""

from __future__ import annotations

import os
import sys

SCRIPT = r"""_kselect_completion()
{
    local line="${COMP_LINE:0:$COMP_POINT}" cur="${COMP_WORDS[COMP_CWORD]}" choices
    if (( COMP_CWORD <= 1 )); then
        choices=$(COMP_LINE="$line" kselect -sc query=bash 2>/dev/null)
    else
        choices=$(COMP_LINE="$line" COMP_POINT=${#line} kselect "${COMP_WORDS[1]}" -sc query=bash 2>/dev/null)
    fi
    COMPREPLY=($(compgen -W "$choices" -- "$cur"))
}
COMP_WORDBREAKS=${COMP_WORDBREAKS//=}
complete -o nospace -o default -F _kselect_completion kselect"""

TOP_FLAGS = ("--help", "--version", "--debug")


def shell_completion(args: list[str], commands: list[str]) -> int:
    """`kselect -sc install=bash | uninstall=bash | query=bash` (query: the command names and kselect's flags)."""
    action, _, shell = (args[0] if args else "").partition("=")
    if shell != "bash" or action not in ("install", "uninstall", "query"):
        print(f"kselect: --shell-completion {' '.join(args) or '(nothing)'}: allowed: install=bash, uninstall=bash, "
              "query=bash (zsh: autoload bashcompinit && bashcompinit, then the bash script)", file=sys.stderr)
        return 2
    if action == "install":
        print(SCRIPT)
    elif action == "uninstall":
        print("complete -r kselect; unset -f _kselect_completion")
    else:
        print("\n".join([*commands, *TOP_FLAGS]))
    return 0


def wants(flags: list[str]) -> str | None:
    """The value of a command's `-sc <action>=<shell>` (install=bash, query=bash, ...), else None."""
    for i, f in enumerate(flags):
        if f in ("-sc", "--shell-completion") and i + 1 < len(flags):
            return flags[i + 1]
    return None


def for_hydra() -> None:
    """COMP_LINE without its first word (`kselect`): Hydra drops one program word, then sees the command's own."""
    if "COMP_LINE" not in os.environ:  # Hydra would raise KeyError: the query is bash's, never typed
        print("kselect: -sc query=bash is asked by the completion script (COMP_LINE unset); to install it: "
              "eval \"$(kselect -sc install=bash)\"", file=sys.stderr)
        sys.exit(2)
    line = os.environ["COMP_LINE"]
    words = line.lstrip().split(" ", 1)
    if len(words) == 2 and os.path.basename(words[0]) == "kselect":
        os.environ["COMP_LINE"] = words[1]
