"""Put first on PYTHONPATH by ``qsa-warmup record``: every Python process the recorded command
starts records its Triton compile requests (``$QSA_WARMUP_RECORD``)."""

from qsa_warmup.recording import start_recording_from_knobs

start_recording_from_knobs()
