"""Runtime harness: run scripts under torchrun with an out-of-process probe (see harness.py).

sitecustomize.py in this folder is the probe itself; it is loaded by the interpreters the
harness starts (via PYTHONPATH), never imported by the tests.
"""
