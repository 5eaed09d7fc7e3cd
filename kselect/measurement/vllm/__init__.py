"""vLLM's own selection beside ours (`python3 -m kselect.measurement.vllm.<name>`): the export round trip of
`output=vllm` commands through vLLM's own parser and chain (`export_roundtrip`, in the venv `setup.sh` builds), the
agreement of an oracle record with a rules option (`agree`) and the CI fixtures cut from oracle records
(`make_fixture`, `make_registry_fixture`). The oracle itself is `kselect oracle` (kselect/oracle/)."""
