"""kselect's selector: Hydra configs -> validated models -> rules -> a Selection per KV-cache group.

Knows only configs and pydantic models; never imports torch (except `platform=auto` detection).
"""
