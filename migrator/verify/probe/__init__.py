"""The runtime probe's folder. Never imported to probe anything: its path goes first on the
PYTHONPATH of the processes under observation, where Python's `site` module imports
sitecustomize.py from it at start-up (ddp-migrate verify's runs and the project's runtime tests).

Importing this package is cheap and harmless (it does not import sitecustomize.py); it only says
where the folder is.
"""
from pathlib import Path

#: The folder that holds sitecustomize.py: first on PYTHONPATH of a probed run.
PROBE_DIR = Path(__file__).resolve().parent
