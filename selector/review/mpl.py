"""matplotlib for the pictures (`kselect plot`): pyplot on the Agg backend, imported only when a picture is drawn."""

from __future__ import annotations

import logging


def pyplot():
    """matplotlib.pyplot on Agg. Its INFO records stay off the command's output: under Hydra's logging a first run
    printed `[HYDRA] generated new fontManager` between the command's own lines."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib  # noqa: PLC0415 - only a picture needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt
