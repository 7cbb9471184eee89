"""`python -m backends.llamacpp.device_report`: the backends llama.cpp loaded here, the
devices they found and each GPU's bandwidth in a device-to-device copy (GB/s), as one line
of JSON (GGML_VK_VISIBLE_DEVICES, EMBER_GPU and VK_ICD_FILENAMES are read as the app
would). What `ember hw` asks a child for (app.runtime.gpu_devices), for reading by hand."""

from __future__ import annotations

import json
import logging
import sys

from backends.llamacpp.ggml_backends import measure_bandwidths, report

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    print(json.dumps(report() | {"copy_gbps": measure_bandwidths()}))
