"""Imports for running the #15 tests against a tree from before the #15 work (4a53560).

Prepended to a copy of tests/selector/test_bad_input.py in place of its imports of
`kselect.selector.cli.call_main` and `kselect.selector.files` (neither existed). It adds no
check and no fix: `call_main` does what that tree's `run_cli` did (a KSelectError printed as one
line, exit 2; any other exception escapes, i.e. the traceback a user saw); the conformance runner
and git_conf are the same programs at their old homes; files.py's writer and reader are what the
old code did in their place: a plain write (`write_text`, `open(out, "w")`) and `yaml.safe_load`."""

import os
import sys

import kselect
from kselect.kernels import conformance as _old_conformance
from kselect.selector import diff as _old_diff
from kselect.selector.errors import KSelectError

sys.modules["kselect.conformance"] = _old_conformance  # moved to kselect/conformance.py by #15's merge
kselect.conformance = _old_conformance
sys.modules["kselect.selector.diff_sources"] = _old_diff  # git_conf moved to diff_sources.py later
import kselect.selector as _sel  # noqa: E402

_sel.diff_sources = _old_diff


def call_main(main, argv):
    old = sys.argv[:]
    sys.argv[:] = ["kselect", *argv]
    try:
        try:
            code = main(list(argv))
        except TypeError as e:
            if "positional argument" not in str(e):
                raise
            code = main()  # the old sweep.main() read sys.argv
    except KSelectError as e:
        print(f"kselect: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv[:] = old
    return code or 0


class FileError(Exception):
    """files.FileError did not exist: nothing raised it."""


def atomic_write(path, data):  # the old writers: write in place
    from pathlib import Path

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        os.fsync(f.fileno())
    return p


def load_yaml(path, what=""):  # the old readers: yaml.safe_load, no bounds
    import yaml
    from pathlib import Path

    return yaml.safe_load(Path(path).read_text())
