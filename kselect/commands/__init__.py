"""Every `kselect <command>`, one file a command (kselect/cli.py maps the names to them). A file maps the command's
interface to library functions and holds no selection, measurement or rendering of its own. Two styles:

- config-driven commands are Hydra apps over a config (conf/config.yaml, or a structured config the library
  registers): `run_app(name, task, doc=...)` (selector/base/hydra_app.py) gives each the same `--help` (its own
  text above the config), Hydra's flags, and errors as one paragraph with exit 2; `main(argv)` composes the same
  config in-process (tests);
- tool commands parse their flags with argparse (`prog="kselect <name>"`) and run through `run_cli(main)`
  (selector/base/cli_errors.py): `--help` is argparse's, errors are one paragraph with exit 2, `--debug` re-raises.
  Each maps its flags onto the typed options of a library function (e.g. perf.py: PerfRun -> measurement/perf.run).

e2e.py is the one command line here that is not a `kselect` command: `python -m kselect.measurement.e2e` (the package's
__main__ delegates to it), a tool command over the harness's typed Options, which `kselect bench` steps fill instead.
"""
