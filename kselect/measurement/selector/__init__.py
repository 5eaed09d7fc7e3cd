"""The selector's own speed (`python3 -m kselect.measurement.selector.timing`): imports, select and a matrix diff."""
