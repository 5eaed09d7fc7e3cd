"""Layer 3: the evidence resolution reads, as one explicit value (evidence.py): what hardware said about each
capability claim (conf/conformance/) and measured kernel times (conf/perf/)."""
